"""Fault injection: failing summarizers, a crash after every step, SIGKILL mid-cleanup, full disks."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import memory.compression.steps as steps_module
import memory.compression.pruned as pruned_module
from memory.compression.cleanup import INTENT_KEY, CleanupFailed, CleanupStatus
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from memory.stores.registry import open_bundle

from .helpers import RecordingSummarizer, good_answer
from .test_cleanup import ARCHIVE, cleanup, conserved, conversation

ARCHIVE_CONFIG = MemoryConfig(context_window=4096, compression_threshold=1000, keep_tokens=300, archive_enabled=True)
REPO = Path(__file__).resolve().parents[3]


class Crash(Exception):
    """Stands for a process dying right after a step."""


def archived_ids(bundle) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.id for d in bundle.archive.list(ARCHIVE) for m in d.messages]


def check_archive_matches_catalog(bundle, session, catalog) -> None:  # type: ignore[no-untyped-def]
    from memory.compression.pruned import first_uncommitted_seq

    live = bundle.messages.read(session)
    committed = [e.message.id for e in catalog.entries(session, before_seq=first_uncommitted_seq(live))]
    archived = archived_ids(bundle)
    assert len(archived) == len(set(archived)), "a message is archived twice"
    # Archive documents are written before the commit, so they may run ahead by one uncommitted cut.
    assert archived[: len(committed)] == committed


# -- summarizer failures through the pipeline -------------------------------------------------


class Flaky:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.calls = 0

    async def __call__(self, messages):  # type: ignore[no-untyped-def]
        import asyncio

        self.calls += 1
        if self.behaviour == "429":
            raise RuntimeError("Error code: 429 - rate limit exceeded")
        if self.behaviour == "500":
            raise RuntimeError("Error code: 500 - internal server error")
        if self.behaviour == "timeout":
            await asyncio.sleep(30)
        return {"empty": "", "whitespace": " \n \t", "error-text": "Error: upstream model unavailable"}[self.behaviour]


@pytest.mark.parametrize("behaviour", ["429", "500", "timeout", "empty", "whitespace", "error-text"])
def test_a_failing_summarizer_gives_a_fallback_and_bounded_calls(bundle, session, catalog, behaviour) -> None:
    from memory.compression.summary import SummaryOptions

    appended = [m.id for m in bundle.messages.append(session, conversation(12))]
    model = Flaky(behaviour)
    result = cleanup(
        bundle, session, catalog, summarizer=model, summary_options=SummaryOptions(max_tokens=200, timeout=0.05)
    )
    # An endpoint error is retried twice; a useless answer gets short questions, two useless replies end them.
    calls = 3
    assert result.committed and result.fallback_summary and model.calls == calls
    summary = bundle.messages.read(session)[0]
    assert "Fallback summary (the summarizer failed:" in summary.content
    conserved(bundle, session, catalog, appended)
    # The next turn does not retry the failed model in a loop: the session is under the threshold.
    assert cleanup(bundle, session, catalog, summarizer=model).status is CleanupStatus.SKIPPED and model.calls == calls


# -- a crash after each step ------------------------------------------------------------------

STEPS = ["choose", "summarize", "save_intent", "write_catalog", "write_archive", "commit", "clear_intent", "finished"]
BEFORE_COMMIT = {"choose", "summarize", "save_intent", "write_catalog", "write_archive"}
RESUMABLE = {"save_intent", "write_catalog", "write_archive"}


def crash_after(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    original = getattr(steps_module, step)
    if step == "choose":

        def crashing(**kwargs):  # type: ignore[no-untyped-def]
            original(**kwargs)
            raise Crash(step)

    else:

        async def crashing(**kwargs):  # type: ignore[no-untyped-def]
            await original(**kwargs)
            raise Crash(step)

    monkeypatch.setattr(steps_module, step, crashing)


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_after_any_step_leaves_old_or_new_and_the_rerun_finishes(
    bundle, session, catalog, monkeypatch, step
) -> None:
    appended = bundle.messages.append(session, conversation(12))
    ids = [m.id for m in appended]
    crash_after(monkeypatch, step)
    with pytest.raises(CleanupFailed) as failure:
        cleanup(bundle, session, catalog, config=ARCHIVE_CONFIG, archive_scope=ARCHIVE)
    assert isinstance(failure.value.__cause__, Crash) and failure.value.step
    monkeypatch.undo()

    live = bundle.messages.read(session)
    if step in BEFORE_COMMIT:
        assert live == appended  # the old state, exactly
    else:
        assert live[0].is_compact_summary and [m.id for m in live[1:]] == ids[len(ids) - len(live) + 1 :]
    conserved(bundle, session, catalog, ids)
    check_archive_matches_catalog(bundle, session, catalog)

    model = RecordingSummarizer()
    rerun = cleanup(bundle, session, catalog, summarizer=model, config=ARCHIVE_CONFIG, archive_scope=ARCHIVE)
    if step in BEFORE_COMMIT:
        assert rerun.committed
        assert rerun.resumed == (step in RESUMABLE)
        assert model.calls == (0 if step in RESUMABLE else 1)  # a resumed cut reuses its summary
    else:
        assert rerun.status is CleanupStatus.SKIPPED
    assert bundle.kv.get(session, INTENT_KEY) is None
    conserved(bundle, session, catalog, ids)
    check_archive_matches_catalog(bundle, session, catalog)
    assert archived_ids(bundle) == [e.message.id for e in catalog.entries(session)]


# -- full disk / unwritable catalog -----------------------------------------------------------


def test_a_disk_full_catalog_write_leaves_the_session_untouched(bundle, session, catalog, monkeypatch) -> None:
    appended = bundle.messages.append(session, conversation(12))
    real_link = os.link

    def full_under_catalog(src, dst, **kw):  # type: ignore[no-untyped-def]
        if str(dst).startswith(str(catalog.root)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_link(src, dst, **kw)

    monkeypatch.setattr(pruned_module.os, "link", full_under_catalog)
    with pytest.raises(CleanupFailed, match="No space left on device") as failure:
        cleanup(bundle, session, catalog)
    assert failure.value.step == "the pruned catalog" and "session is unchanged" in str(failure.value)
    monkeypatch.undo()
    assert bundle.messages.read(session) == appended and catalog.count(session) == 0
    assert [p.name for p in catalog.directory(session).iterdir() if p.name != ".lock"] == []  # no temp left
    model = RecordingSummarizer()
    rerun = cleanup(bundle, session, catalog, summarizer=model)
    assert rerun.committed and rerun.resumed and model.calls == 0
    conserved(bundle, session, catalog, [m.id for m in appended])


def test_a_file_in_place_of_the_catalog_directory_is_a_clear_error(bundle, session, tmp_path) -> None:
    root = tmp_path / "blocked"
    root.mkdir()
    (root / session.id).write_text("not a directory")
    catalog = PrunedCatalog(root)
    appended = bundle.messages.append(session, conversation(12))
    with pytest.raises(CleanupFailed, match="a file is in the way"):
        cleanup(bundle, session, catalog)
    assert bundle.messages.read(session) == appended


# -- a real process killed mid-cleanup (file backend) -----------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import memory.compression.steps as steps_module
    from memory.compression.cleanup import run_cleanup
    from memory.compression.pruned import PrunedCatalog
    from memory.config import MemoryConfig
    from memory.hooks import MemoryHookDispatcher
    from memory.scopes import SessionScope, UserScope
    from memory.stores.registry import open_bundle

    marker = Path({marker!r})
    answer = {answer!r}

    def summarizer(messages):
        if {point!r} == "summarizer":
            marker.write_text("in the summarizer")
            time.sleep(60)
        return answer

    if {point!r} == "archive":
        real = steps_module.write_archive
        async def stalled(**kwargs):
            result = await real(**kwargs)
            marker.write_text("archive written")
            time.sleep(60)
            return result
        steps_module.write_archive = stalled

    run_cleanup(
        bundle=open_bundle("file", root=Path({store!r})),
        session=SessionScope({session!r}),
        config=MemoryConfig(context_window=4096, compression_threshold=1000, keep_tokens=300, archive_enabled=True),
        summarizer=summarizer,
        catalog=PrunedCatalog(Path({pruned!r})),
        hooks=MemoryHookDispatcher(),
        archive_scope=UserScope("42"),
        lease_ttl=1.0,
    )
    """
)


