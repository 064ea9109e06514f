"""The context viewer in a real browser: a meter section opens (click, or Enter on its link) to
what the model was sent, in a modal dialog that Esc closes, focus going back to the link; the
threshold label stays inside the meter. Headless Chromium against a live daphne server with the
offline model; the screenshot of the open viewer at 1400 px goes to docs/screenshots/ with
MODEX_DOC_SCREENSHOTS=1 (else artifacts/screenshots/).
"""

from __future__ import annotations

import os

from tests.browser import BROWSER_MARKS, SCREENSHOTS, ChatBrowserCase

pytestmark = BROWSER_MARKS

DOC_SHOTS = SCREENSHOTS.parents[1] / "docs" / "screenshots" if os.environ.get("MODEX_DOC_SCREENSHOTS") == "1" else SCREENSHOTS

BOT_YML = """\
persistence:
  backend: file
model:
  provider: offline
  name: modex-offline
  context_window: 16384
agents:
  default:
    description: Memory on.
    instructions: You are a helpful assistant. Use your memory tools to remember what matters to the user.
    tools: [core_memory, todo]
    memory:
      archive_enabled: true
      core_enabled: true
      compression_threshold: 15000   # near the usable window (15360): the label hangs at the meter's edge
"""


class ContextViewerInTheBrowser(ChatBrowserCase):
    bot_yml = BOT_YML
    viewport = {"width": 1400, "height": 900}

    def open_section(self, key: str) -> str:
        self.page.click(f"#legend-open-{key}")
        self.page.wait_for_selector("#context-dialog[open]")
        self.page.wait_for_selector(f'#context-dialog .context-section[data-section="{key}"]')
        return self.page.inner_text("#context-dialog")

    def test_a_section_opens_to_what_was_sent_and_closes_with_escape(self):
        page = self.page
        self.login_and_start()
        self.send("Remember that I live in Lisbon and grow basil on the balcony.")
        self.wait_idle()
        self.send("What do you know about me?")
        self.wait_idle()

        # Counts in words, names a user reads.
        legend = page.inner_text("#meter .legend")
        assert "Core memory" in legend and "file" in legend and "Messages" in legend
        assert "Formatting" not in legend and "Message framing" in legend

        # Click: the messages as sent, the latest message among them.
        text = self.open_section("messages")
        assert "What do you know about me?" in text and "as sent at turn 2" in text
        assert page.evaluate("document.activeElement.id") == "context-dialog-title"
        page.keyboard.press("Escape")
        page.wait_for_selector("#context-dialog:not([open])", state="attached")
        assert page.evaluate("document.activeElement.id") == "legend-open-messages", "focus back on the link"

        # Keyboard: Enter on the core memory link opens the files as sent.
        page.focus("#legend-open-core")
        page.keyboard.press("Enter")
        page.wait_for_selector('#context-dialog[open] .context-section[data-section="core"]')
        core = page.inner_text("#context-dialog")
        assert "USER.md · <user_profile>" in core and "Lisbon" in core and "tokens" in core
        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOC_SHOTS / "context-viewer-1400.png"))
        # On a phone the dialog takes the screen's width, no wider.
        page.set_viewport_size({"width": 390, "height": 844})
        box = page.locator("#context-dialog").bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390
        assert page.evaluate("document.querySelector('#context-dialog').scrollWidth <= document.querySelector('#context-dialog').clientWidth")
        page.screenshot(path=str(DOC_SHOTS / "context-viewer-390.png"))
        page.set_viewport_size(self.viewport)
        page.click("#context-dialog .context-close button")
        page.wait_for_selector("#context-dialog:not([open])", state="attached")
        page.locator(".chat-meter").screenshot(path=str(SCREENSHOTS / "context-meter-1400.png"))

        # The threshold label sits inside the meter, whole, though the threshold is near its end.
        label = page.locator("#threshold-label").bounding_box()
        meter = page.locator("#meter").bounding_box()
        assert label and meter and label["width"] > 0
        assert meter["x"] <= label["x"] and label["x"] + label["width"] <= meter["x"] + meter["width"]
        assert "The conversation's size is what cleanup measures" in page.inner_text("#meter")
        assert not self.errors, self.errors
