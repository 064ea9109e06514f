"""The chat as a first-time user meets it, in headless Chromium against a live daphne server:
the list keeps following a long message, a scrolled-up reader keeps their place, one stated
limit on a message, a reload mid-reply, the history before a cleanup, a 390 px phone.

Each test reproduces what a user tripped on (issue 19) and checks what they see now.
"""

from __future__ import annotations

import os

from tests.agents.chat.conftest import CHAT_BOT_YML
from tests.browser import BROWSER_MARKS, SCREENSHOTS, ChatBrowserCase

pytestmark = BROWSER_MARKS

FILLER = " ".join(["we are planning a long walking trip along the coast with friends"] * 8)
# How far the list is from its bottom, and whether an element is inside the list's visible box.
GAP_JS = "el => el.scrollHeight - el.scrollTop - el.clientHeight"
IN_VIEW_JS = """(sel) => { const list = document.getElementById('messages'); const els = list.querySelectorAll(sel);
  if (!els.length) return false; const r = els[els.length - 1].getBoundingClientRect(), box = list.getBoundingClientRect();
  return r.bottom <= box.bottom + 2 && r.bottom > box.top; }"""


class FirstUse(ChatBrowserCase):
    bot_yml = CHAT_BOT_YML
    server_env = {"MODEX_OFFLINE_CHUNK_DELAY_MS": "30"}
    viewport = {"width": 1400, "height": 900}
    timeout_ms = 20000

    def gap(self) -> float:
        return self.page.eval_on_selector("#messages", GAP_JS)


