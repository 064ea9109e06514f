"""The revocations and the long-conversation sync as a person sees them, in headless Chromium
against a live daphne server: a password changed in one browser closes the chat open in another,
and the page says so; a conversation deleted elsewhere closes its open chat, and the page says
so; a long conversation opens on its latest messages and "Load earlier messages" brings the rest
in order. Screenshots go to artifacts/screenshots/ (git-ignored)."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.registry import open_bundle
from tests.agents.chat.conftest import CHAT_BOT_YML
from tests.browser import BROWSER_MARKS, ChatBrowserCase

pytestmark = BROWSER_MARKS

NEW_PASSWORD = "a-brand-new-pw-for-ada-3"


class RevocationInTheBrowser(ChatBrowserCase):
    bot_yml = CHAT_BOT_YML

    def second_browser(self):
        """Another browser (its own cookies), signed in as the same user."""
        context = self._browser.new_context(viewport=self.viewport)
        page = context.new_page()
        page.set_default_timeout(self.timeout_ms)
        page.goto(f"{self.live_server_url}/accounts/login/")
        page.fill("input[name=username]", self.username)
        page.fill("input[name=password]", self.password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{self.live_server_url}/")
        return context, page

    def test_a_password_changed_in_another_browser_closes_this_chat_and_says_so(self):
        url = self.login_and_start()
        self.send("hello before the change")
        self.wait_idle()
        context, other = self.second_browser()
        try:
            other.click("nav >> text=Password")
            other.fill("input[name=old_password]", self.password)
            other.fill("input[name=new_password1]", NEW_PASSWORD)
            other.fill("input[name=new_password2]", NEW_PASSWORD)
            other.click("button:has-text('Change password')")
            other.wait_for_selector(".flash li:has-text('Your password was changed')")
            other.screenshot(path=str(self._shots / "security-password-changed.png"))
        finally:
            context.close()
        banner = self.page.locator("#connection")
        # Wait for the close's own words: a banner already showing (a reconnect on a busy
        # machine) must not be read in their place.
        self.page.wait_for_function(
            "() => !document.querySelector('#connection').hidden"
            " && document.querySelector('#connection').innerText.includes('You are signed out')",
            timeout=15000,
        )
        assert "You are signed out" in banner.inner_text()
        assert not self.page.locator("#chat.is-connected").count()
        self.shot("security-chat-signed-out")
        # The page is really signed out: a reload leads to the sign-in page.
        self.page.goto(url)
        assert "/accounts/login/" in self.page.url
        assert not self.errors, self.errors

    def test_a_conversation_deleted_in_another_tab_closes_its_chat_and_says_so(self):
        url = self.login_and_start()
        self.send("soon deleted")
        self.wait_idle()
        other = self.context.new_page()  # another tab of the same browser
        other.goto(url.rstrip("/") + "/delete/")
        other.click("form button[type=submit].danger, form button:has-text('Delete')")
        other.wait_for_url(re.compile(r".*/conversations/$"))
        banner = self.page.locator("#connection")
        self.page.wait_for_function(
            "() => document.querySelector('#connection').innerText.includes('This conversation no longer exists')",
            timeout=15000,
        )
        assert "This conversation no longer exists" in banner.inner_text()
        self.shot("security-chat-deleted")
        assert not self.errors, self.errors

    def test_a_long_conversation_opens_on_its_latest_messages_and_loads_the_rest_in_order(self):
        url = self.login_and_start()
        conversation_id = url.rstrip("/").rsplit("/", 1)[1]
        bundle = open_bundle("file", root=Path(settings.MODEX_WORKSPACE) / "memory")
        messages = []
        for n in range(45):
            messages += [Message(role="user", content=f"question {n:03d} " + "<" * 6000),
                         Message(role="assistant", content=f"answer {n:03d} " + "<" * 6000)]
        stored = bundle.messages.append(SessionScope(conversation_id), messages)
        self.page.reload()
        self.page.wait_for_selector("#chat.is-connected")
        self.page.wait_for_selector("#load-earlier")
        shown = self.seqs()
        assert shown and shown == [m.seq for m in stored][-len(shown):] and len(shown) < len(stored)
        self.shot("security-long-conversation")
        clicks = 0
        while self.page.locator("#load-earlier button").count():
            before = len(self.seqs())
            self.page.click("#load-earlier button")
            self.page.wait_for_function("(n) => document.querySelectorAll('#messages .msg').length > n", arg=before,
                                        timeout=60000)
            clicks += 1
            if clicks == 1:
                self.shot("security-load-earlier")
            assert clicks < 60
        assert self.seqs() == [m.seq for m in stored], "every message once, in order"
        assert clicks >= 2
        # The composer still works below the whole history.
        self.send("and one more")
        self.wait_idle()
        assert not self.errors, self.errors

    def seqs(self) -> list[int]:
        texts = self.page.eval_on_selector_all("#messages .msg footer.meta", "els => els.map(e => e.textContent)")
        return [int(m.group(1)) for t in texts if (m := re.search(r"#(\d+)", t))]

    @property
    def _shots(self):
        from tests.browser import SCREENSHOTS

        return SCREENSHOTS
