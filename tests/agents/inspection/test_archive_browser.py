"""My archive and "Compact now", in headless Chromium against a live server: a conversation is
compacted on demand from its pruned page, archived when the user moves on to another one, found
by the start of a word on the archive page (marked, no scores), read whole, and removed from
memory after the confirmation. Screenshots at 1400 and 390 px, no page wider than a phone."""

from __future__ import annotations

import os

from tests.browser import BROWSER_MARKS, SCREENSHOTS, ChatBrowserCase

pytestmark = BROWSER_MARKS

DOCS_SHOTS = (
    SCREENSHOTS.parents[1] / "docs" / "screenshots" if os.environ.get("MODEX_DOC_SCREENSHOTS") == "1" else SCREENSHOTS
)

ARCHIVE_BOT_YML = """\
persistence:
  backend: file
model:
  provider: offline
  name: modex-offline
  context_window: 8192
agents:
  default:
    description: Test assistant with the long-term layers on.
    instructions: You are a test assistant.
    tools: [core_memory, archive_search, pruned_lookup, todo]
    memory:
      archive_enabled: true
      core_enabled: true
      compression_threshold: 3000
      keep_tokens: 120
"""


class ArchivePages(ChatBrowserCase):
    bot_yml = ARCHIVE_BOT_YML
    viewport = {"width": 1400, "height": 900}
    timeout_ms = 20000

    def fits(self, name: str) -> None:
        for width, height in ((1400, 900), (390, 844)):
            self.page.set_viewport_size({"width": width, "height": height})
            wide = self.page.evaluate("() => document.documentElement.scrollWidth")
            assert wide <= width, f"{name} at {width} px is {wide} px wide"
            self.page.screenshot(path=str(DOCS_SHOTS / f"{name}-{width}.png"), full_page=True)
        self.page.set_viewport_size({"width": 1400, "height": 900})

    def test_compact_now_then_find_read_and_remove_an_archived_conversation(self):
        page = self.page
        first = self.login_and_start()
        for text in ("Hello! I moved to Lisbon last week and the flat is lovely.",
                     "We still need a sofa and a desk for the study.",
                     "The neighbours recommended a market on Saturdays."):
            self.send(text)
            self.wait_idle()

        # Compact now, from the conversation's pruned page.
        page.goto(f"{first}pruned/")
        page.get_by_role("button", name="Compact now").click()
        page.wait_for_selector(".flash li.success")
        assert "Compacted:" in page.inner_text(".flash")
        assert page.locator(".pruned-block").count() >= 2

        # Moving on to another conversation archives this one.
        page.goto(f"{self.live_server_url}/conversations/")
        self.start_chat()
        self.send("Good morning.")
        self.wait_idle()

        page.goto(f"{self.live_server_url}/memory/default/archive/")
        assert "1 archived conversation" in page.inner_text("#list-h")
        assert "When you open another conversation with default" in page.inner_text(".lede")  # as just happened
        page.fill("#archive-q", "lisb")
        page.get_by_role("button", name="Search").click()
        page.wait_for_selector(".archive-hit mark")
        assert page.inner_text(".archive-hit mark >> nth=0").lower() == "lisbon"
        body = page.inner_text("main")
        assert "score" not in body.lower() and "0.00" not in body
        for leak in ("main_agent_memory", "session:", "composite:"):
            assert leak not in page.content(), leak
        self.fits("archive")

        page.click(".archive-hit-head a >> nth=0")
        page.wait_for_selector(".archive-msg")
        assert "sofa and a desk" in page.inner_text("main")
        self.fits("archive-conversation")

        page.get_by_role("link", name="Remove from memory").first.click()
        page.get_by_role("button", name="Remove from memory").click()
        page.wait_for_selector(".flash li.success")
        page.goto(f"{self.live_server_url}/memory/default/archive/?q=lisb")
        assert "Nothing found" in page.inner_text("main")
        assert not self.errors, self.errors