@pytest.mark.parametrize("point", ["summarizer", "archive"])
def test_sigkill_mid_cleanup_loses_nothing(tmp_path: Path, session, point: str) -> None:
    store, pruned, marker = tmp_path / "store", tmp_path / "pruned", tmp_path / "marker"
    bundle = open_bundle("file", root=store)
    catalog = PrunedCatalog(pruned)
    appended = bundle.messages.append(session, conversation(12))
    code = CHILD.format(
        repo=str(REPO),
        marker=str(marker),
        answer=good_answer(),
        point=point,
        store=str(store),
        session=session.id,
        pruned=str(pruned),
    )
    child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists():
        if child.poll() is not None:
            pytest.fail(f"the child exited early: {child.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            child.kill()
            pytest.fail("the child never reached the kill point")
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL

    assert bundle.messages.read(session) == appended  # the old state
    ids = [m.id for m in appended]
    conserved(bundle, session, catalog, ids)
    # The dead worker's lease blocks others only until its ttl runs out.
    busy = cleanup(bundle, session, catalog, config=ARCHIVE_CONFIG, archive_scope=ARCHIVE)
    assert busy.status is CleanupStatus.BUSY
    time.sleep(1.1)
    model = RecordingSummarizer()
    rerun = cleanup(bundle, session, catalog, summarizer=model, config=ARCHIVE_CONFIG, archive_scope=ARCHIVE)
    assert rerun.committed and rerun.resumed == (point == "archive")
    conserved(bundle, session, catalog, ids)
    assert archived_ids(bundle) == [e.message.id for e in catalog.entries(session)]


def test_an_intent_left_by_a_cleared_session_is_never_resumed(bundle, session, catalog, monkeypatch) -> None:
    bundle.messages.append(session, conversation(12))
    crash_after(monkeypatch, "save_intent")
    with pytest.raises(CleanupFailed):
        cleanup(bundle, session, catalog)
    monkeypatch.undo()
    assert bundle.kv.get(session, INTENT_KEY) is not None
    # The conversation is deleted and its id reused: same seqs, other messages.
    bundle.messages.clear(session)
    catalog.delete_session(session)
    fresh = bundle.messages.append(session, conversation(12))
    model = RecordingSummarizer()
    result = cleanup(bundle, session, catalog, summarizer=model)
    assert result.committed and not result.resumed and model.calls == 1
    conserved(bundle, session, catalog, [m.id for m in fresh])
