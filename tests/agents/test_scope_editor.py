"""The scope editor: access control, CSRF, saving, validation shown inline, conflicts."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.test import Client
from django.urls import reverse

from agents.declarations import adopt_boot_declaration, load_declaration, read_declaration
from agents.editor.service import load_editor, save_scope_edits

URL = "/scopes/"


def form_for(path, **changes) -> dict:
    """The form the page would post for the file as it is, with ``changes`` applied."""
    state = load_editor(path=path)
    data: dict = {"sha256": state.sha256, "nodes": []}
    for agent in state.agents:
        for view in (agent, *agent.subagents):
            data["nodes"].append(view.name)
            if view.node.is_main:
                for key in ("archive_enabled", "core_enabled"):
                    if getattr(view, key):
                        data[f"{view.name}.{key}"] = "on"
            data[f"{view.name}.compression_threshold"] = view.threshold
    for key, value in changes.items():
        name, field = key.split("__")
        full = f"{name}.{field}"
        if value is None or value is False:
            data.pop(full, None)
        else:
            data[full] = "on" if value is True else str(value)
    return data


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


def test_url_name():
    assert reverse("scope_editor") == URL


def test_anonymous_users_are_sent_to_login(client, bot_file):
    response = client.get(URL)
    assert response.status_code == 302
    assert response.url.startswith(reverse("login")) and "next=/scopes/" in response.url
    assert client.post(URL, {}).status_code == 302


def test_non_staff_users_are_forbidden(client, owner, bot_file):
    client.force_login(owner)
    original = bot_file.read_bytes()
    assert client.get(URL).status_code == 403
    assert client.post(URL, form_for(bot_file, default__archive_enabled=True)).status_code == 403
    assert bot_file.read_bytes() == original


def test_post_without_csrf_token_is_rejected(staff, bot_file):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    original = bot_file.read_bytes()
    response = client.post(URL, form_for(bot_file, default__archive_enabled=True))
    assert response.status_code == 403
    assert bot_file.read_bytes() == original


def test_post_with_csrf_token_from_the_page_saves(staff, bot_file):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    page = client.get(URL)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    data = form_for(bot_file, default__archive_enabled=True) | {"csrfmiddlewaretoken": token}
    assert client.post(URL, data).status_code == 200
    assert load_declaration(bot_file).find("default").memory_config.archive_enabled


def test_page_lists_the_tree_with_presets_and_effective_config(staff_client, bot_file):
    response = staff_client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    for text in ("default", "researcher", "reviewer", "main_agent_memory", "subagent_memory", "12,000", "6,000"):
        assert text in html
    assert html.index("default") < html.index("researcher") < html.index("reviewer")
    # Archive off (the reviewer): core memory is greyed out and disabled; on (default): free.
    core = re.search(r'<input[^>]*name="reviewer.core_enabled"[^>]*>', html).group(0)
    assert "disabled" in core
    core = re.search(r'<input[^>]*name="default.core_enabled"[^>]*>', html).group(0)
    assert "disabled" not in core and "checked" in core
    assert 'name="researcher.archive_enabled"' not in html  # subagents get a threshold only
    assert 'name="researcher.compression_threshold" value="6000"' in html
    assert 'placeholder="12,288 (preset)"' in html  # reviewer: no threshold override
    assert "chip-merged" in html  # experience merged in by the supplement


def test_saving_writes_the_file_and_shows_banner_and_diff(staff_client, bot_file):
    response = staff_client.post(URL, form_for(bot_file, default__archive_enabled=False, default__core_enabled=False))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Changes take effect after a restart." in html
    assert f"Saved to {bot_file}." in html
    assert "diff-add" in html and "archive_enabled: false" in html
    config = load_declaration(bot_file).find("default").memory_config
    assert not config.archive_enabled and not config.core_enabled
    assert "      archive_enabled: false    # long-term archive of every conversation, searchable\n" in bot_file.read_text()


def test_banner_names_the_repo_relative_path(settings, staff_client, tmp_path, bot_file, monkeypatch):
    settings.BASE_DIR = tmp_path
    response = staff_client.post(URL, form_for(bot_file, reviewer__archive_enabled=True))
    assert "Saved to config/bot.yml. Changes take effect after a restart." in response.content.decode()


def test_htmx_post_returns_only_the_editor_fragment(staff_client, bot_file):
    response = staff_client.post(
        URL, form_for(bot_file, reviewer__archive_enabled=True), headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="scope-editor">') and "<html" not in html
    assert "Changes take effect after a restart." in html


def test_core_without_archive_is_refused_inline(staff_client, bot_file):
    original = bot_file.read_bytes()
    response = staff_client.post(URL, form_for(bot_file, reviewer__core_enabled=True))
    assert response.status_code == 422
    html = response.content.decode()
    assert "Core memory is fed from the archive: switch the archive on too" in html
    assert bot_file.read_bytes() == original


def test_bad_threshold_is_refused_inline(staff_client, bot_file):
    original = bot_file.read_bytes()
    html = staff_client.post(URL, form_for(bot_file, researcher__compression_threshold="lots")).content.decode()
    assert "Enter a whole number of tokens" in html
    assert 'name="researcher.compression_threshold" value="lots"' in html and 'aria-invalid="true"' in html
    response = staff_client.post(URL, form_for(bot_file, researcher__compression_threshold=99999))
    assert response.status_code == 422
    assert "compression_threshold (99999) exceeds the context window (16384)" in response.content.decode()
    assert bot_file.read_bytes() == original


def test_all_problems_are_shown_at_once(staff_client, bot_file):
    form = form_for(bot_file, reviewer__core_enabled=True, researcher__compression_threshold=99999)
    html = staff_client.post(URL, form).content.decode()
    assert "Core memory is fed from the archive" in html
    assert "compression_threshold (99999) exceeds the context window (16384)" in html
    assert "core_enabled requires archive_enabled" not in html  # said once, by the form


def test_conflicting_concurrent_edit_is_refused_and_file_untouched(staff_client, bot_file):
    stale = form_for(bot_file, default__archive_enabled=True)
    bot_file.write_text(bot_file.read_text().replace("compression_threshold: 12000", "compression_threshold: 10000"))
    theirs = bot_file.read_bytes()
    response = staff_client.post(URL, stale)
    assert response.status_code == 409
    html = response.content.decode()
    assert "changed on disk since you opened the editor" in html and "Nothing was saved" in html
    assert bot_file.read_bytes() == theirs
    assert f'value="{hashlib.sha256(theirs).hexdigest()}"' in html  # the page now shows the current file


def test_clearing_a_threshold_returns_to_the_preset(staff_client, bot_file):
    staff_client.post(URL, form_for(bot_file, default__compression_threshold=""))
    default = load_declaration(bot_file).find("default")
    assert "compression_threshold" not in default.overrides and default.memory_config.threshold == 12288


def test_nothing_changed(staff_client, bot_file):
    original = bot_file.read_bytes()
    html = staff_client.post(URL, form_for(bot_file)).content.decode()
    assert "Nothing to save" in html
    assert bot_file.read_bytes() == original


def test_partial_post_leaves_unlisted_nodes_alone(bot_file):
    loaded = read_declaration(bot_file)
    outcome = save_scope_edits(
        path=bot_file, form={"sha256": loaded.sha256, "nodes": ["reviewer"], "reviewer.archive_enabled": "on"}
    )
    assert outcome.status == "saved"
    declaration = load_declaration(bot_file)
    assert declaration.find("reviewer").memory_config.archive_enabled
    assert declaration.find("default").overrides == loaded.declaration.find("default").overrides


def test_invalid_file_on_disk_shows_problems_and_no_form(staff_client, bot_file):
    bot_file.write_text("agents:\n  default:\n    memory:\n      core_enabled: true\n")
    html = staff_client.get(URL).content.decode()
    assert "modex.E016" in html and "agents.default.memory.core_enabled" in html
    assert '<form method="post" action="/scopes/"' not in html


def test_pending_restart_is_announced(staff_client, bot_file):
    adopt_boot_declaration(load_declaration(bot_file))
    assert "Restart pending" not in staff_client.get(URL).content.decode()
    staff_client.post(URL, form_for(bot_file, reviewer__archive_enabled=True))
    assert "Restart pending" in staff_client.get(URL).content.decode()


def test_a_threshold_below_what_a_cleanup_leaves_is_refused(staff_client, bot_file):
    """A threshold of 10 would compact away the user's own request on every turn."""
    original = bot_file.read_bytes()
    response = staff_client.post(URL, form_for(bot_file, default__compression_threshold=10))
    assert response.status_code == 422
    html = response.content.decode()
    assert "a cleanup cannot bring the session under the threshold (10)" in html
    assert bot_file.read_bytes() == original


