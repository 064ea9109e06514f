"""The scope tree as data, for the JSON API: read it, and update memory switches through the
scope editor's service (``agents.editor.service.save_scope_edits``), with the file's sha256 as
the conflict guard. Nothing here writes the file itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.editor import service as scope_editor


class ScopeTreeError(Exception):
    """An update that names nodes or switches the declaration does not have (nothing written)."""


@dataclass(frozen=True, slots=True)
class TreeUpdate:
    """What an API client asks for one node; None leaves the value as it is."""

    archive_enabled: bool | None = None
    core_enabled: bool | None = None
    compression_threshold: int | None = None
    reset_threshold: bool = False


def tree(state: scope_editor.EditorState) -> dict[str, Any]:
    """The editor state as plain data: every node depth-first, with its effective switches."""
    nodes = []
    for main in state.agents:
        for view in (main, *main.subagents):
            node, config = view.node, view.node.memory_config
            override = node.overrides.get(scope_editor.THRESHOLD)
            nodes.append({
                "name": node.name, "path": node.yaml_path, "depth": node.depth, "parent": node.parent,
                "is_main": node.is_main, "archive_enabled": config.archive_enabled,
                "core_enabled": config.core_enabled, "experience_enabled": config.experience_enabled,
                "compression_threshold": override if isinstance(override, int) else None,
                "effective_threshold": config.threshold, "context_window": config.context_window,
            })
    problems = [{"path": p.path, "line": p.line, "message": p.message} for p in state.problems]
    return {"file": state.label, "sha256": state.sha256, "pending_restart": state.pending_restart,
            "problems": problems, "nodes": nodes}


def read_tree(*, path: Path | str) -> dict[str, Any]:
    """The declaration file at ``path`` as the scope tree (``nodes`` empty if it is invalid)."""
    return tree(scope_editor.load_editor(path=path))


def update_tree(
    *, path: Path | str, sha256: str, nodes: Mapping[str, TreeUpdate], actor: str
) -> scope_editor.SaveOutcome:
    """Apply ``nodes`` to the file, only if it still has ``sha256``; the outcome's ``status``
    is the editor's (saved, unchanged, invalid, conflict, broken, failed). Raises
    ScopeTreeError for an unknown node or a switch a subagent does not have."""
    state = scope_editor.load_editor(path=path)
    form: dict[str, Any] = {"sha256": sha256, "nodes": []}
    for name, update in nodes.items():
        view = state.view(name)
        if view is None:
            if state.declaration is None:
                continue  # the editor reports the broken file itself
            raise ScopeTreeError(f"the declaration has no agent called {name!r}")
        if not view.node.is_main and (update.archive_enabled is not None or update.core_enabled is not None):
            raise ScopeTreeError(f"{name} is a subagent: only compression_threshold can be set on it")
        form["nodes"].append(name)
        if view.node.is_main:
            for key in scope_editor.TOGGLES:
                wanted = getattr(update, key)
                if getattr(view, key) if wanted is None else wanted:
                    form[f"{name}.{key}"] = "on"  # a checkbox: absent means off
        if update.reset_threshold:
            form[f"{name}.{scope_editor.THRESHOLD}"] = ""
        elif update.compression_threshold is not None:
            form[f"{name}.{scope_editor.THRESHOLD}"] = str(update.compression_threshold)
        else:
            form[f"{name}.{scope_editor.THRESHOLD}"] = view.threshold
    return scope_editor.save_scope_edits(path=path, form=_FormDict(form), actor=actor)


class _FormDict(dict):
    """A mapping with ``getlist`` for the list-valued ``nodes`` field, like a QueryDict."""

    def getlist(self, key: str) -> list[str]:
        value = self.get(key, [])
        return list(value) if isinstance(value, list) else [value]
