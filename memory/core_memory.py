"""Core Memory: the three files an agent keeps in context, with caps and compare-and-set.

=============  ==============================================  =====================
file           scope (KV key = the file name)                  injected as
=============  ==============================================  =====================
``SOUL.md``    ``AgentScope(agent)``: the agent's identity     ``<your_identity>``
``USER.md``    ``UserScope(user)``: the person, across agents  ``<user_profile>``
``MEMORY.md``  ``CompositeScope(agent, user)``: facts per user  ``<known_facts>``
=============  ==============================================  =====================

Every write goes through the KVStore with ``expected_version``, so an edit made meanwhile (by
the agent's tool, the Dream Engine, or the user in the inspection page) is never silently
overwritten: the loser gets ``CoreMemoryConflict`` and can re-read and retry. ``append`` retries
its compare-and-set by itself, because appending commutes. Each file has a token cap checked
before anything is written (``CoreMemoryFull``). Every change dispatches CORE_MEMORY_UPDATED
and adds an entry to the file's change history (KV key ``<file>.history``, JSON lines, capped).
Control characters (NUL, other C0 controls but tab/newline/CR) are dropped from written text,
and lone surrogates become U+FFFD (``memory.text.storable``).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from memory.config import MemoryConfig
from memory.hooks import CoreMemoryUpdated, MemoryHookDispatcher, MemoryHookPoint
from memory.messages import utcnow
from memory.scopes import AgentScope, CompositeScope, Scope, UserScope, validate_id
from memory.stores.base import MUST_NOT_EXIST, KVStore, VersionConflict
from memory.text import storable
from memory.tokens import count_text

logger = logging.getLogger("memory.core_memory")

SOUL = "SOUL.md"
USER = "USER.md"
MEMORY = "MEMORY.md"
CORE_FILES: tuple[str, ...] = (SOUL, USER, MEMORY)

#: Token caps per file, enforced at write time. MEMORY.md grows with the user; the others are
#: descriptions that should stay short.
DEFAULT_CAPS: Mapping[str, int] = {SOUL: 1500, USER: 1500, MEMORY: 3000}
#: Changes kept per file in ``<file>.history``.
DEFAULT_HISTORY_LIMIT = 50
HISTORY_SUFFIX = ".history"

_APPEND_ATTEMPTS = 20
_APPEND_BACKOFF_CAP = 0.05  # seconds
_DETAIL_CHARS = 160
# NUL and the other C0 controls (tab, newline, CR aside) cannot be stored portably (the KV
# stores refuse NUL) and are illegal in the XML the files are injected as; they never carry
# meaning in markdown, so writes drop them instead of failing.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SOURCE_RE = re.compile(r"agent|dream|system|admin|(?:user|admin):(?P<user>.+)")


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
    """One entry of a file's change history: who changed it, how, and when."""

    version: int
    source: str
    action: str  # "append" | "replace" | "rewrite"
    at: datetime
    tokens: int  # the file's size after the change
    detail: str  # a short excerpt of what was written

    def to_json(self) -> str:
        """One JSON line (the history's storage format)."""
        data = {"version": self.version, "source": self.source, "action": self.action}
        data.update(at=self.at.isoformat(), tokens=self.tokens, detail=self.detail)
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> CoreChange:
        data = json.loads(line)
        version, tokens, at = int(data["version"]), int(data["tokens"]), datetime.fromisoformat(data["at"])
        return cls(version, str(data["source"]), str(data["action"]), at, tokens, str(data.get("detail", "")))


def check_file(file: str) -> str:
    """Return ``file`` if it is a core memory file name, else raise UnknownCoreFile."""
    if file not in CORE_FILES:
        raise UnknownCoreFile(f"unknown core memory file {file!r}; expected one of {', '.join(CORE_FILES)}")
    return file


def check_source(source: str) -> str:
    """Return ``source`` if it names a known kind of writer, else raise InvalidSource."""
    match = _SOURCE_RE.fullmatch(source) if isinstance(source, str) else None
    if match is None:
        raise InvalidSource(
            f"change source {source!r} is not one of agent, dream, system, admin, user:<id>, admin:<id>"
        )
    if match.group("user") is not None:
        try:
            validate_id(match.group("user"), what="id")
        except ValueError as exc:
            raise InvalidSource(f"change source {source!r}: {exc}") from None
    return source


def core_scope(*, file: str, agent: str, user: str | None) -> Scope:
    """The scope a core memory file of ``agent`` talking to ``user`` is stored under.

    SOUL.md needs no user; USER.md and MEMORY.md raise ValueError without one.
    """
    check_file(file)
    if file == SOUL:
        return AgentScope(agent)
    if user is None:
        raise ValueError(f"{file} belongs to a user, and no user was given")
    if file == USER:
        return UserScope(user)
    return CompositeScope(AgentScope(agent), UserScope(user))