def test_a_threshold_equal_to_the_window_is_refused_with_the_usable_window(staff_client, bot_file):
    original = bot_file.read_bytes()
    response = staff_client.post(URL, form_for(bot_file, default__compression_threshold=16384))
    assert response.status_code == 422
    html = response.content.decode()
    assert "compression_threshold (16384) is not below the usable window (15360 tokens" in html
    assert 'name="default.compression_threshold" value="16384"' in html and 'aria-invalid="true"' in html
    assert bot_file.read_bytes() == original
    # The bound is said before anyone trips over it.
    assert "it must stay below 15,360, the window less the room kept for the reply" in staff_client.get(URL).content.decode()


def test_a_threshold_at_or_below_keep_tokens_is_refused(staff_client, bot_file):
    bot_file.write_text(bot_file.read_text().replace("compression_threshold: 12000", "compression_threshold: 12000\n      keep_tokens: 3000", 1))
    original = bot_file.read_bytes()
    response = staff_client.post(URL, form_for(bot_file, default__compression_threshold=3000))
    assert response.status_code == 422
    assert "keep_tokens (3000) must be below the threshold (3000)" in response.content.decode()
    assert bot_file.read_bytes() == original


def test_a_layer_whose_budgets_do_not_fit_the_window_is_refused(staff_client, bot_file):
    """On a 4096-token window the archive's budget leaves no room for what a cleanup keeps."""
    text = bot_file.read_text().replace("context_window: 16384", "context_window: 4096")
    text = text.replace("compression_threshold: 12000", "compression_threshold: 3000", 1)
    # The shipped default has the long-term layers on: off here, so switching the archive on is the edit.
    text = text.replace("archive_enabled: true ", "archive_enabled: false", 1).replace("core_enabled: true ", "core_enabled: false", 1)
    bot_file.write_text(text.replace("compression_threshold: 6000", "compression_threshold: 1500", 1))
    state = load_editor(path=bot_file)
    assert state.agents and not state.problems, state.problems
    original = bot_file.read_bytes()
    response = staff_client.post(URL, form_for(bot_file, default__archive_enabled=True))
    assert response.status_code == 422
    html = response.content.decode()
    assert "the context window (4096 tokens) cannot hold what a cleanup leaves" in html
    assert bot_file.read_bytes() == original
