"""The Content-Security-Policy in a real browser: no page triggers a violation, and the chat
(htmx, its WebSocket, the meter sized from data attributes by static/js/chat.js) still works.

Headless Chromium (Playwright) against a live daphne server in a spawned process, as in
tests/agents/chat/test_browser.py. Chromium reports each refused script, style or connection
as a console error ("Refused to ... because it violates the following Content Security Policy
directive") and as a ``securitypolicyviolation`` event; both are collected.
"""

from __future__ import annotations



from tests.agents.chat.conftest import CHAT_BOT_YML
from tests.browser import BROWSER_MARKS, LiveBrowserCase

pytestmark = BROWSER_MARKS

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI + " " + e.sourceFile + ":" + e.lineNumber + " " + (e.target && e.target.outerHTML ? e.target.outerHTML.slice(0, 120) : "")));
"""


class PagesUnderThePolicy(LiveBrowserCase):
    bot_yml = CHAT_BOT_YML

    def test_no_page_violates_the_policy_and_the_chat_still_works(self):
        from django.contrib.auth import get_user_model

        get_user_model().objects.create_superuser(username="root", password="root-pw-for-tests-1", email="r@x.test")
        context = self._browser.new_context()
        context.add_init_script(RECORD_VIOLATIONS)
        page = context.new_page()
        page.set_default_timeout(15000)
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
        violations: list[str] = []

        def visit(path: str) -> None:
            page.goto(f"{self.live_server_url}{path}")
            page.wait_for_load_state("networkidle")
            violations.extend(f"{path}: {v}" for v in page.evaluate("window.__csp"))

        visit("/accounts/login/")
        page.fill("input[name=username]", "root")
        page.fill("input[name=password]", "root-pw-for-tests-1")
        page.click("button[type=submit]")
        page.wait_for_url(f"{self.live_server_url}/")
        visit("/conversations/")
        page.click(".agent-pick:has(input[value=default]) button")
        page.wait_for_selector("#chat.is-connected")  # the WebSocket got through connect-src 'self'
        page.fill("#composer-text", "hello there, who are you?")
        page.press("#composer-text", "Enter")
        page.wait_for_function(
            "() => document.querySelector('#composer[data-state=idle]') && document.querySelectorAll('.msg.assistant').length"
        )
        width = page.eval_on_selector("#meter-bar .seg-messages", "el => el.getBoundingClientRect().width")
        left = page.eval_on_selector("#meter-size .size-threshold", "el => el.getAttribute('x1')")
        label = page.eval_on_selector("#threshold-label", "el => el.getBoundingClientRect().width")
        assert width > 0, "the meter's segment has no width: chat.js did not apply data-width"
        assert left.endswith("%") and left != "0%" and label > 0  # the threshold drawn without inline styles
        violations.extend(f"chat: {v}" for v in page.evaluate("window.__csp"))
        for path in ("/memory/", "/scopes/", "/settings/tokens/", "/admin/", "/admin/memory/storedmessage/", "/api/docs"):
            visit(path)
        page.wait_for_selector("#swagger-ui .info")  # Swagger UI rendered from /static/
        violations.extend(f"/api/docs: {v}" for v in page.evaluate("window.__csp"))
        context.close()
        assert violations == [] and console == [], (violations, console)
