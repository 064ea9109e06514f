"""The results page in headless Chromium: a staff user sees every run drawn as bars (real runs
of ``manage.py memory_eval`` on the generated dataset, both mappings), the page obeys the
Content-Security-Policy, holds at 390 px, and a signed-in non-staff user is refused."""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

from django.core.management import call_command

from tests.agents.chat.conftest import CHAT_BOT_YML
from tests.browser import BROWSER_MARKS, SCREENSHOTS, LiveBrowserCase

pytestmark = BROWSER_MARKS

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
"""


def _make_runs(root: Path) -> None:
    for mapping in ("per-session", "single"):
        call_command(
            "memory_eval", "--mapping", mapping, "--workdir", str(root.parent / f"work-{mapping}"),
            "--out", str(root / "runs" / f"memory_eval-{mapping}"), stdout=io.StringIO(), stderr=io.StringIO(),
        )


class ResultsPage(LiveBrowserCase):
    bot_yml = CHAT_BOT_YML

    @classmethod
    def setUpClass(cls):
        cls._results = Path(tempfile.mkdtemp(prefix="modex-eval-results-")) / "results"
        cls.server_env = {"MODEX_EVAL_RESULTS": str(cls._results)}
        _make_runs(cls._results)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls._results.parent, ignore_errors=True)

    def log_in(self, page, username: str, password: str) -> None:
        page.goto(f"{self.live_server_url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{self.live_server_url}/")

    def test_staff_see_every_run_drawn_and_others_are_refused(self):
        from django.contrib.auth import get_user_model

        users = get_user_model().objects
        users.create_user(username="lead", password="lead-pw-for-tests-1", is_staff=True)
        users.create_user(username="ada", password="ada-pw-for-tests-1")
        context = self._browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_init_script(RECORD_VIOLATIONS)
        page = context.new_page()
        page.set_default_timeout(15000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        self.log_in(page, "lead", "lead-pw-for-tests-1")
        page.click("nav >> text=Evaluation")
        page.wait_for_url(f"{self.live_server_url}/evaluation/")
        runs = page.locator(".eval-run")
        assert runs.count() == 2
        text = page.inner_text(".eval-runs")
        assert "per-session" in text and "single" in text and "modex-offline (offline)" in text
        assert "window 32,768 · cleanup at 1,500 · keeps 500" in text
        # Bars drawn, with a width the browser lays out, coloured by the stylesheet.
        assert page.locator(".eval-run svg.chart").count() == 2 * 4
        bars = page.locator(".eval-run >> nth=0 >> figure[data-chart=recall] rect.series-0:has(title)")
        assert bars.count() == 4
        fill = page.eval_on_selector("figure[data-chart=recall] rect.series-0", "el => getComputedStyle(el).fill")
        assert fill == "rgb(49, 87, 213)", fill
        widths = page.eval_on_selector_all(
            "figure[data-chart=tokens] rect", "els => els.map(e => e.getBoundingClientRect().width)"
        )
        assert len(widths) == 8 and max(widths) > 100 and min(widths) > 0
        assert page.evaluate("window.__csp") == [] and not errors
        page.screenshot(path=str(SCREENSHOTS / "evaluation-1400.png"), full_page=True)
        # A phone: one column, nothing wider than the screen.
        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a 390 px phone"
        page.screenshot(path=str(SCREENSHOTS / "evaluation-390.png"), full_page=True)
        context.close()

        context = self._browser.new_context()
        page = context.new_page()
        self.log_in(page, "ada", "ada-pw-for-tests-1")
        response = page.goto(f"{self.live_server_url}/evaluation/")
        assert response.status == 403
        assert page.locator("nav >> text=Evaluation").count() == 0
        context.close()
