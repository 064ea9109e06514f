"""Comment-preserving write-back of ``memory:`` blocks in ``bot.yml``.

Edits are targeted text splices guided by the composed YAML nodes' positions, not a
re-serialisation: a changed value is rewritten in place (the rest of its line kept), a
missing key or ``memory:`` block is inserted with the file's own indentation and line
endings, and nothing else in the file moves. Inserted lines end with ``EDITOR_MARK`` (in
flow style ``{...}``, a trailing ``EDITOR_MARK: key, ...`` comment names the inserted keys);
setting such a key back to the preset default removes it again (and a marked ``memory:``
block left empty), so switching a layer on and off returns the original bytes. Keys the user wrote
themselves stay explicit: they are rewritten, never removed, unless a reset is asked for.

``write_memory_edits`` is the only function that touches the disk: it refuses to write when
the file changed since the editor loaded it (``ScopeFileConflict``), re-reads the result with
the boot loader and refuses an invalid or unintended result, then replaces the file
atomically (temp file + fsync + ``os.replace``), keeping its mode and BOM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.declarations import (
    MAIN_MEMORY_KEYS,
    SUBAGENT_MEMORY_KEYS,
    AgentNode,
    Declaration,
    DeclarationError,
    InvalidDeclaration,
    read_declaration,
    validate_bytes,
)
from agents.declarations.source import SourceText, compose_text
from agents.editor.diffing import DiffLine, changed_lines
from agents.declarations.splice import EDITOR_MARK, Splicer, WriteBackError, is_mapping, is_null  # noqa: F401 - re-exported
from memory.config import MemoryConfig

try:  # POSIX: serialise concurrent writers; elsewhere the sha check alone guards
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

# What an absent key means: the MemoryConfig field default (the preset's own value).
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(MemoryConfig)}


class ScopeFileConflict(DeclarationError):
    """The file changed on disk since it was loaded; nothing was written."""


class InvalidEdit(InvalidDeclaration):
    """The edited declaration would be invalid; nothing was written. ``problems`` says why."""


@dataclass(frozen=True, slots=True)
class MemoryEdit:
    """Set ``key`` of agent ``agent``'s ``memory:`` block to ``value``; ``None`` removes the
    key, returning the node to its preset default."""

    agent: str
    key: str
    value: bool | int | None


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a write did. ``changed`` is False when the edits were already in effect (no write)."""

    path: Path
    changed: bool
    old_sha256: str
    new_sha256: str
    diff: tuple[DiffLine, ...]
    declaration: Declaration


