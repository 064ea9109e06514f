"""Memory hooks: the five points the memory system announces, their events, and the dispatcher.

These are separate from the runtime's own hook points (before/after model, tool, AFTER_GRAPH).
Every point has exactly one frozen event type (``EVENT_TYPES``). Handlers are plain callables
taking the event; they may be sync or async. They run in registration order, one after the
other, and a handler that fails is logged on the ``memory.hooks`` logger and skipped: a hook can
never break the operation that fired it (a cleanup that committed stays committed).

Running async handlers from sync code (``dispatch``): the coroutine is run to completion with
``asyncio.run``; if the calling thread already runs an event loop, it is run on a fresh loop in
a short-lived worker thread, so the call still blocks until the handler is done. From async
code, prefer ``adispatch``: it awaits async handlers on the caller's loop and runs sync handlers
through ``asgiref.sync.sync_to_async`` (thread-sensitive), so they may use the Django ORM.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from asgiref.sync import sync_to_async

from memory.messages import utcnow
from memory.scopes import Scope, SessionScope
from memory.stores.base import ConcurrentChange, KVStore

logger = logging.getLogger("memory.hooks")


class MemoryHookPoint(enum.Enum):
    """The five moments the memory system announces. Each member's docstring says when."""

    def __new__(cls, value: str, doc: str) -> MemoryHookPoint:
        member = object.__new__(cls)
        member._value_ = value
        member.__doc__ = doc
        return member

    CLEANUP_TRIGGERED = (
        "cleanup_triggered",
        "Session cleanup starts (the session crossed its threshold, or it was forced).",
    )
    CLEANUP_FINISHED = (
        "cleanup_finished",
        "Cleanup has committed the session, pruned catalog, and archive.",
    )
    CONTEXT_ASSEMBLED = (
        "context_assembled",
        "A memory context assembly finishes, with per-section token accounting.",
    )
    CORE_MEMORY_UPDATED = ("core_memory_updated", "A core memory file (SOUL.md, USER.md, MEMORY.md) changes.")
    CONSOLIDATION_FINISHED = ("consolidation_finished", "A core or dream consolidation finishes.")


# -- events -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanupTriggered:
    """Fired at CLEANUP_TRIGGERED, before the prune boundary is chosen."""

    session: SessionScope
    tokens: int  # live session tokens when the cleanup started
    threshold: int
    forced: bool = False


@dataclass(frozen=True, slots=True)
class CleanupFinished:
    """Fired at CLEANUP_FINISHED, after the prune was committed."""

    session: SessionScope
    evicted_count: int  # messages moved out of the session (the old compact summary not counted)
    kept_count: int  # messages of the kept tail (after the new compact summary)
    tokens_before: int
    tokens_after: int
    catalog_path: Path | None  # the catalog file written by this cleanup (None: all already there)
    archive_document_id: str | None  # None when the archive is off
    fallback_summary: bool  # True when the summarizer failed and the deterministic fallback was used
    through_seq: int = 0  # the last evicted seq; the new compact summary carries it


@dataclass(frozen=True, slots=True)
class SectionAccount:
    """One section of an assembled context: its name, token count and how many items it holds."""

    name: str
    tokens: int
    items: int


@dataclass(frozen=True, slots=True)
class ContextAssembled:
    """Fired at CONTEXT_ASSEMBLED with the per-section accounting the meter shows."""

    session: SessionScope
    sections: tuple[SectionAccount, ...]
    total_tokens: int
    window: int
    threshold: int
    session_tokens: int = 0  # the live session's stored tokens: what cleanup compares with threshold


@dataclass(frozen=True, slots=True)
class CoreMemoryUpdated:
    """Fired at CORE_MEMORY_UPDATED after a core memory file was written."""

    scope: Scope
    file: str  # "SOUL.md" | "USER.md" | "MEMORY.md"
    version: int  # the KV version now stored
    source: str  # who wrote it, e.g. "agent", "dream", "admin"


@dataclass(frozen=True, slots=True)
class ConsolidationFinished:
    """Fired at CONSOLIDATION_FINISHED when a Dream Engine (or core) consolidation ends."""

    scope: Scope
    mode: str  # "incremental" | "full"
    documents: int  # archive documents read
    edits: int  # core memory edits applied
    cursor: int | None = None  # the consumer position after the run
    error: str | None = None  # set when the run stopped early; nothing half-applied


MemoryEvent = CleanupTriggered | CleanupFinished | ContextAssembled | CoreMemoryUpdated | ConsolidationFinished

