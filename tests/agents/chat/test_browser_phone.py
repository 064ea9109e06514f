"""Modex on a 390 px phone, in headless Chromium against a live daphne server.

No word is broken in the middle on any page a user sees (a word whose letters land on two lines,
as "Revo|ke" or "S|E|Q" did), the conversation list and the context meter are drawers that open
and close from the chat header (with the keyboard too), and the message box is on the first
screen without scrolling. The same pages are checked at 1400 px, where the drawers are columns.
Screenshots go to artifacts/screenshots/, or to docs/screenshots/ with MODEX_DOC_SCREENSHOTS=1.
"""

from __future__ import annotations

import os

from django.urls import NoReverseMatch, reverse

from tests.agents.inspection.support import MEMORY_BOT_YML
from tests.browser import BROWSER_MARKS, SCREENSHOTS, ChatBrowserCase

pytestmark = BROWSER_MARKS

DOCS_SHOTS = (
    SCREENSHOTS.parents[1] / "docs" / "screenshots" if os.environ.get("MODEX_DOC_SCREENSHOTS") == "1" else SCREENSHOTS
)
# Every layer on (the memory pages have lines to show) and a small threshold (the pruned catalog
# has blocks to show after a few turns).
PHONE_BOT_YML = MEMORY_BOT_YML.replace("      core_enabled: true\n", "      core_enabled: true\n      compression_threshold: 700\n      keep_tokens: 250\n")
assert PHONE_BOT_YML.count("compression_threshold") == 1
FILLER = " ".join(["we are planning a long walking trip along the coast with friends"] * 8)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}

# Every word (a run of letters and digits: a break after "/" or "-" is a fair place to wrap) of
# every rendered text node, measured with a Range: one whose characters sit on two lines was
# broken mid-word. A string without spaces wider than half the screen (a path, a token, a URL)
# cannot be kept on one line of a phone and may break where it must; an ordinary word fits many
# times over.
SPLIT_WORDS_JS = """() => {
  const found = [], range = document.createRange(), limit = window.innerWidth / 2;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const where = (el) => { const parts = [];
    for (let e = el; e && e !== document.body && parts.length < 3; e = e.parentElement)
      parts.unshift(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.classList.length ? '.' + [...e.classList].join('.') : ''));
    return parts.join(' > '); };
  const measure = (node, start, length) => {  // the width of a piece of text and on how many lines it lies
    range.setStart(node, start);
    range.setEnd(node, start + length);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
    const lines = rects.length && rects.some((r) => Math.abs(r.top - rects[0].top) >= rects[0].height / 2) ? 2 : 1;
    return {width: rects.reduce((sum, r) => sum + r.width, 0), lines};
  };
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || !el.checkVisibility({visibilityProperty: true})) continue;
    for (const token of node.data.matchAll(/\\S+/g)) {
      if (measure(node, token.index, token[0].length).width > limit) continue;
      for (const m of token[0].matchAll(/[\\p{L}\\p{N}]{2,}/gu)) {
        if (measure(node, token.index + m.index, m[0].length).lines > 1) found.push(m[0] + ' in ' + where(el));
      }
    }
  }
  return found;
}"""

# The first of a drawer's rendered boxes, or null when it is not on screen.
ON_SCREEN_JS = """(sel) => { const el = document.querySelector(sel); if (!el) return null;
  const s = getComputedStyle(el); if (s.display === 'none' || s.visibility !== 'visible') return null;
  const r = el.getBoundingClientRect(); if (r.width < 1 || r.right <= 0 || r.left >= window.innerWidth) return null;
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width}; }"""


