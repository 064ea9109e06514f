"""One way to drive headless Chromium in the browser tests.

Debian's Chromium (/usr/bin/chromium; `playwright install` cannot download browsers here, see
STACK.md) through Playwright. ``BROWSER_MARKS`` marks a module as browser tests, skipped with the
reason where Chromium is missing; ``launch_chromium`` starts one; ``LiveBrowserCase`` is a live
daphne server in a spawned process (it reads its settings from the environment, which the case
sets from ``server_env`` and restores) plus one browser for the whole class.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import pytest
from channels.testing import ChannelsLiveServerTestCase

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = REPO / "artifacts" / "screenshots"  # git-ignored

BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


def launch_chromium(playwright: Any) -> Any:
    """A headless Chromium browser of ``playwright`` (a started sync_playwright())."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


class LiveBrowserCase(ChannelsLiveServerTestCase):
    """A live server over ``bot_yml`` (written to a temporary folder) and a Chromium for the class."""

    serve_static = True
    bot_yml: ClassVar[str] = ""
    server_env: ClassVar[dict[str, str]] = {}

    @classmethod
    def setUpClass(cls):
        from playwright.sync_api import sync_playwright

        cls._tmp = Path(tempfile.mkdtemp(prefix="modex-browser-"))
        bot = cls._tmp / "bot.yml"
        bot.write_text(cls.bot_yml)
        env = {
            "DJANGO_ALLOWED_HOSTS": "localhost,127.0.0.1",
            "MODEX_SCOPES_FILE": str(bot),
            "MODEX_PERSISTENCE_BACKEND": "file",
            "DJANGO_ALLOW_ASYNC_UNSAFE": "true",  # the sync Playwright API runs an event loop here
            **cls.server_env,
        }
        cls._saved_env = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        cls._start_method = multiprocessing.get_start_method(allow_none=True)
        multiprocessing.set_start_method("spawn", force=True)
        super().setUpClass()
        cls._playwright = sync_playwright().start()
        cls._browser = launch_chromium(cls._playwright)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        try:
            cls._browser.close()
            cls._playwright.stop()
            super().tearDownClass()
        finally:
            multiprocessing.set_start_method(cls._start_method, force=True)
            for key, value in cls._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(cls._tmp, ignore_errors=True)


class ChatBrowserCase(LiveBrowserCase):
    """A signed-in user's chat page in a fresh browser context per test (``self.page``)."""

    username, password = "ada", "ada-pw-for-tests-1"
    viewport: ClassVar[dict[str, int]] = {"width": 1440, "height": 900}
    timeout_ms = 15000

    def setUp(self):
        from django.contrib.auth import get_user_model

        get_user_model().objects.create_user(username=self.username, password=self.password)
        self.context = self._browser.new_context(viewport=self.viewport)
        self.page = self.context.new_page()
        self.page.set_default_timeout(self.timeout_ms)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def tearDown(self):
        self.context.close()

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))

    def log_in(self) -> None:
        page = self.page
        page.goto(f"{self.live_server_url}/accounts/login/")
        page.fill("input[name=username]", self.username)
        page.fill("input[name=password]", self.password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{self.live_server_url}/")

    def start_chat(self) -> str:
        """Open a conversation with the default agent; its URL once the socket is connected."""
        self.page.click(".agent-pick:has(input[value=default]) button")
        self.page.wait_for_selector("#chat.is-connected")
        return self.page.url

    def login_and_start(self) -> str:
        self.log_in()
        self.page.goto(f"{self.live_server_url}/conversations/")
        return self.start_chat()

    def send(self, text: str) -> None:
        self._sent = text[:24]
        self.page.fill("#composer-text", text)
        self.page.press("#composer-text", "Enter")

    def watch(self, **predicates: str) -> None:
        """Note in ``window.__seen[name]`` whether the page ever showed each ``name``'s state
        (a JavaScript expression), however briefly. On a loaded machine a state can come and go
        between two of Playwright's polls, or within one burst of frames; a mutation observer
        looks after every change. Call before the action, read with ``wait_seen``."""
        self.page.evaluate(
            """(predicates) => {
                 const seen = window.__seen = Object.fromEntries(Object.keys(predicates).map((k) => [k, false]));
                 const tests = Object.entries(predicates).map(([k, expr]) => [k, new Function('return (' + expr + ');')]);
                 const look = () => { for (const [k, test] of tests) if (!seen[k] && test()) seen[k] = true; };
                 new MutationObserver(look).observe(document.body,
                   {subtree: true, childList: true, attributes: true, characterData: true});
                 look(); }""",
            predicates,
        )

    def wait_seen(self, *names: str, timeout: float | None = None) -> None:
        """Until every state ``names`` (of ``watch``) has been shown."""
        self.page.wait_for_function(
            "(names) => names.every((k) => window.__seen[k])", arg=list(names), timeout=timeout or self.timeout_ms
        )

    def wait_idle(self) -> None:
        """Until the message just sent is the last one of the user's on the page and its turn is over."""
        self.page.wait_for_function(
            "(sent) => { const users = document.querySelectorAll('.msg.user');"
            " return users.length && users[users.length - 1].textContent.includes(sent)"
            " && document.querySelector('#composer[data-state=idle]') && !document.querySelector('.msg.live'); }",
            arg=self._sent,
        )