def render_value(value: bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(int(value))


# -- pure text edits ---------------------------------------------------------------------


def apply_memory_edits(text: str, declaration: Declaration, edits: Sequence[MemoryEdit]) -> str:
    """Return ``text`` with ``edits`` applied, in order. ``declaration`` is ``text``'s own
    (it locates nodes and tells subagents from main agents). Pure: no validation of the result."""
    for edit in edits:
        node = declaration.find(edit.agent)
        if node is None:
            raise WriteBackError(f"there is no agent named {edit.agent!r} in the declaration.")
        allowed = MAIN_MEMORY_KEYS if node.is_main else SUBAGENT_MEMORY_KEYS
        if edit.key not in allowed:
            kind = "a main agent" if node.is_main else "a subagent"
            raise WriteBackError(f"{edit.key} cannot be set on {kind} ({edit.agent}).")
        text = _apply_one(text, node, edit)
    return text


def _apply_one(text: str, agent: AgentNode, edit: MemoryEdit) -> str:
    editor = _splicer(text)
    agent_key, agent_value = editor.locate(agent.path)
    memory = editor.entry(agent_value, "memory")
    default = _DEFAULTS.get(edit.key)
    entry = editor.entry(memory[1], edit.key) if memory is not None else None
    if entry is not None:
        if edit.value is None or (edit.value == default and editor.is_marked(entry[0])):
            return _drop_empty_marked_memory(editor.remove_entry(memory[1], entry[0]), agent)
        return editor.replace(entry[1], render_value(edit.value))
    if edit.value is None or edit.value == default:
        return text  # absent already means the preset default
    line = f"{edit.key}: {render_value(edit.value)}"
    if memory is not None and is_mapping(memory[1]):
        return editor.insert_into(memory[1], line, edit.key)
    if memory is not None:  # `memory:` with no value (or ~ / null)
        return editor.fill_null(memory[0], memory[1], [line])
    return editor.insert_memory_block(agent_key, agent_value, line, edit.key)


def _drop_empty_marked_memory(text: str, agent: AgentNode) -> str:
    """A ``memory:`` block the editor inserted goes again once its last key is removed."""
    editor = _splicer(text)
    _agent_key, agent_value = editor.locate(agent.path)
    memory = editor.entry(agent_value, "memory")
    if memory is None or not editor.is_marked(memory[0]):
        return text
    empty = is_null(memory[1]) or (is_mapping(memory[1]) and not memory[1].value)
    return editor.remove_entry(agent_value, memory[0]) if empty else text


def _splicer(text: str) -> Splicer:
    root, _problems = compose_text(text)
    if root is None:
        raise WriteBackError("the text being edited is not a YAML document.")
    return Splicer(text, root)


# -- the write ---------------------------------------------------------------------------


def write_memory_edits(*, path: Path | str, expected_sha256: str, edits: Sequence[MemoryEdit]) -> WriteResult:
    """Apply ``edits`` to the file at ``path`` and replace it atomically.

    Raises ``ScopeFileConflict`` if the file's sha256 is no longer ``expected_sha256``,
    ``InvalidDeclaration`` if the file on disk is invalid, ``InvalidEdit`` if the result would
    be, ``WriteBackError`` if the edits cannot be applied as intended. The file is untouched
    whenever anything is raised."""
    path = Path(path).resolve()
    with _locked(path):
        loaded = read_declaration(path)
        if loaded.sha256 != expected_sha256:
            raise ScopeFileConflict(
                f"{path.name} changed on disk since the editor loaded it (someone saved, or it was edited by hand). "
                "Nothing was written."
            )
        if loaded.declaration is None or loaded.source is None:
            raise InvalidDeclaration(list(loaded.problems), source=str(path))
        source: SourceText = loaded.source
        new_text = apply_memory_edits(source.text, loaded.declaration, edits)
        if new_text == source.text:
            return WriteResult(path, False, loaded.sha256, loaded.sha256, (), loaded.declaration)
        data = source.encode(new_text)
        digest = hashlib.sha256(data).hexdigest()
        declaration, problems, _ = validate_bytes(data, source=loaded.declaration.source, sha256=digest)
        if declaration is None:
            raise InvalidEdit(problems, source=str(path))
        _verify_intended(loaded.declaration, declaration, edits)
        _atomic_replace(path, data)
    return WriteResult(path, True, loaded.sha256, digest, tuple(changed_lines(source.text, new_text)), declaration)


def _verify_intended(old: Declaration, new: Declaration, edits: Sequence[MemoryEdit]) -> None:
    """The re-read declaration must equal the old one with exactly the edits applied."""
    changes: dict[str, dict] = {}
    for edit in edits:
        changes.setdefault(edit.agent, {})[edit.key] = _DEFAULTS[edit.key] if edit.value is None else edit.value
    old_nodes = list(old.walk())
    new_nodes = list(new.walk())
    same_shape = (old.persistence, old.model) == (new.persistence, new.model) and len(old_nodes) == len(new_nodes)
    for before, after in zip(old_nodes, new_nodes, strict=False):
        expected = dataclasses.replace(before.memory_config, **changes.get(before.name, {}))
        plain = ("memory_overrides", "memory_config", "subagents", "line")  # lines shift on insertion
        same = all(
            getattr(before, f.name) == getattr(after, f.name) for f in dataclasses.fields(before) if f.name not in plain
        )
        if not (same and after.memory_config == expected):
            same_shape = False
    if not same_shape:
        raise WriteBackError("the edited file does not read back as intended; nothing was written.")


@contextmanager
def _locked(path: Path):
    if fcntl is None:
        yield
        return
    try:
        handle = open(path, "rb")
    except OSError:
        yield  # missing/unreadable: read_declaration reports it
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _atomic_replace(path: Path, data: bytes) -> None:
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
