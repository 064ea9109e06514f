"""Several processes sharing one file root (the flock half of the file backend's lock)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import VersionConflict
from memory.stores.file import DefaultScopedStorage

S = SessionScope("shared")
PROCESSES = 3
PER_PROCESS = 20


def _append_many(root: str, index: int) -> None:
    storage = DefaultScopedStorage(Path(root))
    for i in range(PER_PROCESS):
        storage.messages.append(S, [Message(role="user", content=f"p{index} m{i}")])


def _count_up(root: str, index: int) -> None:
    kv = DefaultScopedStorage(Path(root)).kv
    done = 0
    while done < PER_PROCESS:
        item = kv.get(S, "counter")
        try:
            kv.put(S, "counter", str(int(item.value) + 1 if item else 1), expected_version=item.version if item else 0)
            done += 1
        except VersionConflict:
            pass


def _run(target, root: Path) -> None:
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=target, args=(str(root), i)) for i in range(PROCESSES)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0


@pytest.mark.slow
def test_processes_appending_to_one_session(tmp_path):
    _run(_append_many, tmp_path)
    storage = DefaultScopedStorage(tmp_path)
    messages = storage.messages.read(S)
    assert [m.seq for m in messages] == list(range(1, PROCESSES * PER_PROCESS + 1))
    assert len({m.content for m in messages}) == PROCESSES * PER_PROCESS
    for p in range(PROCESSES):
        mine = [m.content for m in messages if m.content.startswith(f"p{p} ")]
        assert mine == [f"p{p} m{i}" for i in range(PER_PROCESS)]
    # This process's cache never saw those writes: its next append must still see them all.
    storage.messages.append(S, [Message(role="user", content="last")])
    assert storage.messages.head(S).count == PROCESSES * PER_PROCESS + 1


@pytest.mark.slow
def test_processes_compare_and_set_one_key(tmp_path):
    _run(_count_up, tmp_path)
    item = DefaultScopedStorage(tmp_path).kv.get(S, "counter")
    assert (item.value, item.version) == (str(PROCESSES * PER_PROCESS), PROCESSES * PER_PROCESS)
