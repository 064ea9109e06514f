"""Boot-time validation: manage.py check / migrate refuse an invalid declaration."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agents.declarations.checks import check_scope_declaration
from agents.declarations import booted_declaration
from tests.agents.conftest import CORPUS, REPO_ROOT, SHIPPED_BOT_YML


def manage(*args: str, scopes_file, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MODEX_"))}
    env.update(
        DJANGO_DEBUG="true",
        DJANGO_SETTINGS_MODULE="modex_web.settings",
        MODEX_SCOPES_FILE=str(scopes_file),
        MODEX_WORKSPACE=str(tmp_path / "workspace"),
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_passes_on_the_shipped_declaration(tmp_path):
    result = manage("check", scopes_file=SHIPPED_BOT_YML, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_fails_listing_every_problem_with_path_and_line(tmp_path):
    bad = CORPUS / "invalid" / "everything_at_once.yml"
    result = manage("check", scopes_file=bad, tmp_path=tmp_path)
    assert result.returncode != 0
    output = result.stderr
    for line in (
        "(modex.E012) persistence.backend (line 10): 'postgres' is not one of: file, sqlite.",
        "(modex.E013) agents.default.tools[0] (line 13): unknown tool 'tood'. Did you mean 'todo'?",
        "(modex.E016) agents.default.memory.core_enabled (line 16): core_enabled requires archive_enabled",
        "(modex.E011) agents.default.memory.compression_threshold (line 17): expected a whole number",
        "(modex.E018) agents.default.subagents.helper.tool_supplements (line 20):",
        "(modex.E017) agents.default.subagents.helper.memory.core_enabled (line 22):",
        "(modex.E015) agents.helper (line 23):",
    ):
        assert line in output, output
    assert "System check identified 7 issues" in output
    assert "HINT: Set archive_enabled: true as well" in output


def test_migrate_refuses_to_run_on_an_invalid_declaration(tmp_path):
    bad = tmp_path / "bot.yml"
    bad.write_text("agents:\n  default:\n    memory:\n      core_enabled: true\n")
    result = manage("migrate", "--noinput", scopes_file=bad, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "(modex.E016) agents.default.memory.core_enabled (line 4)" in result.stderr
    assert "Applying" not in result.stdout


def test_runserver_refuses_to_start_on_an_invalid_declaration(tmp_path):
    bad = tmp_path / "bot.yml"
    bad.write_text("agents:\n  default:\n    tools: [tood]\n")
    result = manage("runserver", "--noreload", "127.0.0.1:8799", scopes_file=bad, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "(modex.E013) agents.default.tools[0] (line 3): unknown tool 'tood'. Did you mean 'todo'?" in result.stderr


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"", "modex.E003"), (b"agents:\n\tdefault: {}\n", "modex.E005"), (b"\xff\xfe", "modex.E001")],
    ids=["empty", "tabs", "not-utf8"],
)
def test_check_function_reports_file_level_problems(settings, tmp_path, content, code):
    path = tmp_path / "bot.yml"
    path.write_bytes(content)
    settings.MODEX_SCOPES_FILE = path
    errors = check_scope_declaration()
    assert [e.id for e in errors] == [code]
    assert errors[0].obj == str(path)


def test_check_function_adopts_a_valid_declaration_for_boot(bot_file):
    assert check_scope_declaration() == []
    assert booted_declaration() is not None and booted_declaration().find("researcher")


def test_missing_file_is_an_error(settings, tmp_path):
    settings.MODEX_SCOPES_FILE = tmp_path / "missing.yml"
    (error,) = check_scope_declaration()
    assert error.id == "modex.E001" and "does not exist" in error.msg
