"""memory.memo.Memo: bounded, oldest insertions dropped first, safe across threads."""

from __future__ import annotations

import threading

import pytest

from memory.memo import Memo
from memory.stores.codec import DecodeMemo


def test_holds_at_most_size_and_drops_the_oldest_first():
    memo = Memo(16)
    for i in range(40):
        memo.put(i, str(i))
        assert len(memo) <= 16
    assert memo.get(39) == "39" and memo.get(0) is None
    kept = [i for i in range(40) if memo.get(i) is not None]
    assert kept == list(range(40 - len(kept), 40))  # a suffix: the newest survive


def test_a_re_put_key_counts_as_new():
    memo = Memo(8)
    memo.put_many(range(8), [str(i) for i in range(8)])
    memo.put(0, "zero")
    memo.put_many(range(8, 12), ["x"] * 4)
    assert memo.get(0) == "zero" and memo.get(1) is None


def test_size_must_be_positive():
    with pytest.raises(ValueError):
        Memo(0)


def test_decode_keeps_small_reads_and_never_a_flushing_one():
    memo, calls = DecodeMemo(10), []

    def decode(raws):
        calls.append(list(raws))
        return [raw.upper() for raw in raws]

    assert memo.decode(["a", "b"], decode) == ["A", "B"]
    assert memo.decode(["b", "c", "a"], decode) == ["B", "C", "A"]
    assert calls == [["a", "b"], ["c"]]
    big = [f"k{i}" for i in range(20)]
    assert memo.decode(big, decode) == [k.upper() for k in big]
    assert memo.get("a") == "A" and memo.get("k0") is None  # the big read left the memo alone


def test_concurrent_puts_and_gets_stay_consistent():
    memo, errors = Memo(64), []

    def work(offset):
        try:
            for i in range(2_000):
                memo.put((offset, i), i)
                value = memo.get((offset, i - 1))
                assert value is None or value == i - 1
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(memo) <= 64
