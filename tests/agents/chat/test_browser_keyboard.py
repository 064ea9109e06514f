"""The chat page by keyboard and for a screen reader, in headless Chromium: the message box keeps
the focus after sending, Stop is one Tab away from it while a reply is written, Esc stops the
reply, and only finished replies are announced (the streamed text is in no live region)."""

from __future__ import annotations

import json

from tests.agents.chat.conftest import CHAT_BOT_YML
from tests.browser import BROWSER_MARKS, SCREENSHOTS, ChatBrowserCase

pytestmark = BROWSER_MARKS

FOCUSED = "() => document.activeElement && document.activeElement.id"


class KeyboardChat(ChatBrowserCase):
    bot_yml = CHAT_BOT_YML
    server_env = {"MODEX_OFFLINE_CHUNK_DELAY_MS": "150"}  # a reply takes seconds: time to Tab and Esc

    def focused(self) -> str:
        return self.page.evaluate(
            "() => { const el = document.activeElement; return el ? (el.id || el.className || el.tagName) : ''; }"
        )

    def test_focus_stays_in_the_box_stop_is_one_tab_away_and_esc_stops(self):
        page = self.page
        self.login_and_start()
        assert page.evaluate(FOCUSED) == "composer-text", "the box has the focus on load"

        # Typed and sent from the keyboard: the box keeps the focus, empty, while the reply is written.
        page.keyboard.type("a long answer please: " + "words " * 80)
        page.keyboard.press("Enter")
        page.wait_for_selector('#composer[data-state="running"]')
        page.wait_for_selector(".msg.live .streaming")
        page.wait_for_function(f"() => ({FOCUSED})() === 'composer-text'")
        assert page.input_value("#composer-text") == ""

        # One Tab reaches Stop (Send is shut while a reply is written); Shift+Tab goes back.
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.matches('button.stop')"), self.focused()
        page.keyboard.press("Shift+Tab")
        assert page.evaluate(FOCUSED) == "composer-text"

        # The next message can be typed meanwhile; Enter does not send it while the reply runs.
        page.keyboard.type("the next question")
        page.keyboard.press("Enter")
        assert page.locator(".msg.user").count() == 1

        # Esc stops the reply; the box keeps the focus and what was typed in it.
        page.keyboard.press("Escape")
        page.wait_for_selector(".notice.info >> text=Stopped.")
        page.wait_for_selector('#composer[data-state="idle"]')
        page.wait_for_function(f"() => ({FOCUSED})() === 'composer-text'")
        assert page.input_value("#composer-text") == "the next question"
        assert page.locator(".msg.live").count() == 0

        # Idle, one Tab from the box reaches Send.
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.matches('button.send')"), self.focused()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Enter")
        self._sent = "the next question"
        self.wait_idle()
        assert page.evaluate(FOCUSED) == "composer-text", "focus is back in the box after the reply"
        assert not self.errors, self.errors

    def test_only_finished_replies_are_announced(self):
        page = self.page
        self.login_and_start()
        # The message list and the streaming bubble are in no live region.
        assert page.evaluate("() => document.getElementById('messages').closest('[aria-live]') === null")
        # Every change of the live region during a turn is counted.
        page.evaluate(
            """() => { window.__announced = [];
                 const region = document.getElementById('announcer');
                 new MutationObserver(() => window.__announced.push(region.textContent))
                   .observe(region, {subtree: true, childList: true, characterData: true}); }"""
        )
        self.send("hello there, who are you?")
        page.wait_for_selector(".msg.live .streaming")
        assert page.evaluate("() => document.querySelector('.msg.live').closest('[aria-live]') === null")
        self.wait_idle()
        page.wait_for_function("() => window.__announced.length > 0")
        announced = page.evaluate("window.__announced")
        assert len(announced) == 1, announced
        reply = page.inner_text(".msg.assistant >> nth=-1 >> .md")
        assert announced[0].startswith("Reply finished: ")
        assert reply.split()[0] in announced[0]
        assert page.get_attribute("#announcer", "aria-live") == "polite"
        assert not self.errors, self.errors

    def test_typing_is_signalled_to_the_server_at_most_every_two_seconds(self):
        page = self.page
        sent: list[str] = []
        page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(str(payload))))
        self.login_and_start()
        signals = lambda: [frame for frame in sent if json.loads(frame).get("action") == "typing"]  # noqa: E731
        assert signals() == [], "nothing typed yet"
        page.keyboard.type("where")
        page.wait_for_timeout(300)
        assert len(signals()) == 1
        page.keyboard.type(" to go")  # within two seconds of the first: no second signal
        page.wait_for_timeout(300)
        assert len(signals()) == 1
        page.wait_for_timeout(2000)
        page.keyboard.type(" in May?")
        page.wait_for_timeout(300)
        assert len(signals()) == 2
        page.keyboard.press("Enter")
        self._sent = "where to go in May?"
        self.wait_idle()
        assert page.locator(".msg.user").count() == 1
        assert page.locator(".notice.error").count() == 0, "the server answers a typing frame with nothing"
        assert not self.errors, self.errors


class ReplaceTheLastExchange(ChatBrowserCase):
    bot_yml = CHAT_BOT_YML
    server_env = {"MODEX_OFFLINE_CHUNK_DELAY_MS": "10"}

    def test_edit_the_last_message_then_regenerate_the_reply(self):
        page = self.page
        self.login_and_start()
        assert page.locator("#exchange-actions").is_hidden(), "nothing to replace yet"
        self.send("my favourite colour is grene")
        self.wait_idle()
        page.wait_for_selector("#exchange-actions:not([hidden]) #edit-last")

        # Edit: the text comes into the box, focused, with a note; sending replaces the exchange.
        page.click("#edit-last")
        assert page.input_value("#composer-text") == "my favourite colour is grene"
        assert page.evaluate("() => document.activeElement.id") == "composer-text"
        assert page.locator("#composer-editing").is_visible()
        page.screenshot(path=str(SCREENSHOTS / "chat-edit-last-1400.png"))
        page.fill("#composer-text", "my favourite colour is green")
        self._sent = "my favourite colour is green"
        page.press("#composer-text", "Enter")
        self.wait_idle()
        page.wait_for_selector("#exchange-actions:not([hidden]) #edit-last")
        users = page.locator(".msg.user")
        assert users.count() == 1 and "colour is green" in users.inner_text(), "the old message is gone"
        assert page.locator(".msg.assistant").count() == 1
        assert page.locator("#composer-editing").is_hidden()

        # Regenerate: still one exchange, answered again.
        first_reply_id = page.get_attribute(".msg.assistant", "id")
        page.click("#regenerate")
        page.wait_for_function(
            "(old) => { const a = document.querySelectorAll('.msg.assistant');"
            " return a.length === 1 && a[0].id !== old && !document.querySelector('.msg.live')"
            " && document.querySelector('#composer[data-state=idle]'); }",
            arg=first_reply_id,
        )
        assert page.locator(".msg.user").count() == 1
        page.screenshot(path=str(SCREENSHOTS / "chat-exchange-actions-1400.png"))
        # The same page after a reload: the session holds one exchange.
        page.reload()
        page.wait_for_selector("#chat.is-connected")
        assert page.locator(".msg.user").count() == 1 and page.locator(".msg.assistant").count() == 1
        assert not self.errors, self.errors
