"""Concurrent writers on one scope lose nothing. Threads; every backend."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connections

from memory.scopes import SessionScope
from memory.stores.base import ArchiveDocument, ConcurrentChange, VersionConflict

from .helpers import summary, user

S = SessionScope("busy")
THREADS = 4


def _run_threads(work: Callable[[int], None], n: int = THREADS) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def target(index: int) -> None:
        try:
            start.wait()
            work(index)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()  # each thread has its own database connection

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


def test_concurrent_appends_keep_every_message(threaded_bundle):
    per_thread = 25

    def work(index: int) -> None:
        for i in range(per_thread):
            threaded_bundle.messages.append(S, [user(f"t{index} m{i}")])

    _run_threads(work)
    messages = threaded_bundle.messages.read(S)
    assert [m.seq for m in messages] == list(range(1, THREADS * per_thread + 1))
    expected = sorted(f"t{t} m{i}" for t in range(THREADS) for i in range(per_thread))
    assert sorted(m.content for m in messages) == expected
    for t in range(THREADS):  # each writer's own order is kept
        mine = [m.content for m in messages if m.content.startswith(f"t{t} ")]
        assert mine == [f"t{t} m{i}" for i in range(per_thread)]
    assert threaded_bundle.messages.head(S).count == THREADS * per_thread


def test_concurrent_compare_and_set_loses_no_update(threaded_bundle):
    per_thread = 10
    key = "counter"

    def work(index: int) -> None:
        done = 0
        while done < per_thread:
            item = threaded_bundle.kv.get(S, key)
            try:
                threaded_bundle.kv.put(S, key, str(int(item.value) + 1 if item else 1),
                                       expected_version=item.version if item else 0)
                done += 1
            except VersionConflict:
                continue

    _run_threads(work)
    item = threaded_bundle.kv.get(S, key)
    assert item.value == str(THREADS * per_thread)
    assert item.version == THREADS * per_thread


def test_prune_races_with_appends(threaded_bundle):
    threaded_bundle.messages.append(S, [user(f"old {i}") for i in range(20)])
    appended: list[str] = []
    outcome: dict[str, object] = {}

    def work(index: int) -> None:
        if index == 0:
            head = threaded_bundle.messages.head(S)
            try:
                outcome["result"] = threaded_bundle.messages.prune(
                    S, through_seq=10, summary=summary(), expected_version=head.version)
            except ConcurrentChange:
                outcome["result"] = None
        else:
            for i in range(10):
                appended.append(threaded_bundle.messages.append(S, [user(f"new {index}.{i}")])[0].id)

    _run_threads(work)
    session = threaded_bundle.messages.read(S)
    ids = {m.id for m in session}
    assert set(appended) <= ids, "an append racing a prune was lost"
    result = outcome["result"]
    if result is not None:
        assert session[0] == result.summary
        assert len(result.evicted) == 10 and len(session) == 1 + 10 + len(appended)
    else:
        assert len(session) == 20 + len(appended)


def test_concurrent_archive_puts_get_distinct_seqs(threaded_bundle):
    def work(index: int) -> None:
        for i in range(5):
            threaded_bundle.archive.put(S, ArchiveDocument(session="session:busy", summary=f"doc {index}.{i}"))
        # The same id from every thread: stored once.
        threaded_bundle.archive.put(S, ArchiveDocument(session="session:busy", summary="shared", id="shared-doc"))

    _run_threads(work)
    docs = threaded_bundle.archive.list(S)
    assert [d.seq for d in docs] == sorted({d.seq for d in docs})
    assert len(docs) == THREADS * 5 + 1
    assert sum(1 for d in docs if d.id == "shared-doc") == 1


@pytest.mark.parametrize("expected", [None, 0])
def test_concurrent_cursor_claims_have_one_winner(threaded_bundle, expected):
    if expected == 0:
        threaded_bundle.cursors.set(S, "dream", 0)
    wins: list[int] = []

    def work(index: int) -> None:
        try:
            threaded_bundle.cursors.set(S, "dream", index + 1, expected=expected)
            wins.append(index + 1)
        except ConcurrentChange:
            pass

    _run_threads(work)
    assert len(wins) == 1
    assert threaded_bundle.cursors.get(S, "dream") == wins[0]