#: The one event type each point carries.
EVENT_TYPES: dict[MemoryHookPoint, type] = {
    MemoryHookPoint.CLEANUP_TRIGGERED: CleanupTriggered,
    MemoryHookPoint.CLEANUP_FINISHED: CleanupFinished,
    MemoryHookPoint.CONTEXT_ASSEMBLED: ContextAssembled,
    MemoryHookPoint.CORE_MEMORY_UPDATED: CoreMemoryUpdated,
    MemoryHookPoint.CONSOLIDATION_FINISHED: ConsolidationFinished,
}

HookHandler = Callable[[Any], None | Awaitable[None]]


@runtime_checkable
class MemoryHook(Protocol):
    """A handler object that knows its own point (``dispatcher.add(hook)``)."""

    point: MemoryHookPoint

    def __call__(self, event: Any) -> None | Awaitable[None]: ...


@dataclass(frozen=True, slots=True)
class HookFailure:
    """A handler that raised (or timed out); it was logged and skipped."""

    point: MemoryHookPoint
    handler: str
    error: BaseException


def _handler_name(handler: Any) -> str:
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    module = getattr(handler, "__module__", None) or type(handler).__module__
    return f"{module}.{name}"


def _is_async_callable(handler: Any) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))


def _run_coroutine_blocking(awaitable: Awaitable[Any], timeout: float | None) -> Any:
    async def runner() -> Any:
        return await asyncio.wait_for(awaitable, timeout) if timeout else await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(runner())
    # A loop runs in this thread: it cannot be re-entered, so use a fresh one in a worker.
    outcome: dict[str, Any] = {}

    def worker() -> None:
        try:
            outcome["value"] = asyncio.run(runner())
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=worker, name="memory-hook", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class MemoryHookDispatcher:
    """Handlers per MemoryHookPoint; runs them in registration order, isolating failures.

    ``handler_timeout`` bounds each async handler (seconds, None for no bound); a sync handler
    cannot be interrupted, so keep sync handlers quick. Registration is thread-safe.
    """

    def __init__(self, *, handler_timeout: float | None = 30.0) -> None:
        self._handlers: dict[MemoryHookPoint, list[HookHandler]] = {point: [] for point in MemoryHookPoint}
        self._lock = threading.Lock()
        self.handler_timeout = handler_timeout

    def register(self, point: MemoryHookPoint, handler: HookHandler) -> HookHandler:
        """Add ``handler`` at ``point`` (after the ones already there); returns it, so it decorates."""
        if not isinstance(point, MemoryHookPoint):
            raise TypeError(f"not a MemoryHookPoint: {point!r}")
        if not callable(handler):
            raise TypeError(f"a hook handler must be callable, got {type(handler).__name__}")
        with self._lock:
            self._handlers[point].append(handler)
        return handler

    def add(self, hook: MemoryHook) -> MemoryHook:
        """Register a hook object at its own ``point``."""
        self.register(hook.point, hook)
        return hook

    def unregister(self, point: MemoryHookPoint, handler: HookHandler) -> bool:
        """Remove one registration of ``handler``; True if it was registered."""
        with self._lock:
            try:
                self._handlers[point].remove(handler)
            except ValueError:
                return False
        return True

    def handlers(self, point: MemoryHookPoint) -> tuple[HookHandler, ...]:
        with self._lock:
            return tuple(self._handlers[point])

    @staticmethod
    def _check(point: MemoryHookPoint, event: Any) -> None:
        # A mismatched event is a bug in the code that fires it, not in a handler: fail loudly.
        expected = EVENT_TYPES[point]
        if not isinstance(event, expected):
            raise TypeError(f"{point.name} carries {expected.__name__}, got {type(event).__name__}")

    def _failed(self, point: MemoryHookPoint, handler: Any, exc: BaseException) -> HookFailure:
        name = _handler_name(handler)
        logger.error(
            "memory hook %s at %s failed; the operation continues",
            name,
            point.name,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        return HookFailure(point=point, handler=name, error=exc)

    def dispatch(self, point: MemoryHookPoint, event: Any) -> list[HookFailure]:
        """Run every handler of ``point`` with ``event``, blocking; returns the failures (logged)."""
        self._check(point, event)
        failures = []
        for handler in self.handlers(point):
            try:
                result = handler(event)
                if inspect.isawaitable(result):
                    _run_coroutine_blocking(result, self.handler_timeout)
            except Exception as exc:
                failures.append(self._failed(point, handler, exc))
        return failures

    async def adispatch(self, point: MemoryHookPoint, event: Any) -> list[HookFailure]:
        """Async ``dispatch``: awaits async handlers, runs sync ones via sync_to_async."""
        self._check(point, event)
        failures = []
        for handler in self.handlers(point):
            try:
                if _is_async_callable(handler):
                    result: Any = handler(event)
                else:
                    result = await sync_to_async(handler, thread_sensitive=True)(event)
                if inspect.isawaitable(result):
                    if self.handler_timeout:
                        await asyncio.wait_for(result, self.handler_timeout)
                    else:
                        await result
            except Exception as exc:  # CancelledError is a BaseException: cancellation propagates
                failures.append(self._failed(point, handler, exc))
        return failures


# -- built-in hooks ---------------------------------------------------------------------------

TODO_KEY = "todo.json"
REORIENTATION_KEY = "todo.reorientation"


class TodoReorientationHook:
    """CLEANUP_FINISHED: after a prune, remind the agent where its todo list stands.

    A prune replaces the detailed history with a summary, so the agent can lose track of its
    plan. This hook reads the todo list the todo tool keeps at KV key ``todo.json`` in the
    session scope (a JSON list of items, each a string or an object with ``content``/``title``/
    ``text`` and an optional ``status``) and writes a short reorientation note as JSON
    ``{"text", "through_seq", "created_at"}`` at ``todo.reorientation`` in the same scope. The
    runtime injects the note into the next model call and removes it (``take_reorientation``).
    No todo list, or an empty one: no note.
    """

    point = MemoryHookPoint.CLEANUP_FINISHED

    def __init__(self, *, kv: KVStore, max_items: int = 30) -> None:
        self.kv = kv
        self.max_items = max_items

    def __call__(self, event: CleanupFinished) -> None:
        item = self.kv.get(event.session, TODO_KEY)
        if item is None or not item.value.strip():
            return
        text = self.note(item.value, event=event, max_items=self.max_items)
        if text is None:
            return
        note = {"text": text, "through_seq": event.through_seq, "created_at": utcnow().isoformat()}
        self.kv.put(event.session, REORIENTATION_KEY, json.dumps(note, ensure_ascii=False))

    @staticmethod
    def note(raw: str, *, event: CleanupFinished, max_items: int = 30) -> str | None:
        """The reorientation text for todo list ``raw``, or None when there is nothing to say."""
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            data = data.get("items", data.get("todos"))
        lines: list[str] = []
        open_items = 0
        if isinstance(data, list):
            for entry in data:
                if isinstance(entry, dict):
                    label = str(entry.get("content") or entry.get("title") or entry.get("text") or "").strip()
                    status = str(entry.get("status") or "pending").strip().lower()
                else:
                    label, status = str(entry).strip(), "pending"
                if not label:
                    continue
                done = status in ("done", "completed", "complete", "cancelled")
                open_items += not done
                if len(lines) < max_items:
                    mark, suffix = ("x", "") if done else (" ", f" ({status})")
                    lines.append(f"- [{mark}] {label.splitlines()[0][:200]}{suffix}")
            if not lines:
                return None
        else:
            lines = [raw.strip()[:2000]]
            open_items = 1
        head = (
            f"Context was compacted: {event.evicted_count} earlier messages were moved to the pruned catalog "
            "and replaced by a summary. Your todo list as it stands:"
        )
        tail = (
            "Continue with the first open item; use pruned_lookup if you need a removed message in full."
            if open_items
            else "Every item is done; tell the user and finish, or add new items."
        )
        return "\n".join([head, *lines, tail])


def take_reorientation(*, kv: KVStore, session: SessionScope) -> str | None:
    """Read and remove the pending reorientation note (compare-and-set, so it is taken once)."""
    item = kv.get(session, REORIENTATION_KEY)
    if item is None:
        return None
    try:
        text = json.loads(item.value).get("text")
    except (json.JSONDecodeError, AttributeError):
        text = item.value
    try:
        kv.delete(session, REORIENTATION_KEY, expected_version=item.version)
    except ConcurrentChange:
        return None  # a newer note arrived meanwhile; the next turn takes that one
    return text or None


__all__ = [
    "EVENT_TYPES",
    "CleanupFinished",
    "CleanupTriggered",
    "ConsolidationFinished",
    "ContextAssembled",
    "CoreMemoryUpdated",
    "HookFailure",
    "MemoryEvent",
    "MemoryHook",
    "MemoryHookDispatcher",
    "MemoryHookPoint",
    "SectionAccount",
    "TodoReorientationHook",
    "take_reorientation",
]
