"""Core Memory: the three files an agent keeps in context, with caps and compare-and-set.

=============  ==============================================  =====================
file           scope (KV key = the file name)                  injected as
=============  ==============================================  =====================
``SOUL.md``    ``AgentScope(agent)``: the agent's identity     ``<your_identity>``
``USER.md``    ``UserScope(user)``: the person, across agents  ``<user_profile>``
``MEMORY.md``  ``CompositeScope(agent, user)``: facts per user  ``<known_facts>``
=============  ==============================================  =====================

**Who may write what.** A file is written only by someone with authority over every person who
reads it. USER.md and MEMORY.md are one user's own: the agent talking to that user, the Dream
Engine consolidating that user's archive and the user may change them. SOUL.md is shared: every
user of the agent reads it in every turn, so it is written only by staff (sources ``admin``,
``admin:<id>``) or the operator (``system``); a write to it from anyone else (the agent, the
Dream Engine, a user) raises ``SharedScopeWrite``, and those writers *propose* the change
instead (``propose``; ``memory.core_proposals``), which staff accept or reject. The source is
the writer's identity: only edges that checked staff rights pass an ``admin`` source.

Every write goes through the KVStore with ``expected_version``, so an edit made meanwhile (by
the agent's tool, the Dream Engine, or the user in the inspection page) is never silently
overwritten: the loser gets ``CoreMemoryConflict`` and can re-read and retry. ``append`` retries
its compare-and-set by itself, because appending commutes. Each file has a token cap checked
before anything is written (``CoreMemoryFull``). A change commits three keys at once
(``KVStore.commit``): the file, its change history (``<file>.history``, JSON lines, capped; the
newest entries keep the whole text, for diffs and restoring a version) and its line ledger
(``<file>.lines``: where each line came from, ``memory.core_lines``). Then CORE_MEMORY_UPDATED is
dispatched. Control characters (NUL, other C0 controls but tab/newline/CR) are dropped from
written text, CRLF and CR become LF, and lone surrogates become U+FFFD (``memory.text.storable``).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from memory import core_proposals as proposals
from memory.config import MemoryConfig
from memory.core_lines import LINES_SUFFIX, LineLedger, LineSource, clean_text, normalize_line
from memory.core_proposals import Proposal, ProposalDecided
from memory.core_values import (  # noqa: F401 - re-exported: the public surface of core memory
    CoreChange,
    CoreFileState,
    CoreMemoryConflict,
    CoreMemoryDisabled,
    CoreMemoryEditError,
    CoreMemoryError,
    CoreMemoryFull,
    InvalidSource,
    Origin,
    SharedScopeWrite,
    StagedWrite,
    UnknownCoreFile,
)
from memory.hooks import CoreMemoryUpdated, MemoryHookDispatcher, MemoryHookPoint
from memory.messages import utcnow
from memory.scopes import AgentScope, CompositeScope, Scope, UserScope, validate_id
from memory.stores.base import MUST_NOT_EXIST, KVItem, KVStore, KVWrite, VersionConflict
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
#: Whole texts kept in the history, newest first, up to this many characters in all (older
#: entries keep their one-line detail only: they can be read, not restored).
HISTORY_TEXT_CHARS = 120_000
#: Files whose scope every user of the agent shares: written only by staff or the operator.
SHARED_FILES = frozenset({SOUL})
#: Change sources that hold authority over every user of an agent.
AUTHORITY_SOURCES = frozenset({"admin", "system"})

_APPEND_ATTEMPTS = 20
_APPEND_BACKOFF_CAP = 0.05  # seconds
_DETAIL_CHARS = 160
# NUL and the other C0 controls (tab, newline, CR aside) cannot be stored portably (the KV
# stores refuse NUL) and are illegal in the XML the files are injected as; they never carry
# meaning in markdown, so writes drop them instead of failing.
_SOURCE_RE = re.compile(r"agent|dream|system|admin|(?:user|admin):(?P<user>.+)")


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


def is_shared(file: str) -> bool:
    """Whether every user of the agent reads ``file`` (SOUL.md)."""
    return check_file(file) in SHARED_FILES


def has_authority(source: str) -> bool:
    """Whether the writer ``source`` holds authority over every user of an agent (staff, the
    operator), and so may write a shared file."""
    return source in AUTHORITY_SOURCES or source.startswith("admin:")


def is_person(source: str) -> bool:
    """A person editing by hand (a user, staff): their removals are remembered as removals."""
    return source.startswith(("user:", "admin:")) or source == "admin"


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

    @property
    def agent(self) -> str:
        return self._agent

    @property
    def user(self) -> str:
        return self._user

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
        return _parse_history(item.value if item else "")

    def ledger(self, *, file: str) -> LineLedger:
        """Where each line of ``file`` came from, and what people removed from it."""
        item = self._kv.get(self.scope(file=file), file + LINES_SUFFIX)
        return LineLedger.from_json(item.value if item else None)

    # -- writes -------------------------------------------------------------------------------

    def append(self, *, file: str, text: str, source: str, origin: Origin | None = None) -> CoreFileState:
        """Add ``text`` as new line(s) at the end of the file.

        Appends commute, so a concurrent change is handled by re-reading and re-applying
        (bounded; after that CoreMemoryConflict). Raises CoreMemoryFull if the result would
        exceed the cap, CoreMemoryEditError if ``text`` is blank, SharedScopeWrite for a shared
        file written without authority.
        """
        self._check_writer(file, source)
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
                return self._write(current, base + addition + "\n", source=source, action="append",
                                   detail=addition, origin=origin)
            except CoreMemoryConflict:
                current = self.read(file=file)
        raise CoreMemoryConflict(file, expected=current.version, actual=self.read(file=file).version)

    def replace(
        self,
        *,
        file: str,
        old: str,
        new: str,
        source: str,
        expected_version: int | None = None,
        origin: Origin | None = None,
    ) -> CoreFileState:
        """Replace the one occurrence of ``old`` with ``new`` (``new=""`` removes it).

        ``old`` must occur exactly once, else CoreMemoryEditError says how often it occurs.
        With ``expected_version`` the edit applies only to that version; without it, to the
        version just read. Either way a change made meanwhile raises CoreMemoryConflict rather
        than being overwritten.
        """
        self._check_writer(file, source)
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
        return self._write(current, current.text.replace(old, new, 1), source=source, action="replace",
                           detail=detail, origin=origin)

    def rewrite(
        self, *, file: str, text: str, source: str, expected_version: int, origin: Origin | None = None,
        action: str = "rewrite",
    ) -> CoreFileState:
        """Replace the whole file with ``text``, only if it is still at ``expected_version``.

        Use version 0 (``MUST_NOT_EXIST``) for a file never written. The version is required:
        rewriting blind is exactly the silent overwrite compare-and-set exists to prevent.
        """
        self._check_writer(file, source)
        if not isinstance(text, str):
            raise CoreMemoryEditError("the new text must be text")
        current = self._read_expecting(file, expected_version)
        text = clean_text(text)
        return self._write(current, text, source=source, action=action, detail=text, origin=origin)

    def restore(self, *, file: str, version: int, source: str, expected_version: int) -> CoreFileState:
        """Make ``file`` read as it did at ``version`` again (a new version; nothing is lost).
        Raises CoreMemoryEditError when that version's text is no longer kept."""
        kept = next((c for c in self.history(file=file) if c.version == version), None)
        if kept is None or kept.text is None:
            raise CoreMemoryEditError(
                f"version {version} of {file} is no longer kept in its history; pick a newer version"
            )
        return self.rewrite(file=file, text=kept.text, source=source, expected_version=expected_version,
                            action="restore")

    def forget(self, *, file: str, source: str, expected_version: int) -> CoreFileState:
        """Empty ``file`` and forget where its lines came from; what was said before now stays
        out (the Dream Engine re-adds only statements made afterwards)."""
        self._check_writer(file, source)
        current = self._read_expecting(file, expected_version)
        ledger = self.ledger(file=file).cleared(at=self._clock())
        staged = self._stage(current, "", source=source, action="forget", detail="forgot every line",
                             origin=None, ledger=ledger)
        return self._commit_staged(staged, current)

    def propose(
        self, *, file: str, action: str, text: str = "", old: str = "", source: str, origin: Origin | None = None
    ) -> Proposal:
        """Record a change to a shared file (SOUL.md) for staff to accept or reject, instead of
        writing it (``memory.core_proposals``). Returns the Proposal; an identical pending or
        rejected one is returned as it is, not recorded twice. Raises ProposalLimit when too many
        wait, ValueError for a change that is not one."""
        check_source(source)
        if not is_shared(file):
            raise ValueError(f"{file} belongs to this user: write it, do not propose it")
        proposal = proposals.draft(agent=self._agent, user=self._user, file=file, action=action, text=text,
                                   old=old, source=source, origin=origin or Origin(),
                                   base_version=self.read(file=file).version, now=self._clock())
        recorded, write = proposals.staged_write(kv=self._kv, proposal=proposal)
        if write is None:
            return recorded
        [item] = self._kv.commit([write])
        return replace(recorded, version=item.version)

    def accept(self, *, proposal: Proposal, source: str) -> CoreFileState:
        """Apply a pending proposal to its file and mark it accepted, in one commit (``source``
        must hold authority: staff). A proposal whose change the file already holds is marked
        accepted with nothing to write. Raises ProposalDecided (decided meanwhile),
        CoreMemoryEditError (the text it changes is no longer in the file: reject it or edit
        the file by hand), CoreMemoryFull, CoreMemoryConflict (the file kept changing)."""
        self._check_writer(proposal.file, source)
        if proposal.agent != self._agent:
            raise ValueError(f"proposal {proposal.id} is for agent {proposal.agent}, not {self._agent}")
        origin = Origin(session=proposal.session, document=proposal.document, said_at=proposal.said_at,
                        seq=proposal.seq)
        for _ in range(_APPEND_ATTEMPTS):
            if not proposal.pending:
                raise ProposalDecided(f"this proposal was {proposal.status} already")
            current = self.read(file=proposal.file)
            text = _applied(current.text, proposal)
            staged = self.stage(state=current, text=text, source=source, detail=proposal.describe(), origin=origin)
            mark = proposals.decided(proposal, status=proposals.ACCEPTED, by=source, at=self._clock())
            try:
                items = self._kv.commit([*(staged.writes if staged else ()), mark])
            except VersionConflict:
                proposal = proposals.get_proposal(kv=self._kv, agent=self._agent, proposal_id=proposal.id)
                continue
            proposals.prune_decided(kv=self._kv, agent=self._agent)
            return self.published(staged, items) if staged else current
        raise CoreMemoryConflict(proposal.file, expected=None, actual=None)

    # -- staging: the Dream Engine commits several files and its cursor at once ------------------

    def stage(
        self,
        *,
        state: CoreFileState,
        text: str,
        source: str,
        detail: str,
        line_sources: Mapping[str, LineSource] | None = None,
        origin: Origin | None = None,
    ) -> StagedWrite | None:
        """The writes that would turn ``state`` (as read) into ``text``, checked as a write is
        (the writer's authority, the cap: SharedScopeWrite, CoreMemoryFull); None when nothing
        changes. ``line_sources`` gives new lines their own source (by normalised line).
        Nothing is written: commit ``StagedWrite.writes`` (they carry ``state.version`` as
        their compare-and-set), then call ``published``."""
        self._check_writer(state.file, source)
        text = clean_text(text)
        if text == state.text and state.exists:
            return None
        ledger = self.ledger(file=state.file)
        return self._stage(state, text, source=source, action="rewrite", detail=detail, origin=origin,
                           ledger=ledger, line_sources=line_sources)

    def published(self, staged: StagedWrite, items: Sequence[KVItem | None]) -> CoreFileState:
        """After ``staged``'s writes were committed (``items``: what the commit returned for
        them, in order): dispatch CORE_MEMORY_UPDATED and return the file's new state."""
        item = next(i for i in items if i is not None and i.key == staged.file and i.scope == staged.scope)
        if self._hooks is not None:
            self._hooks.dispatch(
                MemoryHookPoint.CORE_MEMORY_UPDATED,
                CoreMemoryUpdated(scope=staged.scope, file=staged.file, version=item.version, source=staged.source),
            )
        return CoreFileState(staged.file, staged.scope, staged.text, item.version, staged.tokens,
                             self._caps[staged.file], item.updated_at)

    # -- internals ----------------------------------------------------------------------------

    def _check_writer(self, file: str, source: str) -> None:
        check_source(source)
        if is_shared(file) and not has_authority(source):
            raise SharedScopeWrite(file, source=source)

    def _read_expecting(self, file: str, expected_version: int | None) -> CoreFileState:
        current = self.read(file=file)
        if expected_version is not None and current.version != expected_version:
            raise CoreMemoryConflict(file, expected=expected_version, actual=current.version)
        return current

    def _write(
        self, current: CoreFileState, text: str, *, source: str, action: str, detail: str, origin: Origin | None
    ) -> CoreFileState:
        if text == current.text and current.exists:
            return current  # nothing changes: no write, no event, no history entry
        staged = self._stage(current, text, source=source, action=action, detail=detail, origin=origin,
                             ledger=None)
        return self._commit_staged(staged, current)

    def _commit_staged(self, staged: StagedWrite, current: CoreFileState) -> CoreFileState:
        # The file's version decides a conflict; the history and ledger only change alongside
        # it, so a collision on them alone (a concurrent writer between our read and our
        # commit) is re-staged on a fresh read.
        for attempt in range(_APPEND_ATTEMPTS):
            _backoff(attempt)
            try:
                items = self._kv.commit(staged.writes)
            except VersionConflict as exc:
                latest = self.read(file=current.file)
                if latest.version != current.version:
                    raise CoreMemoryConflict(current.file, expected=current.version, actual=latest.version) from None
                if attempt == _APPEND_ATTEMPTS - 1:
                    raise CoreMemoryConflict(current.file, expected=current.version, actual=exc.actual) from None
                staged = self._restage(staged, current)
                continue
            return self.published(staged, items)
        raise CoreMemoryConflict(current.file, expected=current.version, actual=None)  # pragma: no cover

    def _restage(self, staged: StagedWrite, current: CoreFileState) -> StagedWrite:
        # Same file text and history entry; history and ledger re-read and re-derived.
        change = CoreChange.from_json(self._pending_change(staged))
        ledger_write = next(w for w in staged.writes if w.key.endswith(LINES_SUFFIX))
        ledger = LineLedger.from_json(ledger_write.value)
        return self._writes(current, staged, change, ledger)

    @staticmethod
    def _pending_change(staged: StagedWrite) -> str:
        history = next(w for w in staged.writes if w.key.endswith(HISTORY_SUFFIX))
        return (history.value or "").splitlines()[-1]

    def _stage(
        self,
        current: CoreFileState,
        text: str,
        *,
        source: str,
        action: str,
        detail: str,
        origin: Origin | None,
        ledger: LineLedger | None,
        line_sources: Mapping[str, LineSource] | None = None,
    ) -> StagedWrite:
        file = current.file
        tokens = count_text(text)
        cap = self._caps[file]
        # A file can be over its cap when the cap was lowered later; edits that shrink it are
        # let through so it can be brought back under the cap step by step.
        if tokens > cap and tokens >= current.tokens:
            raise CoreMemoryFull(file, tokens=tokens, cap=cap)
        now = self._clock()
        origin = origin or Origin()
        change = CoreChange(version=current.version + 1, source=source, action=action, at=now, tokens=tokens,
                            detail=_detail(detail), text=text, session=origin.session)
        if ledger is None:
            ledger = self.ledger(file=file)
        if action != "forget":
            said = origin.said_at if origin.said_at is not None and origin.said_at <= now else None
            here = LineSource(source, now, said, origin.session, origin.document, origin.seq)
            ledger = ledger.after(file=file, old_text=current.text, new_text=text, source=here,
                                  line_sources=line_sources, legacy_at=current.updated_at,
                                  by_person=is_person(source))
        staged = StagedWrite(file, current.scope, text, tokens, source)
        return self._writes(current, staged, change, ledger)

    def _writes(self, current: CoreFileState, staged: StagedWrite, change: CoreChange,
                ledger: LineLedger) -> StagedWrite:
        scope, file = current.scope, current.file
        history = self._kv.get(scope, file + HISTORY_SUFFIX)
        lines_item = self._kv.get(scope, file + LINES_SUFFIX)
        changes = _parse_history(history.value if history else "") + [change]
        writes = (
            # version 0 of a file never written is MUST_NOT_EXIST: two first writers cannot both win.
            KVWrite(scope, file, staged.text, expected_version=current.version),
            KVWrite(scope, file + HISTORY_SUFFIX, _render_history(changes, self._history_limit),
                    expected_version=history.version if history else MUST_NOT_EXIST),
            KVWrite(scope, file + LINES_SUFFIX, ledger.to_json(),
                    expected_version=lines_item.version if lines_item else MUST_NOT_EXIST),
        )
        return StagedWrite(file, scope, staged.text, staged.tokens, staged.source, writes)