class ScrollingAndLimits(FirstUse):
    def test_a_long_message_its_reply_and_the_cleanup_notice_stay_in_view(self):
        page = self.page
        self.login_and_start()
        self.send("hello there")
        self.wait_idle()
        # Long enough to be many screens tall, short enough for the chat agent's 4,096-token window
        # (a message the window cannot hold is refused before it is stored, naming its limit).
        long = ("A long paste of notes about the coast walk, day by day, with every detail. " * 120)[:9000]
        self.send(long)
        self.wait_idle()
        # The reply, and the cleanup the long message caused, are at the bottom, in view.
        page.wait_for_selector(".notice.cleanup:not(.is-running)")
        assert self.gap() < 80, f"the list stopped following: {self.gap()} px below view"
        assert page.evaluate(IN_VIEW_JS, ".msg.assistant"), "the reply is in view"
        # Later replies too.
        self.send("and after that?")
        self.wait_idle()
        assert self.gap() < 80, f"the list stopped following: {self.gap()} px below view"
        assert page.evaluate(IN_VIEW_JS, ".msg.assistant")
        assert not self.errors, self.errors

    def test_one_limit_stated_before_sending_and_nothing_cut(self):
        page = self.page
        self.login_and_start()
        count = page.locator("#composer-count")
        assert count.inner_text() == "Up to 32,000 characters per message."
        # A 100 KB paste stays whole in the box, and the box says why it cannot be sent.
        paste = "x" * 100_000
        page.fill("#composer-text", paste)
        assert page.eval_on_selector("#composer-text", "el => el.value.length") == 100_000
        assert "100,000 of 32,000 characters: 68,000 too many" in count.inner_text()
        page.press("#composer-text", "Enter")
        page.wait_for_timeout(800)
        assert page.locator(".msg.user").count() == 0, "an over-long message is not sent"
        assert page.eval_on_selector("#composer-text", "el => el.value.length") == 100_000, "and not lost"
        self.shot("limit-over")
        # 30,000 CJK characters (90 KB) are within the characters limit: no frame error; the only
        # other bound is the model's window, and that refusal names its limit in tokens.
        cjk = "漢字仮名交じり文" * 3750
        page.fill("#composer-text", cjk)
        assert "30,000 of 32,000 characters." == count.inner_text()
        page.eval_on_selector("#composer", "el => { el.dataset.before = 'refusal'; }")
        page.press("#composer-text", "Enter")
        page.wait_for_selector(".notice.error")
        refusal = page.inner_text(".notice.error >> nth=-1")
        assert "context window" in refusal and "tokens" in refusal and "KiB" not in refusal, refusal
        # ... and once the composer is rendered anew (the turn's end), the refused text is in it,
        # whole, to be shortened there.
        page.wait_for_selector("#composer:not([data-before])", state="attached")
        assert page.input_value("#composer-text") == cjk
        # A CJK message the window holds is sent whole.
        fits = "漢字仮名交じり文" * 250  # 2,000 characters
        page.fill("#composer-text", fits)
        self._sent = fits[:24]
        page.press("#composer-text", "Enter")
        self.wait_idle()
        assert fits in page.inner_text(".msg.user >> nth=-1")
        assert count.inner_text() == "Up to 32,000 characters per message."
        assert not self.errors, self.errors


    def test_a_message_refused_while_a_reply_starts_comes_back_to_the_composer(self):
        page = self.page
        self.login_and_start()
        # The second message leaves before the page has heard that the first one started a turn
        # (both in one go): the server refuses it, and the shut composer, then the open one,
        # replace the box that still showed it.
        second = "and this one, typed before the first was taken"
        page.evaluate(
            """(second) => { const text = document.getElementById('composer-text');
                 text.value = 'the first message'; text.form.requestSubmit();
                 text.value = second; text.form.requestSubmit(); }""",
            second,
        )
        self._sent = "the first message"
        page.wait_for_selector(".notice.error >> text=still being written")
        self.wait_idle()
        page.wait_for_function("(t) => document.querySelector('#composer-text').value === t", arg=second)
        assert page.locator(".msg.user").count() == 1, "the refused message was not stored"
        self.shot("refused-message-kept")
        # Sent again, it is taken, and the box is empty after it.
        self._sent = second
        page.press("#composer-text", "Enter")
        self.wait_idle()
        assert page.locator(".msg.user").count() == 2
        assert page.input_value("#composer-text") == ""
        # Two refusals in one burst: a message the runtime refuses a moment after the next one was
        # refused as busy (a first turn asking a real endpoint for its window). The box gets back
        # the one sent last. The offline model refuses too fast to race, so the page's own
        # handlers get the events htmx would fire, in that order.
        kept = page.evaluate(
            """() => {
                 const chat = document.getElementById('chat'), form = document.getElementById('composer-form');
                 const text = document.getElementById('composer-text'), draft = document.getElementById('composer-draft');
                 const fire = (el, name, detail) => el.dispatchEvent(new CustomEvent(name, {bubbles: true, detail}));
                 fire(form, 'htmx:wsConfigSend', {parameters: {message: 'the earlier one'}});
                 fire(form, 'htmx:wsConfigSend', {parameters: {message: 'the later one'}});
                 text.value = 'the later one';
                 draft.setAttribute('data-text', 'the later one'); fire(chat, 'htmx:wsAfterMessage', {});
                 draft.setAttribute('data-text', 'the earlier one'); fire(chat, 'htmx:wsAfterMessage', {});
                 text.value = ''; fire(chat, 'htmx:wsAfterMessage', {});
                 return text.value; }"""
        )
        assert kept == "the later one"
        # A refusal that finds the box still holding its text, which the writer then edits away:
        # the edit is theirs, and nothing comes back later.
        left = page.evaluate(
            """() => {
                 const chat = document.getElementById('chat');
                 const text = document.getElementById('composer-text'), draft = document.getElementById('composer-draft');
                 text.value = 'refused, still in the box';
                 draft.setAttribute('data-text', 'refused, still in the box');
                 chat.dispatchEvent(new CustomEvent('htmx:wsAfterMessage', {bubbles: true, detail: {}}));
                 text.value = ''; text.dispatchEvent(new Event('input', {bubbles: true}));
                 chat.dispatchEvent(new CustomEvent('htmx:wsAfterMessage', {bubbles: true, detail: {}}));
                 return text.value; }"""
        )
        assert left == ""
        assert not self.errors, self.errors


