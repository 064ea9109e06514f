"""The workspace is private to the service's user: database, catalogs, file-backend memory.

Checked on real files: a real ``manage.py migrate`` in a production environment (subprocess) for
the workspace and state.db (with SQLite's -wal and -shm), and a real turn plus a cleanup on the
file backend for the memory and the pruned catalog.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agents.llm import OfflineChatModel
from agents.runtime.services import build_services
from memory.messages import Message
from memory.scopes import AgentScope, SessionScope
from tests.web.test_security import manage, production_env


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_workspace_and_its_database_are_private(tmp_path):
    env = production_env(tmp_path)
    result = manage("migrate", "--noinput", env=env)
    assert result.returncode == 0, result.stderr
    workspace = tmp_path / "workspace"
    assert mode(workspace) == 0o700
    db = workspace / "state.db"
    assert db.stat().st_size > 0 and mode(db) == 0o600
    for extra in ("state.db-wal", "state.db-shm"):
        if (workspace / extra).exists():
            assert mode(workspace / extra) == 0o600, extra


def test_an_existing_open_workspace_is_tightened_at_boot(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir(mode=0o755)
    os.chmod(workspace, 0o755)
    db = workspace / "state.db"
    db.write_bytes(b"")
    os.chmod(db, 0o644)
    result = manage("migrate", "--noinput", env=production_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert mode(workspace) == 0o700 and mode(db) == 0o600


def test_file_backend_memory_and_pruned_catalogs_are_private(tmp_path):
    services = build_services(backend="file", workspace=tmp_path, model=OfflineChatModel())
    session = SessionScope("private")
    stored = services.bundle.messages.append(session, [Message(role="user", content="my diagnosis is ...")])
    services.bundle.kv.put(AgentScope("default"), "MEMORY.md", "- a fact")
    services.catalog.write(session, stored)
    paths = [p for p in tmp_path.rglob("*")]
    assert any("pruned" in p.parts and p.suffix == ".md" for p in paths)
    loose = {str(p.relative_to(tmp_path)): oct(mode(p)) for p in paths
             if mode(p) & 0o077}
    assert loose == {}
