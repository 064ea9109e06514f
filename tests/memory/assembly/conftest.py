"""Fixtures for the assembly tests. The ``bundle`` fixture comes from tests/conftest.py."""

from __future__ import annotations

import pytest

from memory.compression.pruned import PrunedCatalog
from memory.hooks import MemoryHookDispatcher, MemoryHookPoint


@pytest.fixture
def catalog(tmp_path):
    return PrunedCatalog(tmp_path / "pruned")


@pytest.fixture
def assembled_events():
    return []


@pytest.fixture
def hooks(assembled_events):
    dispatcher = MemoryHookDispatcher()
    dispatcher.register(MemoryHookPoint.CONTEXT_ASSEMBLED, assembled_events.append)
    return dispatcher
