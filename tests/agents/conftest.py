"""Fixtures for the declaration, write-back and scope-editor tests.

``bot_file`` is a private copy of the shipped config/scopes/bot.yml with settings pointing at
it: no test ever touches the repository's own file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agents.declarations import clear_declaration_cache

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_BOT_YML = REPO_ROOT / "config" / "scopes" / "bot.yml"
CORPUS = Path(__file__).resolve().parent / "declarations"


@pytest.fixture
def bot_file(tmp_path: Path, settings) -> Path:
    """A copy of the shipped bot.yml; MODEX_SCOPES_FILE points at it for the test."""
    path = tmp_path / "config" / "bot.yml"
    path.parent.mkdir()
    shutil.copyfile(SHIPPED_BOT_YML, path)
    settings.MODEX_SCOPES_FILE = path
    return path


@pytest.fixture
def rich_file(tmp_path: Path, settings) -> Path:
    """A copy of the richly commented corpus file, as MODEX_SCOPES_FILE."""
    path = tmp_path / "rich.yml"
    shutil.copyfile(CORPUS / "valid" / "rich.yml", path)
    settings.MODEX_SCOPES_FILE = path
    return path


@pytest.fixture
def staff(db, django_user_model):
    """A staff user: may use the scope editor."""
    return django_user_model.objects.create_user(
        username="staffer", email="staff@example.test", password="staff-pw-1", is_staff=True
    )


@pytest.fixture(autouse=True)
def _fresh_boot_declaration():
    """Each test starts as a freshly booted process would (no declaration loaded yet)."""
    clear_declaration_cache()
    yield
    clear_declaration_cache()
