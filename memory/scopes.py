"""Scopes: who a memory belongs to, with string keys and safe storage path parts.

Keys look like ``session:abc``, ``user:42``, ``composite:agent:default+user:42``, ``global``.
``Scope.parse(key)`` inverts ``scope.key()`` exactly. Ids match
``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``; anything else raises ``InvalidScopeId`` before any path is
built, so a hostile id can never name a place outside a store's root.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Composite directory names longer than this are replaced by a digest (NAME_MAX is 255 bytes).
_MAX_DIR_NAME = 200


class InvalidScopeId(ValueError):
    """A scope id or key that is not allowed; the message says which and why."""


def validate_id(value: object, *, what: str = "scope id") -> str:
    """Return ``value`` if it is a legal id, else raise InvalidScopeId."""
    if not isinstance(value, str):
        raise InvalidScopeId(f"{what} must be a string, got {type(value).__name__}")
    if not _ID_RE.fullmatch(value):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise InvalidScopeId(
            f"{what} {shown!r} is not allowed: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return value


class Scope(ABC):
    """Base of all scopes. Scopes are frozen values: equal scopes share storage, others never do."""

    kind: ClassVar[str]

    @abstractmethod
    def key(self) -> str:
        """The canonical string key; ``Scope.parse(s.key()) == s``."""

    @abstractmethod
    def path_parts(self) -> tuple[str, ...]:
        """Relative path parts for file storage: safe names, distinct for distinct scopes."""

    def __str__(self) -> str:
        return self.key()

    @staticmethod
    def parse(key: str) -> Scope:
        """Inverse of ``key()``; raises InvalidScopeId for anything it did not produce."""
        if not isinstance(key, str):
            raise InvalidScopeId(f"scope key must be a string, got {type(key).__name__}")
        if key == "global":
            return GlobalScope()
        kind, sep, rest = key.partition(":")
        if not sep:
            raise InvalidScopeId(f"scope key {key[:60]!r} has no kind (expected e.g. 'user:42')")
        if kind == "composite":
            return CompositeScope(*(Scope.parse(part) for part in rest.split("+")))
        cls = _SIMPLE_KINDS.get(kind)
        if cls is None:
            raise InvalidScopeId(f"unknown scope kind {kind[:40]!r}; expected one of {', '.join(SCOPE_KINDS)}")
        return cls(rest)

    def directory(self, root: Path) -> Path:
        """This scope's directory under ``root``; guaranteed to lie inside it."""
        root = Path(root).resolve()
        path = root.joinpath(*self.path_parts()).resolve()
        if path == root or root not in path.parents:
            raise InvalidScopeId(f"scope {self.key()!r} would leave the storage root")
        return path


@dataclass(frozen=True, slots=True)
class _SimpleScope(Scope):
    id: str

    def __post_init__(self) -> None:
        validate_id(self.id, what=f"{self.kind} id")

    def key(self) -> str:
        return f"{self.kind}:{self.id}"

    def path_parts(self) -> tuple[str, ...]:
        return (self.kind, self.id)


@dataclass(frozen=True, slots=True)
class SessionScope(_SimpleScope):
    """One conversation's session."""

    kind: ClassVar[str] = "session"


@dataclass(frozen=True, slots=True)
class UserScope(_SimpleScope):
    """One person, across sessions."""

    kind: ClassVar[str] = "user"


@dataclass(frozen=True, slots=True)
class TenantScope(_SimpleScope):
    """An organisation or workspace shared by several users."""

    kind: ClassVar[str] = "tenant"


@dataclass(frozen=True, slots=True)
class AgentScope(_SimpleScope):
    """One declared agent (e.g. SOUL.md lives here)."""

    kind: ClassVar[str] = "agent"


@dataclass(frozen=True, slots=True)
class ChannelScope(_SimpleScope):
    """A delivery channel (web, a chat platform)."""

    kind: ClassVar[str] = "channel"


@dataclass(frozen=True, slots=True)
class ChatScope(_SimpleScope):
    """A group chat or room, shared by its members."""

    kind: ClassVar[str] = "chat"


@dataclass(frozen=True, slots=True)
class GlobalScope(Scope):
    """Shared by everyone."""

    kind: ClassVar[str] = "global"

    def key(self) -> str:
        return "global"

    def path_parts(self) -> tuple[str, ...]:
        return ("global",)


class CompositeScope(Scope):
    """The intersection of several scopes, e.g. facts per user within an agent.

    Parts are flattened and sorted by key, so ``CompositeScope(a, b) == CompositeScope(b, a)``.
    At least two distinct simple parts are required; ``GlobalScope`` cannot be a part.
    """

    kind: ClassVar[str] = "composite"
    __slots__ = ("parts",)
    parts: tuple[Scope, ...]

    def __init__(self, *parts: Scope) -> None:
        flat: dict[str, Scope] = {}
        for part in parts:
            if isinstance(part, CompositeScope):
                for inner in part.parts:
                    flat[inner.key()] = inner
            elif isinstance(part, _SimpleScope):
                flat[part.key()] = part
            else:
                raise InvalidScopeId(f"a composite scope cannot contain {part!r}")
        if len(flat) < 2:
            raise InvalidScopeId("a composite scope needs at least two distinct parts")
        object.__setattr__(self, "parts", tuple(flat[k] for k in sorted(flat)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CompositeScope is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompositeScope) and other.parts == self.parts

    def __hash__(self) -> int:
        return hash(("composite", self.parts))

    def __repr__(self) -> str:
        return f"CompositeScope({', '.join(repr(p) for p in self.parts)})"

    def key(self) -> str:
        return "composite:" + "+".join(part.key() for part in self.parts)

    def path_parts(self) -> tuple[str, ...]:
        # kind names contain no '.', ids no '+': "agent.default+user.42" decodes uniquely.
        name = "+".join(f"{part.kind}.{part.id}" for part in self.parts)  # type: ignore[attr-defined]
        if len(name) > _MAX_DIR_NAME:
            name = "sha256-" + hashlib.sha256(self.key().encode()).hexdigest()
        return ("composite", name)


_SIMPLE_KINDS: dict[str, type[_SimpleScope]] = {
    cls.kind: cls for cls in (SessionScope, UserScope, TenantScope, AgentScope, ChannelScope, ChatScope)
}
SCOPE_KINDS = (*_SIMPLE_KINDS, "composite", "global")
