"""The scope editor in a real browser: log in as staff, switch layers on, save, see the banner.

Runs headless Debian Chromium (/usr/bin/chromium; `playwright install` cannot download
browsers here). CI installs it; without it the test is skipped with the reason.
"""

from __future__ import annotations

import re


import pytest
from playwright.sync_api import expect, sync_playwright

from agents.declarations import load_declaration
from tests.browser import BROWSER_MARKS, SCREENSHOTS, launch_chromium

pytestmark = BROWSER_MARKS


@pytest.fixture
def page(live_server, staff, bot_file):
    """A fresh Chromium page. Playwright starts after the database fixtures and stops before
    their teardown, so no ORM call ever runs beside its event loop (no need for
    DJANGO_ALLOW_ASYNC_UNSAFE)."""
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            yield context.new_page()
            context.close()
        finally:
            browser.close()


def test_staff_switches_archive_then_core_memory_on(transactional_db, live_server, staff, bot_file, page):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    # The shipped default has the long-term layers on: off here, so switching them on is the edit.
    text = bot_file.read_text().replace("archive_enabled: true ", "archive_enabled: false", 1)
    bot_file.write_text(text.replace("core_enabled: true ", "core_enabled: false", 1))
    page.goto(f"{live_server.url}/scopes/")
    expect(page).to_have_url(f"{live_server.url}/accounts/login/?next=/scopes/")
    page.get_by_label("Username").fill("staffer")
    page.get_by_label("Password").fill("staff-pw-1")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Scope editor")).to_be_visible()

    card = page.locator('section.agent-card[data-agent="default"]')
    archive = card.locator('input[name="default.archive_enabled"]')
    core = card.locator('input[name="default.core_enabled"]')
    expect(core).to_be_disabled()  # greyed out until the archive is on
    page.screenshot(path=str(SCREENSHOTS / "scope_editor.png"))

    card.locator("label.switch", has=page.locator('input[name="default.archive_enabled"]')).click()
    expect(archive).to_be_checked()
    expect(core).to_be_enabled()
    card.locator("label.switch", has=page.locator('input[name="default.core_enabled"]')).click()
    expect(core).to_be_checked()
    page.get_by_role("button", name="Save changes").click()

    banner = page.locator(".banner-saved")
    expect(banner).to_contain_text("Changes take effect after a restart.")
    expect(banner).to_contain_text(f"Saved to {bot_file}.")
    expect(page.locator(".diff-add").first).to_contain_text("archive_enabled: true")
    page.screenshot(path=str(SCREENSHOTS / "scope_editor_saved.png"))

    text = bot_file.read_text()
    # Written back in place, each comment kept on its line.
    assert re.search(r"^      archive_enabled: true +# long-term archive of every conversation, searchable$", text, re.M), text
    assert re.search(r"^      core_enabled: true +# SOUL.md / USER.md / MEMORY.md, fed by the Dream Engine$", text, re.M), text
    config = load_declaration(bot_file).find("default").memory_config
    assert config.archive_enabled and config.core_enabled
    # After the htmx swap the form is live again and reflects the file.
    expect(page.locator('input[name="default.core_enabled"]')).to_be_checked()
