"""The chat page in a real browser: headless Chromium (Playwright) against a live daphne server.

The server runs in a spawned process (STACK.md) over a file-based SQLite test database, with a
declaration whose agent cleans up after a few turns and the offline model slowed down a little,
so streaming is visible. Screenshots go to artifacts/screenshots/ (git-ignored).
"""

from __future__ import annotations

import re
import time

from tests.agents.chat.conftest import CHAT_BOT_YML
from tests.browser import BROWSER_MARKS, ChatBrowserCase

FILLER = " ".join(["we are planning a long walking trip along the coast with friends"] * 8)

pytestmark = BROWSER_MARKS


class ChatInTheBrowser(ChatBrowserCase):
    bot_yml = CHAT_BOT_YML
    server_env = {"MODEX_OFFLINE_CHUNK_DELAY_MS": "30"}  # slow enough that streaming is visible

    # -- helpers ----------------------------------------------------------------------------

    def login_and_start(self) -> str:
        """Sign in and reach the chat the way a person does: through the nav."""
        self.log_in()
        self.page.click("nav >> text=Chat")
        self.page.wait_for_selector(".agent-pick")
        self.shot("chat-01-start")
        return self.start_chat()

    def meter_total(self) -> int:
        return int(self.page.inner_text("#meter .meter-total strong"))

    # -- the test ---------------------------------------------------------------------------

    def test_chat_streams_meters_cleans_up_and_survives_reload_and_reconnect(self):
        page = self.page
        url = self.login_and_start()
        assert "Offline model." in page.inner_text("#offline-notice")
        assert self.meter_total() == 0

        # Tokens stream into a live bubble while the completion count grows, Send shut (the box
        # stays open for the next message) and Stop open. The whole reply can take less time than
        # one poll of the page on a loaded machine, so the page itself notes what it showed.
        self.watch(
            running="document.querySelector('#composer[data-state=\"running\"]')",
            streaming="(() => { const c = document.querySelector('.msg.live .streaming');"
            " return c && c.textContent.length > 10 && +document.querySelector('#meter-completion').textContent > 0"
            " && document.querySelector('#composer-text').matches(':enabled')"
            " && document.querySelector('button.send').matches(':disabled')"
            " && document.querySelector('button.stop').matches(':enabled'); })()",
        )
        self.send("hello there, who are you?")
        # The first turn of a freshly started server process also warms it up (token counting,
        # the offline model): give it more than the default wait.
        self.wait_seen("running", "streaming", timeout=45000)
        self.shot("chat-02-streaming")  # mid-reply, unless the reply was quicker than that
        self.wait_idle()
        assert page.locator(".msg.live").count() == 0, "the live bubble became the final message"
        assert page.locator(".msg.assistant").count() == 1 and page.locator(".msg.user").count() == 1
        first_total = self.meter_total()
        assert first_total > 0 and page.locator("#meter-bar .seg-messages").count() == 1
        assert page.locator("#meter-chart svg .dot").count() == 1
        assert page.is_enabled("#composer-text")

        # A tool call shows as a collapsible card.
        self.send("todo: pack the rain jackets")
        self.wait_idle()
        assert page.locator("details.tool").count() == 1
        assert "pack the rain jackets" in page.locator("details.tool").text_content()

        # Past the threshold: cleanup appears as it happens, and the chart marks it.
        for n in range(8):
            self.send(f"day {n}: {FILLER}")
            self.wait_idle()
            if page.locator(".notice.cleanup:not(.is-running)").count():
                break
        notice = page.locator(".notice.cleanup:not(.is-running)").first
        assert "Cleanup finished" in notice.inner_text()
        assert re.search(r"\d+ messages? moved", notice.inner_text())
        assert page.locator("#meter-chart .cleanup-mark").count() == 1
        notice.scroll_into_view_if_needed()
        self.shot("chat-03-cleanup")

        # The notice links to the pruned catalog.
        notice.locator("a").click()
        page.wait_for_selector(".toc-table")
        assert page.locator(".toc-table tbody tr").count() >= 2
        assert page.locator(".pruned-block .block-head").first.inner_text().startswith("Message 1 · user · ")
        self.shot("chat-04-pruned")

        # A reload shows the history: the compact summary card, then the kept tail.
        page.goto(url)
        page.wait_for_selector("#chat.is-connected")
        assert page.locator(".msg.summary").count() == 1
        assert "Earlier messages were summarized" in page.inner_text(".msg.summary")
        assert page.locator("#meter-chart .cleanup-mark").count() == 1
        assert self.meter_total() > 0
        page.eval_on_selector("#messages", "el => { el.style.scrollBehavior = 'auto'; el.scrollTop = 0; }")
        self.shot("chat-05-reloaded-summary")

        # Stop mid-reply: the composer comes back and the conversation goes on.
        self.send(f"one more: {FILLER}")
        page.wait_for_selector(".msg.live .streaming")
        page.click("button.stop")
        page.wait_for_selector(".notice.info >> text=Stopped.")
        self.wait_idle()
        assert page.locator(".msg.live").count() == 0
        self.send("are you still there?")
        self.wait_idle()
        assert "still there" in page.inner_text(".msg.user >> nth=-1")

        # A dropped socket (the server restarts) reconnects and re-syncs the page.
        page.eval_on_selector("#messages", "el => el.insertAdjacentHTML('beforeend', '<p id=stale-marker>stale</p>')")
        # The banner may be up for less time than a poll takes (the socket reconnects as soon as the
        # server is back), so a listener that runs after chat.js's own records that it was shown.
        page.evaluate(
            """() => { window.bannerShown = null;
                 document.getElementById('chat').addEventListener('htmx:wsClose', () => {
                   const el = document.getElementById('connection');
                   if (!el.hidden && window.bannerShown === null) window.bannerShown = el.textContent; }); }"""
        )
        self.restart_server()
        page.wait_for_function("window.bannerShown !== null", timeout=10000)
        assert "Reconnecting" in page.evaluate("window.bannerShown")
        page.wait_for_selector("#chat.is-connected", timeout=30000)
        page.wait_for_selector("#stale-marker", state="detached")  # the stream was re-rendered from the session
        assert "still there" in page.inner_text(".msg.user >> nth=-1")
        self.send("back again")
        self.wait_idle()
        assert "back again" in page.inner_text(".msg.user >> nth=-1")

        # Keep going until the next cleanup: the final page, with its notice and the meter.
        for n in range(8):
            self.send(f"week {n}: {FILLER}")
            self.wait_idle()
            if page.locator(".notice.cleanup:not(.is-running)").count():
                break
        assert page.locator("#meter-chart .cleanup-mark").count() >= 2
        page.eval_on_selector("#messages", "el => { el.style.scrollBehavior = 'auto'; }")
        page.locator(".notice.cleanup").first.scroll_into_view_if_needed()
        self.shot("chat-06-final")
        assert not self.errors, self.errors

    def restart_server(self) -> None:
        """Stop the live server and start it again on the same port (sockets drop with 1006)."""
        cls = type(self)
        port = cls._port
        cls._server_process.terminate()
        cls._server_process.join()
        time.sleep(0.5)
        from functools import partial

        from channels.testing.live import make_application, set_database_connection

        cls._server_process = cls.ProtocolServerProcess(
            cls.host,
            partial(make_application, static_wrapper=cls.static_wrapper),
            setup=set_database_connection,
            port=port,
        )
        cls._server_process.start()
        assert cls._server_process.ready.wait(timeout=30), "the server came back"

    def test_compact_nows_notice_leaves_the_composer_in_the_window(self):
        page = self.page
        self.login_and_start()
        self.send("hello there, a short first message")
        self.wait_idle()
        page.click("form[action$='/compact/'] button")  # too short: a notice says so
        page.wait_for_selector(".flash li")
        assert "Too short to compact" in page.inner_text(".flash")
        self.shot("chat-compact-notice")
        composer = page.locator("#composer").bounding_box()
        assert composer["y"] + composer["height"] <= self.viewport["height"], composer
        assert page.evaluate("document.documentElement.scrollHeight") <= self.viewport["height"]