class SlowReplies(FirstUse):
    server_env = {"MODEX_OFFLINE_CHUNK_DELAY_MS": "120"}  # a reply takes seconds: time to scroll, stop, reload

    def test_a_reader_scrolled_up_keeps_their_place_while_it_streams_and_after_stop(self):
        page = self.page
        self.login_and_start()
        for n in range(3):
            self.send(f"note {n}: {FILLER}")
            self.wait_idle()
        self.send(f"one more, a long one: {FILLER} {FILLER}")
        page.wait_for_selector(".msg.live .streaming")
        box = page.locator("#messages").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.wheel(0, -600)  # the reader scrolls up to reread something
        page.wait_for_function("() => { const l = document.getElementById('messages'); return l.scrollHeight - l.scrollTop - l.clientHeight > 300; }")
        page.wait_for_timeout(300)  # more of the reply streams in meanwhile
        top = page.eval_on_selector("#messages", "el => el.scrollTop")
        assert self.gap() > 300, "streaming did not pull the reader back down"
        page.click("button.stop")
        page.wait_for_selector(".notice.info >> text=Stopped.")
        after = page.eval_on_selector("#messages", "el => el.scrollTop")
        assert abs(after - top) < 120, f"the list jumped from {top} to {after} on stop"
        # Back at the bottom, it follows again.
        page.eval_on_selector("#messages", "el => { el.scrollTop = el.scrollHeight; }")
        self.send("are you still there?")
        self.wait_idle()
        assert self.gap() < 80
        assert not self.errors, self.errors

    def test_reload_mid_reply_resumes_the_reply_where_it_is(self):
        page = self.page
        url = self.login_and_start()
        self.send(f"tell me about it: {FILLER}")
        page.wait_for_selector(".msg.live .streaming")
        page.goto(url)  # reload while the reply is being written: the reply goes on on the server
        page.wait_for_selector("#chat.is-connected")
        # The reloaded page shows the reply so far, still being written, and the rest streams in.
        page.wait_for_selector('.msg.live .streaming:not(:empty)', timeout=20000)
        assert page.locator('#composer[data-state="running"]').count() == 1
        so_far = len(page.inner_text(".msg.live .streaming"))
        page.wait_for_function("(n) => { const c = document.querySelector('.msg.live .streaming');"
                               " return !c || c.textContent.length > n; }", arg=so_far)
        self._sent = "tell me about it"
        self.wait_idle()
        assert "tell me about it" in page.inner_text(".msg.user >> nth=-1")
        assert page.locator(".msg.assistant").count() == 1
        assert "stopped before the answer" not in page.inner_text(".msg.assistant >> nth=-1"), "it ran to its end"
        assert page.locator('#composer[data-state="idle"]').count() == 1
        self.send("are you there?")
        self.wait_idle()
        assert not self.errors, self.errors


#: Where the screenshots go: artifacts/ on an ordinary run, so the suite never dirties the checkout;
#: docs/screenshots/ (checked in, linked from README) with MODEX_DOC_SCREENSHOTS=1.
DOCS_SHOTS = (
    SCREENSHOTS.parents[1] / "docs" / "screenshots" if os.environ.get("MODEX_DOC_SCREENSHOTS") == "1" else SCREENSHOTS
)


class Screens(FirstUse):
    """Chat, scopes and memory at 1400 px and on a 390 px phone: no horizontal overflow, the
    conversation first, a composer of usable width. Screenshots go to DOCS_SHOTS."""

    def test_phone_width_and_the_screenshots(self):
        from django.contrib.auth import get_user_model

        get_user_model().objects.filter(username="ada").update(is_staff=True)
        page = self.page
        url = self.login_and_start()
        self.send("hello there, who are you?")
        self.wait_idle()
        self.send("todo: pack the rain jackets")
        self.wait_idle()
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        for width, height in ((1400, 900), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            for name, path in (("chat", url), ("scopes", f"{self.live_server_url}/scopes/"), ("memory", f"{self.live_server_url}/memory/")):
                page.goto(path)
                if name == "chat":
                    page.wait_for_selector("#chat.is-connected")
                page.wait_for_load_state("networkidle")
                overflow = page.evaluate("() => document.documentElement.scrollWidth")
                widest = page.evaluate("""(w) => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1)
                  .slice(0, 4).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ')""", width)
                assert overflow <= width, f"{name} at {width} px is {overflow} px wide: {widest}"
                page.screenshot(path=str(DOCS_SHOTS / f"{name}-{width}.png"))
        # On the phone the conversation is on the first screen and the message box is wide.
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(url)
        page.wait_for_selector("#chat.is-connected")
        page.locator("#composer-text").wait_for(state="visible")  # laid out, not only in the page
        box = page.locator("#composer-text").bounding_box()
        assert box["width"] >= 0.65 * 390, f"the message box is {box['width']} px wide"  # was 143 px
        assert page.locator("#messages").bounding_box()["y"] < 844 * 0.6, "the conversation starts on the first screen"
        assert page.evaluate("() => document.activeElement && document.activeElement.id") == "composer-text", "focused on load"
        # The offline notice can be dismissed, and stays dismissed after a reload.
        page.click("#offline-notice .banner-close")
        assert page.locator("#offline-notice").is_hidden()
        page.reload()
        page.wait_for_selector("#chat.is-connected")
        assert page.locator("#offline-notice").is_hidden()
        assert page.locator("#messages").bounding_box()["y"] < 844 / 3
        nav_right = page.evaluate("() => Math.max(...[...document.querySelectorAll('.topbar nav > *')].map(e => e.getBoundingClientRect().right))")
        assert nav_right <= 390, f"a nav item ends at {nav_right} px"
        assert not self.errors, self.errors
