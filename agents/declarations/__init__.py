"""The scope declaration (``config/scopes/bot.yml``): load, validate, and the booted tree.

Public API
----------
* ``get_declaration()`` — the declaration this process booted with: loaded once from
  ``settings.MODEX_SCOPES_FILE`` and kept (edits on disk take effect after a restart).
  Raises ``InvalidDeclaration`` if the file is invalid (the system checks stop boot before).
* ``load_declaration(path)`` — load a file; raises ``InvalidDeclaration`` listing every problem.
* ``validate_text(text, *, source)`` / ``read_declaration(path)`` — never raise for a bad
  file: they return the declaration (or ``None``) and the list of ``DeclarationProblem``.
* ``Declaration`` (``.agents`` roots, ``.walk()``, ``.find(name)``, ``.main_agents()``,
  ``.chat_agents()``: the main agents without ``chat: false``),
  ``AgentNode``, ``ModelSettings``, ``Persistence`` — frozen values (``declaration_nodes``).

Each node's ``memory_config`` is a ``memory.config.MemoryConfig``: the preset fixed by the
node's position (top-level ``agents:`` entries get ``main_agent_memory``, nodes under
``subagents:`` get ``subagent_memory``), its ``memory:`` overrides, ``context_window`` from the
node's effective model, and ``experience_enabled = "experience" in tool_supplements``.
Long-term layers are off unless the file switches them on.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from agents.declarations.nodes import (  # noqa: F401 - re-exported public names
    AGENT_KEYS,
    BACKENDS,
    DEFAULT_BACKEND,
    KNOWN_SUPPLEMENTS,
    KNOWN_TOOLS,
    MAIN_MEMORY_KEYS,
    MEMORY_TOGGLES,
    PROVIDERS,
    SUBAGENT_MEMORY_KEYS,
    SUPPLEMENT_TOOLS,
    AgentNode,
    Declaration,
    ModelSettings,
    Persistence,
)
from agents.declarations.problems import (  # noqa: F401 - re-exported public names
    DeclarationError,
    DeclarationProblem,
    InvalidDeclaration,
    ProblemCode,
    sort_problems,
)
from agents.declarations.schema import build_declaration
from agents.declarations.source import (
    MAX_DECLARATION_BYTES,
    SourceText,
    compose_text,
    decode_declaration,
)


@dataclass(frozen=True, slots=True)
class LoadedFile:
    """The outcome of reading a declaration file: what the editor and the checks work from.

    ``declaration`` is ``None`` when ``problems`` is not empty. ``source`` is ``None`` when
    the bytes could not even be decoded. ``sha256`` digests ``data``, the exact bytes read."""

    path: Path
    data: bytes
    sha256: str
    source: SourceText | None
    declaration: Declaration | None
    problems: tuple[DeclarationProblem, ...]

    @property
    def ok(self) -> bool:
        return self.declaration is not None


def display_path(path: Path | str) -> str:
    """The path as people see it: relative to the project (``config/scopes/bot.yml``) when
    inside it, absolute otherwise."""
    from django.conf import settings

    base = getattr(settings, "BASE_DIR", None) if settings.configured else None
    if base is not None:
        try:
            return str(Path(path).resolve().relative_to(Path(base).resolve()))
        except ValueError:
            pass
    return str(path)


def validate_bytes(
    data: bytes, *, source: str = "", sha256: str = ""
) -> tuple[Declaration | None, list[DeclarationProblem], SourceText | None]:
    """Validate raw file bytes. Returns ``(declaration or None, problems, decoded text or None)``."""
    text, problems = decode_declaration(data)
    if text is None:
        return None, problems, None
    node, problems = compose_text(text.text)
    if node is None:
        return None, sort_problems(problems), text
    declaration, schema_problems = build_declaration(node, source=source, sha256=sha256)
    problems = sort_problems(problems + schema_problems)
    return (declaration if not problems else None), problems, text


def validate_text(text: str, *, source: str = "") -> tuple[Declaration | None, list[DeclarationProblem]]:
    """Validate declaration text (a leading BOM is accepted). Never raises for bad content:
    returns ``(declaration, [])`` or ``(None, problems)`` with every problem found, in file order."""
    declaration, problems, _ = validate_bytes(text.encode("utf-8"), source=source)
    return declaration, problems


def read_declaration(path: Path | str) -> LoadedFile:
    """Read and validate the file at ``path``. Never raises for a missing or bad file."""
    path = Path(path)
    label = display_path(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(MAX_DECLARATION_BYTES + 1)
    except FileNotFoundError:
        return _unreadable(
            path,
            f"the declaration file {label} does not exist.",
            "Restore config/scopes/bot.yml, or point MODEX_SCOPES_FILE at your declaration.",
        )
    except IsADirectoryError:
        return _unreadable(
            path, f"{label} is a directory, not a declaration file.", "Point MODEX_SCOPES_FILE at a .yml file."
        )
    except OSError as exc:
        return _unreadable(
            path, f"the declaration file {label} cannot be read: {exc.strerror}.", "Check the file's permissions."
        )
    if len(data) > MAX_DECLARATION_BYTES:
        problem = DeclarationProblem(
            ProblemCode.TOO_LARGE,
            "",
            None,
            f"the file is {size:,} bytes; a declaration may be at most {MAX_DECLARATION_BYTES:,} bytes "
            f"({MAX_DECLARATION_BYTES // 1024} KiB). It was not parsed.",
            hint="A declaration lists agents and switches; move long instructions out of it.",
        )
        return LoadedFile(path, b"", "", None, None, (problem,))
    digest = hashlib.sha256(data).hexdigest()
    declaration, problems, text = validate_bytes(data, source=label, sha256=digest)
    return LoadedFile(path, data, digest, text, declaration, tuple(problems))


def _unreadable(path: Path, message: str, hint: str) -> LoadedFile:
    problem = DeclarationProblem(ProblemCode.UNREADABLE, "", None, message, hint=hint)
    return LoadedFile(path, b"", "", None, None, (problem,))


def load_declaration(path: Path | str) -> Declaration:
    """Load and validate ``path``; raises ``InvalidDeclaration`` listing every problem."""
    loaded = read_declaration(path)
    if loaded.declaration is None:
        raise InvalidDeclaration(list(loaded.problems), source=display_path(Path(path)))
    return loaded.declaration


_lock = threading.Lock()
_booted: Declaration | None = None


def get_declaration() -> Declaration:
    """The declaration this process booted with (loaded on first use, then kept).

    The file is read once per process: the scope editor's writes take effect after a restart,
    by design, so a running agent never changes configuration mid-conversation."""
    global _booted
    if _booted is not None:
        return _booted
    with _lock:
        if _booted is None:
            from django.conf import settings

            _booted = load_declaration(settings.MODEX_SCOPES_FILE)
        return _booted


def adopt_boot_declaration(declaration: Declaration) -> None:
    """Keep ``declaration`` as the booted one if none is loaded yet (used by the boot checks,
    which have just read and validated the file)."""
    global _booted
    with _lock:
        if _booted is None:
            _booted = declaration


def booted_declaration() -> Declaration | None:
    """The booted declaration if one was loaded, without loading it."""
    return _booted


def clear_declaration_cache() -> None:
    """Forget the booted declaration (tests only: a real process keeps what it booted with)."""
    global _booted
    with _lock:
        _booted = None