class Phone(ChatBrowserCase):
    bot_yml = PHONE_BOT_YML
    viewport = PHONE
    timeout_ms = 40000  # a turn on a busy machine, the first of a fresh server process

    def split_words(self) -> list[str]:
        return self.page.evaluate(SPLIT_WORDS_JS)

    def on_screen(self, selector: str):
        return self.page.evaluate(ON_SCREEN_JS, selector)

    def wait_open(self, selector: str) -> None:
        """Until the drawer has slid all the way in: wholly on screen."""
        self.page.wait_for_function(
            f"(sel) => {{ const box = ({ON_SCREEN_JS})(sel); return !!box && box.left >= -1 && box.right <= window.innerWidth + 1; }}",
            arg=selector,
        )

    def wait_closed(self, selector: str) -> None:
        """Until the drawer has slid out and is hidden."""
        self.page.wait_for_function(f"(sel) => ({ON_SCREEN_JS})(sel) === null", arg=selector)

    def focused_inside(self, selector: str) -> bool:
        return self.page.evaluate("(sel) => !!document.querySelector(sel).contains(document.activeElement)", selector)

    def focused_id(self) -> str:
        return self.page.evaluate("() => document.activeElement && document.activeElement.id")

    def chat_with_content(self, *, cleanup: bool = False) -> str:
        """A conversation with a remembered fact, a tool call and a few replies (and, with
        ``cleanup``, enough more for a cleanup to fill the pruned catalog); its URL."""
        url = self.login_and_start()
        self.send("Please remember that my name is Sam and I recently moved from Lisbon to Porto.")
        self.wait_idle()
        self.send("todo: pack the rain jackets and the waterproof map case")
        self.wait_idle()
        self.send("hello there, who are you?")
        self.wait_idle()
        for n in range(8 if cleanup else 0):
            self.send(f"day {n}: {FILLER}")
            self.wait_idle()
            if self.page.locator(".notice.cleanup:not(.is-running)").count():
                break
        else:
            assert not cleanup, "no cleanup came"
        return url

    def pages(self, chat_url: str) -> list[tuple[str, str]]:
        conversation = chat_url.rstrip("/").rsplit("/", 1)[-1]
        named = [
            ("home", reverse("home")),
            ("chat-start", reverse("chat:list")),
            ("pruned", reverse("chat:pruned", args=[conversation])),
            ("delete", reverse("chat:delete", args=[conversation])),
            ("memory", reverse("memory:index")),
            ("memory-agent", reverse("memory:agent", args=["default"])),
            ("tokens", reverse("memory:tokens")),
            ("password", reverse("memory:password")),
            ("scopes", reverse("scope_editor")),
            ("proposals", reverse("proposals:index")),
        ]
        try:  # the user's archive pages, where this checkout has them
            named.append(("archive", reverse("memory:archive", args=["default"])))
        except NoReverseMatch:
            pass
        return [(name, self.live_server_url + path) for name, path in named]

    # -- the tests ------------------------------------------------------------------------------

    def test_no_word_is_broken_mid_word_on_any_page(self):
        from django.contrib.auth import get_user_model

        page = self.page
        page.goto(f"{self.live_server_url}/accounts/login/")
        for size in (PHONE, DESKTOP):
            page.set_viewport_size(size)
            assert not self.split_words(), f"login at {size['width']} px: {self.split_words()}"
        page.set_viewport_size(PHONE)
        get_user_model().objects.filter(username=self.username).update(is_staff=True)
        chat_url = self.chat_with_content(cleanup=True)
        page.goto(f"{self.live_server_url}/settings/tokens/")
        page.fill("input[name=name]", "a script that backs up my notes")
        page.click("button:has-text('Create token')")
        page.wait_for_selector("#new-token")

        broken: dict[str, list[str]] = {}
        for size in (PHONE, DESKTOP):
            page.set_viewport_size(size)
            for name, url in [("chat", chat_url), *self.pages(chat_url)]:
                page.goto(url)
                if name == "pruned":
                    assert page.locator(".pruned-block").count(), "the pruned catalog has blocks to show"
                if name == "chat":
                    page.wait_for_selector("#chat.is-connected")
                page.wait_for_load_state("networkidle")
                assert page.evaluate("() => document.documentElement.scrollWidth") <= size["width"], f"{name} is too wide"
                if words := self.split_words():
                    broken[f"{name} at {size['width']} px"] = words
                page.screenshot(path=str(SCREENSHOTS / f"pages-{name}-{size['width']}.png"), full_page=True)
                if name == "chat" and size is PHONE:
                    # Inside the drawers too, and in the open menu.
                    for toggle, drawer in (("#conversations-toggle", "#conversations-drawer"),
                                           ("#meter-toggle", "#meter-drawer"), ("#menu-toggle", "#site-nav")):
                        page.click(toggle)
                        self.wait_open(drawer)
                        if words := self.split_words():
                            broken[f"{name} at {size['width']} px with {toggle} open"] = words
                        page.keyboard.press("Escape")
                        self.wait_closed(drawer)
        assert not broken, "\n".join(f"{where}: {'; '.join(words)}" for where, words in broken.items())
        assert not self.errors, self.errors

    def test_drawers_open_and_close_by_pointer_and_keyboard(self):
        page = self.page
        url = self.login_and_start()
        self.send("hello there")
        self.wait_idle()
        page.goto(url)
        page.wait_for_selector("#chat.is-connected")

        # Closed on a phone: the chat has the screen, the toggles say what they control.
        for toggle, drawer in (("#conversations-toggle", "#conversations-drawer"), ("#meter-toggle", "#meter-drawer")):
            assert page.get_attribute(toggle, "aria-expanded") == "false"
            assert page.get_attribute(toggle, "aria-controls") == drawer[1:]
            assert self.on_screen(drawer) is None, f"{drawer} shows while closed"

        # The conversation list: opened by a click, focus moves into it, Esc closes it and gives
        # the focus back to its toggle.
        page.click("#conversations-toggle")
        self.wait_open("#conversations-drawer")
        assert page.get_attribute("#conversations-toggle", "aria-expanded") == "true"
        assert self.focused_inside("#conversations-drawer")
        assert page.locator("#conversations-drawer .conv.is-active").is_visible()
        page.screenshot(path=str(DOCS_SHOTS / "chat-390-conversations.png"))
        page.keyboard.press("Escape")
        self.wait_closed("#conversations-drawer")
        assert page.get_attribute("#conversations-toggle", "aria-expanded") == "false"
        assert self.focused_id() == "conversations-toggle"

        # The meter: opened from the keyboard, closed by its close button; then opened again and
        # closed by a tap on the shade beside it.
        page.focus("#meter-toggle")
        page.keyboard.press("Enter")
        self.wait_open("#meter-drawer")
        assert page.locator("#meter").is_visible() and page.locator("#meter-chart").is_visible()
        assert self.focused_inside("#meter-drawer")
        assert page.get_attribute("#meter-toggle", "aria-expanded") == "true"
        page.screenshot(path=str(DOCS_SHOTS / "chat-390-context.png"))
        page.click("#meter-drawer [data-drawer-close]")
        self.wait_closed("#meter-drawer")
        assert self.focused_id() == "meter-toggle"
        page.click("#meter-toggle")
        self.wait_open("#meter-drawer")
        page.mouse.click(10, PHONE["height"] // 2)  # the shade left of the drawer
        self.wait_closed("#meter-drawer")
        assert page.get_attribute("#meter-toggle", "aria-expanded") == "false"

        # One drawer at a time: opening the list closes the meter.
        page.click("#meter-toggle")
        self.wait_open("#meter-drawer")
        page.evaluate("() => document.getElementById('conversations-toggle').click()")  # under the shade for a pointer
        self.wait_open("#conversations-drawer")
        self.wait_closed("#meter-drawer")
        assert page.get_attribute("#meter-toggle", "aria-expanded") == "false"

        # A conversation picked in the drawer opens, with the drawer closed on the new page.
        page.click("#conversations-drawer .conv a")
        page.wait_for_selector("#chat.is-connected")
        assert self.on_screen("#conversations-drawer") is None

        # The site menu: one line of header, the links behind a button.
        topbar = page.locator(".topbar").bounding_box()
        assert topbar["height"] <= 56, f"the header is {topbar['height']} px tall"
        assert not page.locator(".topbar nav a:has-text('Memory')").is_visible()
        assert page.get_attribute("#menu-toggle", "aria-expanded") == "false"
        page.click("#menu-toggle")
        assert page.locator(".topbar nav a:has-text('Memory')").is_visible()
        assert self.focused_inside("#site-nav")
        self.shot("phone-menu-open")
        page.keyboard.press("Escape")
        assert not page.locator(".topbar nav a:has-text('Memory')").is_visible()
        assert self.focused_id() == "menu-toggle"

        # On a tablet the list is a column again and only the meter is a drawer.
        page.set_viewport_size({"width": 900, "height": 1000})
        page.wait_for_function("() => innerWidth === 900")
        assert not page.locator("#conversations-toggle").is_visible() and not page.locator("#menu-toggle").is_visible()
        assert self.on_screen("#conversations-drawer .chat-sidebar") and self.on_screen("#meter-drawer") is None
        page.click("#meter-toggle")
        self.wait_open("#meter-drawer")
        self.shot("tablet-meter-open")
        page.keyboard.press("Escape")
        self.wait_closed("#meter-drawer")

        # At 1400 px the list and the meter are columns beside the chat, the toggles gone.
        page.set_viewport_size(DESKTOP)
        page.wait_for_function("() => innerWidth === 1400")
        for toggle in ("#conversations-toggle", "#meter-toggle", "#menu-toggle"):
            assert not page.locator(toggle).is_visible(), toggle
        chat_box = page.locator("#chat").bounding_box()
        side, meter = self.on_screen("#conversations-drawer .chat-sidebar"), self.on_screen("#meter-drawer .chat-meter")
        assert side and side["right"] <= chat_box["x"] and meter and meter["left"] >= chat_box["x"] + chat_box["width"]
        assert page.locator(".topbar nav a:has-text('Memory')").is_visible()
        assert not self.errors, self.errors

    def test_the_message_box_is_on_the_first_screen(self):
        page = self.page
        url = self.chat_with_content()
        for size in (PHONE, {"width": 375, "height": 667}):  # a tall phone and a small one
            page.set_viewport_size(size)
            page.goto(url)
            page.wait_for_selector("#chat.is-connected")
            assert page.locator("#offline-notice").is_visible(), "checked with the offline notice shown"
            assert page.evaluate("() => window.scrollY") == 0
            for selector in ("#composer-text", "#composer button.send"):
                page.locator(selector).wait_for(state="visible")  # laid out (a busy machine swaps it in late)
                box = page.locator(selector).bounding_box()
                assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= size["height"], f"{selector} at {size}: {box}"
            # The conversation gets most of the screen: the header and the notice stay compact.
            messages = page.locator("#messages").bounding_box()
            assert messages["height"] >= 0.45 * size["height"], f"messages {messages['height']} px of {size['height']}"
            page.screenshot(path=str(SCREENSHOTS / f"phone-chat-{size['width']}x{size['height']}.png"))
        for size, name in ((PHONE, "home-390"), (DESKTOP, "home-1400")):
            page.set_viewport_size(size)
            page.goto(self.live_server_url + "/")
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(DOCS_SHOTS / f"{name}.png"), full_page=True)
        assert not self.errors, self.errors
