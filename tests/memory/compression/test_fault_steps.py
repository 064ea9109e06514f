"""Every fault inside the cleanup pipeline surfaces as CleanupFailed, naming its step.

The seam is the stores and the catalog: a proxy passes every call through to the real backend
(file or sqlite) and raises on the Nth one. Whatever N and whatever the exception, the cleanup
either returns a result or raises CleanupFailed (never the raw error), the session is the old
one or the new one, nothing is lost, and a cleanup with healthy stores then finishes.
"""

from __future__ import annotations

import errno
import sqlite3
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memory.compression.steps as steps_module
from memory.compression.cleanup import INTENT_KEY, CleanupFailed, CleanupStatus
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from memory.scopes import SessionScope
from memory.stores.base import MemoryStoreBundle

from .helpers import RecordingSummarizer
from .test_cleanup import ARCHIVE, cleanup, conserved, conversation

CONFIG = MemoryConfig(context_window=4096, compression_threshold=1000, keep_tokens=300, archive_enabled=True)


class Injected(Exception):
    """Raised by a faulty store; tests match it through ``__cause__``."""


FAULTS = {
    "os": lambda: OSError(errno.EIO, "Input/output error"),
    "sqlite": lambda: sqlite3.OperationalError("database is locked"),
    "value": lambda: ValueError("corrupt row"),
    "runtime": lambda: RuntimeError("store down"),
    "key": lambda: KeyError("missing"),
}


class Faults:
    """Counts calls through every proxy and raises on call number ``fail_at`` (1-based)."""

    def __init__(self, fail_at: int | None, kind: str) -> None:
        self.fail_at = fail_at
        self.kind = kind
        self.calls: list[str] = []

    def hit(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            error = FAULTS[self.kind]()
            error.__cause__ = Injected(name)
            raise error


class Faulty:
    """Wraps an object: each public method call first asks ``faults`` whether to fail."""

    def __init__(self, target: Any, label: str, faults: Faults) -> None:
        self._target, self._label, self._faults = target, label, faults

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name.startswith("_") or not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._faults.hit(f"{self._label}.{name}")
            return value(*args, **kwargs)

        return call


def faulty(bundle: MemoryStoreBundle, catalog: PrunedCatalog, faults: Faults) -> tuple[MemoryStoreBundle, Any]:
    wrapped = replace(
        bundle,
        messages=Faulty(bundle.messages, "messages", faults),
        kv=Faulty(bundle.kv, "kv", faults),
        archive=Faulty(bundle.archive, "archive", faults),
    )
    return wrapped, Faulty(catalog, "catalog", faults)


def calls_of_a_clean_cleanup(bundle: MemoryStoreBundle, tmp: Path) -> int:
    """How many store calls one full cleanup makes, counted on a scratch session."""
    session = SessionScope("count" + uuid.uuid4().hex[:8])
    catalog = PrunedCatalog(tmp / "count")
    bundle.messages.append(session, conversation(12))
    faults = Faults(None, "os")
    wrapped, wrapped_catalog = faulty(bundle, catalog, faults)
    assert cleanup(wrapped, session, wrapped_catalog, config=CONFIG, archive_scope=ARCHIVE).committed
    return len(faults.calls)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fail_at=st.integers(1, 40), kind=st.sampled_from(sorted(FAULTS)), turns=st.integers(9, 14))
def test_any_store_fault_is_cleanup_failed_and_loses_nothing(
    bundle: MemoryStoreBundle, tmp_path: Path, fail_at: int, kind: str, turns: int
) -> None:
    session = SessionScope("f" + uuid.uuid4().hex[:12])
    catalog = PrunedCatalog(tmp_path / session.id)
    appended = bundle.messages.append(session, conversation(turns))
    ids = [m.id for m in appended]
    faults = Faults(fail_at, kind)
    wrapped, wrapped_catalog = faulty(bundle, catalog, faults)
    try:
        result = cleanup(wrapped, session, wrapped_catalog, config=CONFIG, archive_scope=ARCHIVE)
    except CleanupFailed as failure:
        failed_call = faults.calls[fail_at - 1]
        assert failure.step and failure.session == session
        assert f"failed at {failure.step}" in str(failure)
        assert isinstance(failure.__cause__, type(FAULTS[kind]())), failure.__cause__
        assert isinstance(failure.__cause__.__cause__, Injected) and str(failure.__cause__.__cause__) == failed_call
        assert "the next cleanup" in str(failure) or "no cleanup was started" in str(failure)
    else:
        # Past the last call, or the fault hit the lease release, the very last calls (it reads
        # the lease to check it is still ours, then deletes it): logged, not raised, because the
        # cleanup is settled and the lease expires by its ttl.
        assert len(faults.calls) < fail_at or (
            len(faults.calls) == fail_at and faults.calls[-1] in ("kv.get", "kv.delete")
        )
        assert result.status is CleanupStatus.COMMITTED, result.reason
    conserved(bundle, session, catalog, ids)

    rerun = cleanup(bundle, session, catalog, config=CONFIG, archive_scope=ARCHIVE)
    if rerun.status is CleanupStatus.BUSY:
        # Only a lease that could not be released blocks it (until its ttl; not waited for here).
        assert faults.calls[fail_at - 1] == "kv.delete"
        bundle.kv.delete(session, "lease.cleanup")
        rerun = cleanup(bundle, session, catalog, config=CONFIG, archive_scope=ARCHIVE)
    assert rerun.status in (CleanupStatus.COMMITTED, CleanupStatus.SKIPPED), rerun.reason
    assert bundle.kv.get(session, INTENT_KEY) is None
    conserved(bundle, session, catalog, ids)
    live = bundle.messages.read(session)
    assert live[0].is_compact_summary


def test_the_injection_reaches_every_store_call(bundle: MemoryStoreBundle, tmp_path: Path) -> None:
    # The property above draws fail_at from 1..40: that must cover a whole cleanup.
    assert 8 <= calls_of_a_clean_cleanup(bundle, tmp_path) <= 40


@pytest.mark.parametrize(
    ("step", "name"),
    [("choose", "choosing the boundary"), ("summarize", "the summary"), ("load_intent", "loading the intent")],
)
def test_a_bug_in_a_step_is_cleanup_failed_with_that_step(
    bundle: MemoryStoreBundle, session: SessionScope, catalog: PrunedCatalog, monkeypatch, step: str, name: str
) -> None:
    appended = bundle.messages.append(session, conversation(12))

    def broken(**kwargs: Any) -> Any:
        raise TypeError(f"bug in {step}")

    async def abroken(**kwargs: Any) -> Any:
        raise TypeError(f"bug in {step}")

    monkeypatch.setattr(steps_module, step, broken if step == "choose" else abroken)
    with pytest.raises(CleanupFailed) as failure:
        cleanup(bundle, session, catalog)
    assert failure.value.step == name and isinstance(failure.value.__cause__, TypeError)
    assert f"bug in {step}" in str(failure.value) and "session is unchanged" in str(failure.value)
    monkeypatch.undo()
    assert bundle.messages.read(session) == appended
    model = RecordingSummarizer()
    assert cleanup(bundle, session, catalog, summarizer=model).committed
    conserved(bundle, session, catalog, [m.id for m in appended])
