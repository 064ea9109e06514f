"""Fixtures of the compression tests. ``bundle`` (file and sqlite) comes from tests/conftest.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from memory.compression.pruned import PrunedCatalog
from memory.hooks import MemoryHookDispatcher, MemoryHookPoint
from memory.scopes import SessionScope


@pytest.fixture
def catalog(tmp_path: Path) -> PrunedCatalog:
    return PrunedCatalog(tmp_path / "pruned")


@pytest.fixture
def session() -> SessionScope:
    return SessionScope("s" + uuid.uuid4().hex[:12])


class HookRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[MemoryHookPoint, object]] = []

    def of(self, point: MemoryHookPoint) -> list[object]:
        return [event for p, event in self.events if p is point]


@pytest.fixture
def recorder() -> HookRecorder:
    return HookRecorder()


@pytest.fixture
def hooks(recorder: HookRecorder) -> MemoryHookDispatcher:
    dispatcher = MemoryHookDispatcher()
    for point in MemoryHookPoint:
        dispatcher.register(point, lambda event, point=point: recorder.events.append((point, event)))
    return dispatcher
