"""The memory page item by item, in headless Chromium against a live server: what the agent was
told shows up line by line with its source; one line edited, one deleted, the whole file edited in
the textarea (stored with LF, though the browser sends CRLF), a version restored from the history,
everything forgotten after the confirmation. Screenshots at 1400 and 390 px, no page wider than
a phone."""

from __future__ import annotations

import json
import os

from tests.agents.inspection.support import MEMORY_BOT_YML
from tests.browser import BROWSER_MARKS, SCREENSHOTS, ChatBrowserCase

pytestmark = BROWSER_MARKS

#: artifacts/ on an ordinary run; docs/screenshots/ (linked from README) with MODEX_DOC_SCREENSHOTS=1.
DOCS_SHOTS = (
    SCREENSHOTS.parents[1] / "docs" / "screenshots" if os.environ.get("MODEX_DOC_SCREENSHOTS") == "1" else SCREENSHOTS
)


class MemoryItems(ChatBrowserCase):
    bot_yml = MEMORY_BOT_YML
    viewport = {"width": 1400, "height": 900}
    timeout_ms = 20000

    def user_md(self) -> dict:
        response = self.page.request.get(f"{self.live_server_url}/api/agents/default/core/USER.md")
        assert response.ok, response.status
        return json.loads(response.text())

    def item(self, text: str):
        return self.page.locator("#file-USER\\.md .mem-item", has_text=text)

    def test_lines_with_their_source_edited_deleted_restored_and_forgotten(self):
        page = self.page
        self.login_and_start()
        self.send("Please remember that my name is Sam and I recently moved from Lisbon to Porto.")
        self.wait_idle()
        self.send("Remember that I like jazz.")
        self.wait_idle()
        page.goto(f"{self.live_server_url}/memory/default/")

        # Each fact its own line, with where it came from.
        items = page.locator("#file-USER\\.md .mem-item-text")
        assert items.all_inner_texts() == ["Name: Sam", "Previously lived in Lisbon", "Lives in Porto", "Likes jazz"]
        source = self.item("Lives in Porto").locator(".mem-item-source").inner_text()
        assert source.startswith("the agent, in “") and "”" in source
        assert "One file shared by every agent you talk to" in page.inner_text("#file-USER\\.md header")
        for width, height in ((1400, 900), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            overflow = page.evaluate("() => document.documentElement.scrollWidth")
            assert overflow <= width, f"the memory page at {width} px is {overflow} px wide"
            page.screenshot(path=str(DOCS_SHOTS / f"memory-items-{width}.png"), full_page=True)
        page.set_viewport_size({"width": 1400, "height": 900})

        # Edit one line in place.
        self.item("Likes jazz").locator("summary").click()
        self.item("Likes jazz").locator("input[name=text]").fill("Likes jazz and tango")
        self.item("Likes jazz").get_by_role("button", name="Save").click()
        page.wait_for_selector(".flash li.success")
        assert "Likes jazz and tango" in items.all_inner_texts()

        # Delete one line.
        self.item("Previously lived in Lisbon").get_by_role("button", name="Delete").click()
        page.wait_for_selector(".flash li.success")
        assert items.all_inner_texts() == ["Name: Sam", "Lives in Porto", "Likes jazz and tango"]

        # The whole file in the textarea: typed line breaks reach the server as CRLF.
        page.click("#file-USER\\.md .mem-whole summary")
        area = page.locator("#file-USER\\.md textarea")
        area.fill("")
        area.type("Name: Sam\nLives in Porto\nLikes tango")
        page.get_by_role("button", name="Save USER.md").click()
        page.wait_for_selector(".flash li.success")
        stored = self.user_md()
        assert stored["text"] == "Name: Sam\nLives in Porto\nLikes tango" and "\r" not in stored["text"]

        # The history shows what changed; an older version comes back with one click.
        page.click("#file-USER\\.md .mem-history summary")
        diff = page.inner_text("#file-USER\\.md .mem-versions li >> nth=0")
        assert "Likes tango" in diff and "Likes jazz and tango" in diff
        page.screenshot(path=str(SCREENSHOTS / "memory-history-1400.png"), full_page=True)
        restore = page.locator("#file-USER\\.md .mem-versions button", has_text="Restore version").first
        label = restore.inner_text()
        restore.click()
        page.wait_for_selector(".flash li.success")
        assert label.replace("Restore version", "Restored version") in page.inner_text(".flash")
        assert "Likes jazz and tango" in self.user_md()["text"]

        # Forget everything: refused without the confirmation, done with it.
        page.fill("#forget-confirm", "yes please")
        page.get_by_role("button", name="Forget everything").click()
        page.wait_for_selector(".flash li.error")
        assert self.user_md()["text"] != ""
        page.fill("#forget-confirm", "forget")
        page.get_by_role("button", name="Forget everything").click()
        page.wait_for_selector(".flash li.success")
        assert self.user_md()["text"] == ""
        assert page.locator("#file-USER\\.md .mem-item-text").count() == 0
        page.set_viewport_size({"width": 390, "height": 844})
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        assert not self.errors, self.errors
