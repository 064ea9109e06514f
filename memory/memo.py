"""A bounded memo for the per-turn hot path: values kept by key, the oldest dropped first.

Every turn re-reads the same session tail, core memory files and archive summaries, and decoding,
governing, rendering and counting them again was most of a turn's assembly cost. Those results
are pure functions of their inputs, so they are kept here by key (the stored bytes, a message's
identity, a section's inputs) and shared across threads.

Lookups take no lock (a dict read is atomic) and do not reorder anything, so a hit costs one
dict read; inserts take a lock and, once ``size`` is exceeded, drop the oldest insertions (an
eighth of ``size`` at a time, so eviction costs little per insert). That
is first-in first-out, not least-recently-used: an entry still in use may be dropped and is
then computed again, which costs time, never correctness.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from itertools import islice
from typing import Any


class Memo:
    """Up to ``size`` values by key; ``get`` returns None for a key it does not hold."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.size = size
        self._entries: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        return self._entries.get(key)

    def get_many(self, keys: Sequence[Hashable]) -> list[Any]:
        get = self._entries.get
        return [get(key) for key in keys]

    def put(self, key: Hashable, value: Any) -> None:
        self.put_many((key,), (value,))

    def put_many(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        with self._lock:
            entries = self._entries
            for key, value in zip(keys, values, strict=True):
                entries.pop(key, None)  # re-inserted at the end: the newest again
                entries[key] = value
            if len(entries) > self.size:
                excess = len(entries) - self.size + max(1, self.size // 8)
                for old in list(islice(entries, excess)):
                    del entries[old]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