def _applied(text: str, proposal: Proposal) -> str:
    """``text`` with ``proposal``'s change made (lines compared as a reader would)."""
    lines = text.splitlines()
    norms = [normalize_line(line) for line in lines]
    if proposal.action == "append":
        if normalize_line(proposal.text) in norms:
            return text
        return "\n".join([*lines, proposal.text]).strip("\n") + "\n"
    new = proposal.text if proposal.action == "replace" else ""
    if text.count(proposal.old) == 1:
        result = text.replace(proposal.old, new, 1)
        return "\n".join(line for line in result.splitlines() if line.strip() or not new) + ("\n" if result else "")
    matches = [i for i, norm in enumerate(norms) if norm == normalize_line(proposal.old)]
    if len(matches) != 1:
        if proposal.action == "replace" and normalize_line(proposal.text) in norms:
            return text  # the new text is there and the old one gone: nothing left to do
        raise CoreMemoryEditError(
            f"the text this proposal changes is no longer in {proposal.file}; reject it, or edit "
            f"{proposal.file} by hand"
        )
    at = matches[0]
    rest = lines[:at] + ([new] if new else []) + lines[at + 1 :]
    return "\n".join(rest).strip("\n") + "\n" if rest else ""


def _parse_history(raw: str) -> list[CoreChange]:
    changes = []
    for line in raw.splitlines():
        try:
            changes.append(CoreChange.from_json(line))
        except (ValueError, KeyError, TypeError):
            continue  # one damaged line must not hide the rest of the history
    # Concurrent writers may have recorded their lines out of order; versions are the real order.
    return sorted(changes, key=lambda change: change.version)


def _render_history(changes: list[CoreChange], limit: int) -> str:
    """The last ``limit`` changes as JSON lines; whole texts for the newest, and for the ones
    before it within ``HISTORY_TEXT_CHARS`` in all."""
    kept = changes[-limit:]
    budget = HISTORY_TEXT_CHARS
    out: list[str] = []
    for change in reversed(kept):
        if change.text is not None:
            if change is kept[-1] or len(change.text) <= budget:  # the newest is always whole
                budget = max(0, budget - len(change.text))
            else:
                budget = 0
                change = CoreChange(change.version, change.source, change.action, change.at, change.tokens,
                                    change.detail, None, change.session)
        out.append(change.to_json())
    return "\n".join(reversed(out)) + "\n"
