"""The scope editor's services: what the page shows, and saving a posted form.

Views stay thin: ``load_editor`` builds the page state from the declaration file;
``save_scope_edits`` parses the posted form, turns it into ``MemoryEdit``s for the values that
actually changed, and writes them back through ``agents.declarations.writeback`` (which validates the
result and refuses a file that changed since the page was loaded). Saved changes take effect
after a restart: the running process keeps the declaration it booted with.

Form fields: ``sha256`` (of the bytes the page was rendered from), ``nodes`` (one per node
shown), and per node ``<name>.compression_threshold``; per main agent also
``<name>.archive_enabled`` / ``<name>.core_enabled`` (checkboxes).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.declarations.writeback import (
    InvalidEdit,
    MemoryEdit,
    ScopeFileConflict,
    WriteBackError,
    apply_memory_edits,
    render_value,
    write_memory_edits,
)
from agents.declarations import (
    AgentNode,
    Declaration,
    DeclarationProblem,
    InvalidDeclaration,
    booted_declaration,
    display_path,
    read_declaration,
    validate_text,
)
from agents.editor.diffing import DiffLine
from memory.config import DEFAULT_THRESHOLD_RATIO

logger = logging.getLogger("agents.editor.service")

TOGGLES = ("archive_enabled", "core_enabled")
THRESHOLD = "compression_threshold"
RESTART_NOTE = "Changes take effect after a restart."


@dataclass
class NodeView:
    """One node as the editor shows it: the declaration's values, or the user's posted ones."""

    node: AgentNode
    archive_enabled: bool
    core_enabled: bool
    threshold: str  # the input's text: the explicit override, "" for the preset default
    errors: dict[str, list[str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def depth(self) -> int:
        return self.node.depth

    @property
    def indent(self) -> int:
        return max(self.node.depth - 1, 0)

    @property
    def default_threshold(self) -> int:
        """The threshold the preset gives when the field is empty (75% of the window)."""
        return int(self.node.memory_config.context_window * DEFAULT_THRESHOLD_RATIO)

    @property
    def default_threshold_text(self) -> str:
        return f"{self.default_threshold:,}"

    @property
    def window_text(self) -> str:
        return f"{self.node.memory_config.context_window:,}"

    @property
    def usable_text(self) -> str:
        """The bound a threshold must stay under: the window less the room kept for the reply."""
        return f"{self.node.memory_config.usable_window:,}"

    @property
    def node_errors(self) -> list[str]:
        return self.errors.get("", [])

    @property
    def layers(self) -> list[tuple[str, bool, str]]:
        """(layer, on, why) as in effect in the file: session and pruned are always on."""
        config = self.node.memory_config
        layers = [("Session", True, "always on"), ("Pruned catalog", True, "always on")]
        if self.node.is_main:
            layers += [
                ("Archive", config.archive_enabled, "archive_enabled"),
                ("Core memory", config.core_enabled, "core_enabled"),
                ("Experience", config.experience_enabled, "tool_supplements: [experience]"),
            ]
        return layers

    @property
    def numbers(self) -> list[tuple[str, str]]:
        config = self.node.memory_config
        rows = [
            ("Threshold", config.threshold),
            ("Keep after cleanup", config.keep),
            ("Window", config.context_window),
            ("Pruned budget", config.pruned_budget_tokens),
        ]
        if self.node.is_main:
            rows.append(("Archive budget", config.archive_budget_tokens))
        return [(label, f"{value:,}") for label, value in rows]

    @property
    def override_texts(self) -> list[str]:
        return [f"{key}: {render_value(value)}" for key, value in self.node.memory_overrides]


@dataclass
class MainAgentView(NodeView):
    subagents: list[NodeView] = field(default_factory=list)


@dataclass
class EditorState:
    """Everything the page renders. ``agents`` is empty when the file is invalid; then
    ``problems`` lists why and the page offers no form."""

    path: Path
    label: str
    sha256: str
    declaration: Declaration | None
    problems: tuple[DeclarationProblem, ...]
    agents: list[MainAgentView]
    pending_restart: bool = False

    def view(self, name: str) -> NodeView | None:
        for agent in self.agents:
            for view in (agent, *agent.subagents):
                if view.name == name:
                    return view
        return None


@dataclass(frozen=True)
class SaveOutcome:
    """``status``: saved | unchanged | invalid | conflict | broken | failed."""

    status: str
    message: str
    state: EditorState
    diff: tuple[DiffLine, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status in ("saved", "unchanged")


def load_editor(*, path: Path | str) -> EditorState:
    """The page state for the declaration file at ``path``, as it is on disk now."""
    path = Path(path)
    loaded = read_declaration(path)
    label = display_path(path)
    agents: list[MainAgentView] = []
    if loaded.declaration is not None:
        agents = [_main_view(agent) for agent in loaded.declaration.agents]
    booted = booted_declaration()
    pending = bool(booted and loaded.sha256 and booted.source == label and booted.sha256 != loaded.sha256)
    return EditorState(path, label, loaded.sha256, loaded.declaration, loaded.problems, agents, pending)


def _main_view(agent: AgentNode) -> MainAgentView:
    view = MainAgentView(agent, **_values(agent))
    view.subagents = [NodeView(node, **_values(node)) for child in agent.subagents for node in child.walk()]
    return view


def _values(node: AgentNode) -> dict:
    threshold = node.overrides.get(THRESHOLD)
    return {
        "archive_enabled": node.memory_config.archive_enabled,
        "core_enabled": node.memory_config.core_enabled,
        "threshold": "" if threshold is None else str(threshold),
    }


def save_scope_edits(*, path: Path | str, form: Mapping, actor: str = "") -> SaveOutcome:
    """Apply a posted editor form to the file at ``path``. Never raises for user mistakes:
    the outcome says what happened, with the state to render next."""
    state = load_editor(path=path)
    expected = _get(form, "sha256")
    if state.declaration is None:
        return SaveOutcome("broken", f"{state.label} is invalid on disk; fix it by hand first.", state)
    if expected != state.sha256:
        return _conflict(state)
    edits, has_errors = _read_form(state, form)
    if has_errors:
        _attach_problems(state, _dry_run(state, edits))  # show every problem at once, not just the form's
        return SaveOutcome("invalid", "Nothing was saved: fix the fields marked below.", state)
    if not edits:
        return SaveOutcome("unchanged", f"Nothing to save: {state.label} already says this.", state)
    try:
        result = write_memory_edits(path=state.path, expected_sha256=expected, edits=edits)
    except ScopeFileConflict:
        return _conflict(load_editor(path=path))
    except InvalidEdit as exc:
        _attach_problems(state, exc.problems)
        return SaveOutcome("invalid", "Nothing was saved: the result would not pass validation.", state)
    except InvalidDeclaration:
        return SaveOutcome("broken", f"{state.label} is invalid on disk; fix it by hand first.", load_editor(path=path))
    except (WriteBackError, OSError) as exc:
        logger.exception("scope editor: writing %s failed", state.label)
        return SaveOutcome("failed", f"Nothing was saved: {exc}", state)
    fresh = load_editor(path=path)
    if not result.changed:
        return SaveOutcome("unchanged", f"Nothing to save: {state.label} already says this.", fresh)
    logger.info("scope editor: %s saved %d change(s) to %s", actor or "someone", len(edits), state.label)
    return SaveOutcome("saved", f"Saved to {state.label}. {RESTART_NOTE}", fresh, result.diff)


def _dry_run(state: EditorState, edits: list[MemoryEdit]) -> list[DeclarationProblem]:
    """The problems the valid part of a rejected form would cause (nothing is written)."""
    loaded = read_declaration(state.path)
    if loaded.declaration is None or loaded.source is None or loaded.sha256 != state.sha256:
        return []
    try:
        text = apply_memory_edits(loaded.source.text, loaded.declaration, edits)
    except WriteBackError:
        return []
    return validate_text(text, source=state.label)[1]


def _conflict(current: EditorState) -> SaveOutcome:
    message = (
        f"{current.label} changed on disk since you opened the editor (someone else saved, or it was edited by "
        "hand). Nothing was saved. The editor now shows the file as it is: make your change again."
    )
    return SaveOutcome("conflict", message, current)


def _get(form: Mapping, key: str) -> str:
    value = form.get(key, "")
    return value if isinstance(value, str) else str(value)


def _getlist(form: Mapping, key: str) -> list[str]:
    if hasattr(form, "getlist"):
        return list(form.getlist(key))
    value = form.get(key, [])
    return [value] if isinstance(value, str) else list(value)


def _read_form(state: EditorState, form: Mapping) -> tuple[list[MemoryEdit], bool]:
    """Overwrite the views with the posted values; return the edits and whether any field
    was rejected. Only nodes listed in ``nodes`` are read, so a partial post leaves the others
    alone."""
    edits: list[MemoryEdit] = []
    has_errors = False
    for name in dict.fromkeys(_getlist(form, "nodes")):
        view = state.view(name)
        if view is None:
            continue
        node = view.node
        if node.is_main:
            view.archive_enabled = _checked(form, f"{name}.archive_enabled")
            view.core_enabled = _checked(form, f"{name}.core_enabled")
            if view.core_enabled and not view.archive_enabled:
                view.errors.setdefault("core_enabled", []).append(
                    "Core memory is fed from the archive: switch the archive on too, or core memory off."
                )
                has_errors = True
            for key in TOGGLES:
                wanted = getattr(view, key)
                if wanted != getattr(node.memory_config, key):
                    edits.append(MemoryEdit(name, key, wanted))
        raw = _get(form, f"{name}.{THRESHOLD}").strip().replace(",", "").replace("_", "")
        view.threshold = raw
        if raw == "":
            wanted_threshold = None
        elif _WHOLE_NUMBER.fullmatch(raw) and int(raw) >= 1:
            wanted_threshold = int(raw)
        else:
            view.errors.setdefault(THRESHOLD, []).append(
                "Enter a whole number of tokens (at least 1), or leave it empty for the preset default."
            )
            has_errors = True
            continue
        if wanted_threshold != node.overrides.get(THRESHOLD):
            edits.append(MemoryEdit(name, THRESHOLD, wanted_threshold))
    return edits, has_errors


# ASCII digits only, and few enough for int(): str.isdigit accepts "²", which int refuses, and
# int refuses more than 4300 digits. Twelve is far above any context window.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,12}")


def _checked(form: Mapping, key: str) -> bool:
    return _get(form, key).lower() in ("on", "true", "1", "yes")


def _attach_problems(state: EditorState, problems: list[DeclarationProblem]) -> None:
    """Show each validation problem under the field (or node) its YAML path points at."""
    views = [view for agent in state.agents for view in (agent, *agent.subagents)]
    for problem in problems:
        owner = max(
            (v for v in views if problem.path == v.node.yaml_path or problem.path.startswith(v.node.yaml_path + ".")),
            key=lambda v: len(v.node.yaml_path),
            default=None,
        )
        if owner is None:
            state.problems = (*state.problems, problem)
            continue
        leaf = problem.path.rsplit(".", 1)[-1]
        slot = leaf if leaf in (*TOGGLES, THRESHOLD) else ""
        if slot and owner.errors.get(slot):
            continue  # the form already explains this field
        owner.errors.setdefault(slot, []).append(problem.message)