def _backoff(attempt: int) -> None:
    # Jittered, growing pauses between compare-and-set retries: writers that keep colliding
    # drift apart instead of livelocking (about a second in all, at worst).
    if attempt:
        time.sleep(random.uniform(0, min(_APPEND_BACKOFF_CAP, 0.001 * 2**attempt)))


def clean_text(text: str) -> str:
    """``text`` without the control characters core memory files never hold, made storable
    (lone surrogates, which a model's JSON can produce, become U+FFFD)."""
    return storable(_CONTROL_RE.sub("", text))


def _detail(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 1] + "…"


# -- the service ------------------------------------------------------------------------------


class CoreMemory:
    """The core memory of one agent as seen while talking to one user.

    Construction refuses with CoreMemoryDisabled unless ``config.core_enabled``. ``hooks``
    receives CORE_MEMORY_UPDATED after every change (None: nobody listens). ``caps`` overrides
    per-file token caps; ``clock`` exists for tests.
    """

    def __init__(
        self,
        *,
        kv: KVStore,
        config: MemoryConfig,
        agent: str,
        user: str,
        hooks: MemoryHookDispatcher | None = None,
        caps: Mapping[str, int] | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if not config.core_enabled:
            raise CoreMemoryDisabled(
                f"core memory is off for agent {agent!r}; switch on core_enabled (with archive_enabled) "
                "in its memory: block in config/scopes/bot.yml and restart"
            )
        self._kv = kv
        self._agent = validate_id(agent, what="agent id")
        self._user = validate_id(user, what="user id")
        self._hooks = hooks
        merged = dict(DEFAULT_CAPS)
        for file, cap in (caps or {}).items():
            check_file(file)
            if not isinstance(cap, int) or cap < 1:
                raise ValueError(f"the cap of {file} must be a positive number of tokens, got {cap!r}")
            merged[file] = cap
        self._caps = merged
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        self._history_limit = history_limit
        self._clock = clock

    # -- reads --------------------------------------------------------------------------------

    def scope(self, *, file: str) -> Scope:
        """The scope ``file`` is stored under for this agent and user."""
        return core_scope(file=file, agent=self._agent, user=self._user)

    def cap(self, *, file: str) -> int:
        """The token cap of ``file``."""
        return self._caps[check_file(file)]

    def read(self, *, file: str) -> CoreFileState:
        """The file's current text and version (empty text, version 0, if never written)."""
        scope = self.scope(file=file)
        item = self._kv.get(scope, file)
        text = item.value if item else ""
        version, updated_at = (item.version, item.updated_at) if item else (0, None)
        return CoreFileState(file, scope, text, version, count_text(text), self._caps[file], updated_at)

    def read_all(self) -> tuple[CoreFileState, ...]:
        """SOUL.md, USER.md and MEMORY.md, in that order."""
        return tuple(self.read(file=file) for file in CORE_FILES)

    def history(self, *, file: str) -> list[CoreChange]:
        """The file's recent changes, oldest first (at most ``history_limit``)."""
        item = self._kv.get(self.scope(file=file), file + HISTORY_SUFFIX)
        if item is None:
            return []
        changes = []
        for line in item.value.splitlines():
            try:
                changes.append(CoreChange.from_json(line))
            except (ValueError, KeyError, TypeError):
                continue  # one damaged line must not hide the rest of the history
        # Concurrent writers may record their lines out of order; versions are the real order.
        return sorted(changes, key=lambda change: change.version)

    # -- writes -------------------------------------------------------------------------------

    def append(self, *, file: str, text: str, source: str) -> CoreFileState:
        """Add ``text`` as new line(s) at the end of the file.

        Appends commute, so a concurrent change is handled by re-reading and re-applying
        (bounded; after that CoreMemoryConflict). Raises CoreMemoryFull if the result would
        exceed the cap, CoreMemoryEditError if ``text`` is blank.
        """
        check_source(source)
        addition = clean_text(text).strip("\n") if isinstance(text, str) else ""
        if not addition.strip():
            raise CoreMemoryEditError(f"nothing to append to {file}: the text is empty")
        current = self.read(file=file)
        for attempt in range(_APPEND_ATTEMPTS):
            _backoff(attempt)
            base = current.text
            if base and not base.endswith("\n"):
                base += "\n"
            try:
                return self._write(current, base + addition + "\n", source=source, action="append", detail=addition)
            except CoreMemoryConflict:
                current = self.read(file=file)
        raise CoreMemoryConflict(file, expected=current.version, actual=self.read(file=file).version)

    def replace(
        self, *, file: str, old: str, new: str, source: str, expected_version: int | None = None
    ) -> CoreFileState:
        """Replace the one occurrence of ``old`` with ``new`` (``new=""`` removes it).

        ``old`` must occur exactly once, else CoreMemoryEditError says how often it occurs.
        With ``expected_version`` the edit applies only to that version; without it, to the
        version just read. Either way a change made meanwhile raises CoreMemoryConflict rather
        than being overwritten.
        """
        check_source(source)
        if not isinstance(old, str) or not clean_text(old):
            raise CoreMemoryEditError(f"say which text of {file} to replace: 'old' is empty")
        if not isinstance(new, str):
            raise CoreMemoryEditError("'new' must be text")
        old, new = clean_text(old), clean_text(new)
        current = self._read_expecting(file, expected_version)
        occurrences = current.text.count(old)
        if occurrences == 0:
            raise CoreMemoryEditError(
                f"the text to replace does not occur in {file} (version {current.version}); "
                "read the file again and copy the exact text"
            )
        if occurrences > 1:
            raise CoreMemoryEditError(
                f"the text to replace occurs {occurrences} times in {file}; include more of the "
                "surrounding text so it matches exactly once"
            )
        detail = f"{_detail(old)} → {_detail(new)}" if new else f"removed: {_detail(old)}"
        return self._write(current, current.text.replace(old, new, 1), source=source, action="replace", detail=detail)

    def rewrite(self, *, file: str, text: str, source: str, expected_version: int) -> CoreFileState:
        """Replace the whole file with ``text``, only if it is still at ``expected_version``.

        Use version 0 (``MUST_NOT_EXIST``) for a file never written. The version is required:
        rewriting blind is exactly the silent overwrite compare-and-set exists to prevent.
        """
        check_source(source)
        if not isinstance(text, str):
            raise CoreMemoryEditError("the new text must be text")
        current = self._read_expecting(file, expected_version)
        text = clean_text(text)
        return self._write(current, text, source=source, action="rewrite", detail=text)

    # -- internals ----------------------------------------------------------------------------

    def _read_expecting(self, file: str, expected_version: int | None) -> CoreFileState:
        current = self.read(file=file)
        if expected_version is not None and current.version != expected_version:
            raise CoreMemoryConflict(file, expected=expected_version, actual=current.version)
        return current

    def _write(self, current: CoreFileState, text: str, *, source: str, action: str, detail: str) -> CoreFileState:
        file = current.file
        if text == current.text and current.exists:
            return current  # nothing changes: no write, no event, no history entry
        tokens = count_text(text)
        cap = self._caps[file]
        # A file can be over its cap when the cap was lowered later; edits that shrink it are
        # let through so it can be brought back under the cap step by step.
        if tokens > cap and tokens >= current.tokens:
            raise CoreMemoryFull(file, tokens=tokens, cap=cap)
        try:
            # version 0 of a file never written is MUST_NOT_EXIST: two first writers cannot both win.
            item = self._kv.put(current.scope, file, text, expected_version=current.version)
        except VersionConflict as exc:
            raise CoreMemoryConflict(file, expected=current.version, actual=exc.actual) from None
        change = CoreChange(
            version=item.version, source=source, action=action, at=self._clock(), tokens=tokens, detail=_detail(detail)
        )
        self._record(current.scope, file, change)
        if self._hooks is not None:
            self._hooks.dispatch(
                MemoryHookPoint.CORE_MEMORY_UPDATED,
                CoreMemoryUpdated(scope=current.scope, file=file, version=item.version, source=source),
            )
        return CoreFileState(file, current.scope, text, item.version, tokens, cap, item.updated_at)

    def _record(self, scope: Scope, file: str, change: CoreChange) -> None:
        # The history is written after the file (there is no multi-key transaction): a crash in
        # between loses one history line, never the edit. Its own CAS loop keeps concurrent
        # writers from dropping each other's lines.
        key = file + HISTORY_SUFFIX
        for attempt in range(_APPEND_ATTEMPTS):
            _backoff(attempt)
            item = self._kv.get(scope, key)
            lines = item.value.splitlines() if item else []
            lines.append(change.to_json())
            value = "\n".join(lines[-self._history_limit :]) + "\n"
            try:
                self._kv.put(scope, key, value, expected_version=item.version if item else MUST_NOT_EXIST)
                return
            except VersionConflict:
                continue
        logger.warning(
            "history of %s in %s: gave up after %d collisions; version %d not recorded",
            file, scope, _APPEND_ATTEMPTS, change.version,
        )
