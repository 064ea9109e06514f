"""Core memory's values and errors (re-exported by ``memory.core_memory``: import them from there).

The errors each say what to do next; the values are what ``CoreMemory`` reads, records and stages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from memory.scopes import Scope
from memory.stores.base import KVWrite


# -- errors -----------------------------------------------------------------------------------


class CoreMemoryError(Exception):
    """Base of the core memory errors; every message says what to do next."""


class CoreMemoryDisabled(CoreMemoryError):
    """Core memory is switched off for this agent (``core_enabled`` is false)."""


class UnknownCoreFile(CoreMemoryError, ValueError):
    """A file name other than SOUL.md, USER.md, MEMORY.md."""


class InvalidSource(CoreMemoryError, ValueError):
    """A change source other than ``agent``, ``dream``, ``system``, ``admin``, ``user:<id>``, ``admin:<id>``."""


class CoreMemoryEditError(CoreMemoryError, ValueError):
    """An edit that cannot apply: the text to replace is missing or ambiguous, or empty."""


class SharedScopeWrite(CoreMemoryError, PermissionError):
    """A write to a file every user of the agent reads (SOUL.md) from a writer without
    authority over all of them (the agent, the Dream Engine, a user); nothing was written.
    Propose the change instead (``CoreMemory.propose``): staff accept or reject it."""

    def __init__(self, file: str, *, source: str) -> None:
        super().__init__(
            f"{file} is shared by everyone who talks to this agent, so only staff can change it "
            f"(the change came from {source}); nothing was written. Propose it instead: staff "
            "review proposals on the proposals page."
        )
        self.file = file
        self.source = source


class CoreMemoryConflict(CoreMemoryError):
    """The file changed since the caller read it; nothing was written. Re-read and retry."""

    def __init__(self, file: str, *, expected: int | None, actual: int | None) -> None:
        super().__init__(
            f"{file} was changed meanwhile (you edited version {expected}, it is now version {actual}); "
            "nothing was written. Read it again and re-apply your edit to the current text."
        )
        self.file = file
        self.expected = expected
        self.actual = actual


class CoreMemoryFull(CoreMemoryError):
    """The write would take the file over its token cap; nothing was written."""

    def __init__(self, file: str, *, tokens: int, cap: int) -> None:
        super().__init__(
            f"{file} would be {tokens} tokens, over its cap of {cap} tokens; nothing was written. "
            f"Make room first: merge or remove outdated entries (replace or rewrite) so the result "
            f"stays within {cap} tokens, then retry."
        )
        self.file = file
        self.tokens = tokens
        self.cap = cap


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoreFileState:
    """One core memory file as read. ``version`` is 0 when the file was never written."""

    file: str
    scope: Scope
    text: str
    version: int
    tokens: int
    cap: int
    updated_at: datetime | None

    @property
    def exists(self) -> bool:
        return self.version > 0


@dataclass(frozen=True, slots=True)
class CoreChange:
    """One entry of a file's change history: who changed it, how, and when. ``text`` is the
    whole file after the change (None once it has aged out of ``HISTORY_TEXT_CHARS``);
    ``session`` the conversation the change came from, when known."""

    version: int
    source: str
    action: str  # "append" | "replace" | "rewrite" | "restore" | "forget" | "edit line" | "delete line"
    at: datetime
    tokens: int  # the file's size after the change
    detail: str  # a short excerpt of what was written
    text: str | None = None
    session: str = ""

    def to_json(self) -> str:
        """One JSON line (the history's storage format)."""
        data: dict[str, object] = {"version": self.version, "source": self.source, "action": self.action}
        data.update(at=self.at.isoformat(), tokens=self.tokens, detail=self.detail)
        if self.text is not None:
            data["text"] = self.text
        if self.session:
            data["session"] = self.session
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> CoreChange:
        data = json.loads(line)
        version, tokens, at = int(data["version"]), int(data["tokens"]), datetime.fromisoformat(data["at"])
        text = data.get("text")
        return cls(version, str(data["source"]), str(data["action"]), at, tokens, str(data.get("detail", "")),
                   text if isinstance(text, str) else None, str(data.get("session") or ""))


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a change comes from: the conversation (session scope key), the archive document,
    when what it states was said, the message it rests on (its ``seq`` in that conversation,
    when known), and (for proposals) an excerpt of what was said."""

    session: str = ""
    document: str = ""
    said_at: datetime | None = None
    evidence: str = ""
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class StagedWrite:
    """A change to one file, checked and ready to commit (``CoreMemory.stage``): the KV writes
    of the file, its history and its ledger. Commit ``writes`` (with others, in one
    ``KVStore.commit``), then hand the items to ``CoreMemory.published``."""

    file: str
    scope: Scope
    text: str
    tokens: int
    source: str
    writes: tuple[KVWrite, ...] = field(default=())
