"""Dates as summaries and the pruned section write them: "8 May 2023", "8 May 2023 14:05" (UTC).

One form everywhere a model reads a date (summary input, compact summaries, the pruned
section), day first and the month spelled out, so no reader mistakes 05/08 for 8 May, and
a small model can copy it as it is ("On 8 May 2023 ...").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from memory.messages import Message

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def day(moment: datetime) -> str:
    """``8 May 2023`` (the UTC date)."""
    moment = _utc(moment)
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


def stamp(moment: datetime) -> str:
    """``8 May 2023 14:05`` (UTC)."""
    return f"{day(moment)} {_utc(moment):%H:%M}"


def span(messages: Sequence[Message]) -> str | None:
    """``on 8 May 2023`` or ``from 8 May 2023 to 12 May 2023``: the days ``messages`` cover."""
    if not messages:
        return None
    first, last = day(min(m.created_at for m in messages)), day(max(m.created_at for m in messages))
    return f"on {first}" if first == last else f"from {first} to {last}"
