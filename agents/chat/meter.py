"""The context meter of a conversation: its history in the session's KV store, and view models.

Every ContextReady of a turn is recorded as a point (turn, step, total tokens, window,
threshold, the conversation's size) in the session scope's KV item ``meter.json``, with the full
per-section accounting of the latest one and its counts in words; every committed cleanup is
recorded as a mark. Only the last ``MAX_POINTS`` points are kept (and the marks among them), so
the value stays small. Because the history lives in the session scope, deleting a conversation
deletes it too.

Two quantities, never mixed: the *context* is everything a request holds (instructions, memory
sections, tools, the messages that fit), drawn against the window; the *conversation size* is
the live session's stored tokens (every live message, also those too old for the window, and
nothing else), which is what cleanup compares with the threshold. The threshold line is drawn
on the conversation size only.

``meter_view`` and ``chart_view`` turn that data into what the templates draw: the stacked bar
of the context window by section (fixed colour per section), the conversation size against the
threshold, and a small SVG chart of both per step with cleanup points marked.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace

from agents.chat.sections import LABELS, ORDER, section_key, section_words
from agents.runtime.events import CleanupDone, ContextReady
from memory.hooks import SectionAccount
from memory.scopes import SessionScope
from memory.stores.base import MUST_NOT_EXIST, KVStore, VersionConflict

logger = logging.getLogger("agents.chat.service")

METER_KEY = "meter.json"
MAX_POINTS = 200
_CAS_ATTEMPTS = 5

# -- stored history ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MeterPoint:
    n: int  # running number of the point in the conversation (never reused)
    turn: int
    step: int
    total: int
    window: int
    threshold: int
    session: int = -1  # the conversation's size (session tokens); -1: not recorded (older points)


@dataclass(frozen=True, slots=True)
class CleanupMark:
    after_n: int  # the cleanup happened after point ``after_n`` (0: before the first)
    evicted: int
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class MeterHistory:
    """What ``meter.json`` holds. ``sections`` is the accounting of the latest point, ``words``
    its counts in words by section name."""

    points: tuple[MeterPoint, ...] = ()
    cleanups: tuple[CleanupMark, ...] = ()
    sections: tuple[SectionAccount, ...] = ()
    turns: int = 0
    counter: int = 0
    words: tuple[tuple[str, str], ...] = ()

    @property
    def last(self) -> MeterPoint | None:
        return self.points[-1] if self.points else None

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": 1,
                "turns": self.turns,
                "counter": self.counter,
                "points": [[p.n, p.turn, p.step, p.total, p.window, p.threshold, p.session] for p in self.points],
                "cleanups": [[c.after_n, c.evicted, c.tokens_before, c.tokens_after] for c in self.cleanups],
                "sections": [[s.name, s.tokens, s.items] for s in self.sections],
                "words": [list(pair) for pair in self.words],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> MeterHistory:
        """Parse ``meter.json``; anything unreadable gives an empty history (it is only a chart)."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
            return cls(
                points=tuple(MeterPoint(*map(int, row)) for row in data.get("points", ())),
                cleanups=tuple(CleanupMark(*map(int, row)) for row in data.get("cleanups", ())),
                sections=tuple(SectionAccount(str(n), int(t), int(i)) for n, t, i in data.get("sections", ())),
                turns=int(data.get("turns", 0)),
                counter=int(data.get("counter", 0)),
                words=tuple((str(name), str(said)) for name, said in data.get("words", ())),
            )
        except (ValueError, TypeError, AttributeError):
            logger.warning("unreadable %s; starting a new meter history", METER_KEY)
            return cls()

    def with_context(self, event: ContextReady) -> MeterHistory:
        turns = self.turns + 1 if event.step <= 1 or not self.points else self.turns
        point = MeterPoint(
            self.counter + 1, turns, event.step, event.total_tokens, event.window, event.threshold, event.session_tokens
        )
        points = (*self.points, point)[-MAX_POINTS:]
        first = points[0].n
        cleanups = tuple(c for c in self.cleanups if c.after_n >= first - 1)
        return MeterHistory(points, cleanups, tuple(event.sections), turns, point.n, event_words(event))

    def with_cleanup(self, event: CleanupDone) -> MeterHistory:
        mark = CleanupMark(self.counter, event.evicted_count, event.tokens_before, event.tokens_after)
        return replace(self, cleanups=(*self.cleanups, mark)[-MAX_POINTS:])


def event_words(event: ContextReady) -> tuple[tuple[str, str], ...]:
    """Each section's count in words, by section name; by part where the step's request is at
    hand (the archive's recalled messages and summaries)."""
    parts = {}
    if event.context is not None:
        parts = {s.name: tuple((p.key, p.items) for p in s.parts) for s in event.context.sections}
    return tuple(
        (account.name, section_words(section_key(account.name), account.items, parts.get(account.name, ())))
        for account in event.sections
    )


def load_history(*, kv: KVStore, session: SessionScope) -> MeterHistory:
    """The conversation's meter history (empty when nothing was recorded yet)."""
    return MeterHistory.from_json(kv.get_value(session, METER_KEY))


def _update(kv: KVStore, session: SessionScope, change) -> MeterHistory:
    for _attempt in range(_CAS_ATTEMPTS):
        item = kv.get(session, METER_KEY)
        history = change(MeterHistory.from_json(item.value if item else None))
        try:
            kv.put(session, METER_KEY, history.to_json(), expected_version=item.version if item else MUST_NOT_EXIST)
            return history
        except VersionConflict:
            continue
    raise VersionConflict(f"{METER_KEY} keeps changing under us", expected=None, actual=None)


def record_context(*, kv: KVStore, session: SessionScope, event: ContextReady) -> MeterHistory:
    """Add a ContextReady point (compare-and-set; bounded to MAX_POINTS); return the new history."""
    return _update(kv, session, lambda history: history.with_context(event))


def record_cleanup(*, kv: KVStore, session: SessionScope, event: CleanupDone) -> MeterHistory:
    """Add a cleanup mark after the latest point; return the new history."""
    return _update(kv, session, lambda history: history.with_cleanup(event))


# -- the bar ----------------------------------------------------------------------------------


def _pct(part: float, whole: float) -> float:
    return 0.0 if whole <= 0 else max(0.0, min(100.0, 100.0 * part / whole))


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    label: str
    tokens: int
    items: int
    percent: float  # of the window, for the legend
    width: str  # CSS width of the segment on the bar, e.g. "12.500%"
    words: str = ""  # the count said in words ("2 files"), "" when there is none to say


@dataclass(frozen=True, slots=True)
class MeterView:
    """The stacked bar and legend, and the conversation's size against the threshold.
    ``empty``: no context has been assembled yet. ``session`` is -1 when the latest point did
    not record it (a history from before it was recorded)."""

    segments: tuple[Segment, ...]
    total: int
    window: int
    threshold: int
    completion: int
    empty: bool
    threshold_left: str = "0%"
    total_percent: float = 0.0
    completion_width: str = "0%"
    over_threshold: bool = False
    legend: tuple[Segment, ...] = field(default=())
    session: int = -1
    session_width: str = "0%"  # of the conversation-size bar (same scale as the threshold mark)
    threshold_anchor: str = "middle"  # SVG text-anchor of the threshold label: kept inside the bar
    session_percent: float = 0.0  # of the threshold

    @property
    def session_known(self) -> bool:
        return self.session >= 0


def _anchor(percent: float) -> str:
    """Where the threshold label hangs off its line so that it stays inside the bar."""
    return "end" if percent > 70 else "start" if percent < 30 else "middle"


def meter_view(
    *,
    sections: tuple[SectionAccount, ...],
    total: int,
    window: int,
    threshold: int,
    completion: int = 0,
    session: int = -1,
    words: tuple[tuple[str, str], ...] = (),
) -> MeterView:
    """Merge sections by colour key (in the fixed order), add the message framing, scale to the
    window (or to the total when it overflows the window). ``session`` is the conversation's size
    (what cleanup compares with ``threshold``); its bar is scaled to the window too (or to the
    size when it is larger), so the threshold mark stands where it would on the window.
    ``words`` gives each section's count in words by section name (else from the count alone)."""
    merged: dict[str, list[int]] = {}
    said: dict[str, list[str]] = {}
    told = dict(words)
    for account in sections:
        key = section_key(account.name)
        slot = merged.setdefault(key, [0, 0])
        slot[0] += account.tokens
        slot[1] += account.items
        said.setdefault(key, []).append(told.get(account.name) or section_words(key, account.items))
    overhead = total - sum(tokens for tokens, _ in merged.values())
    if overhead > 0:
        merged["overhead"] = [overhead, 0]
    scale = max(window, total + completion, 1)

    def in_words(key: str, items: int) -> str:
        return ", ".join(text for text in said.get(key, ()) if text)

    segments = tuple(
        Segment(
            key, LABELS[key], tokens, items, round(_pct(tokens, window), 1), f"{_pct(tokens, scale):.3f}%",
            in_words(key, items),
        )
        for key, (tokens, items) in sorted(merged.items(), key=lambda kv: ORDER[kv[0]])
        if tokens > 0 or key in ("system", "messages")
    )
    session_scale = max(window, session, 1)
    threshold_pct = _pct(threshold, session_scale)
    return MeterView(
        segments=tuple(s for s in segments if s.tokens > 0),
        total=total,
        window=window,
        threshold=threshold,
        completion=completion,
        empty=not sections,
        threshold_left=f"{threshold_pct:.3f}%",
        total_percent=round(_pct(total, window), 1),
        completion_width=f"{_pct(completion, scale):.3f}%",
        over_threshold=session > threshold,
        legend=segments,
        session=session,
        session_width=f"{_pct(max(session, 0), session_scale):.3f}%",
        threshold_anchor=_anchor(threshold_pct),
        session_percent=round(100.0 * max(session, 0) / threshold, 1) if threshold > 0 else 0.0,
    )


def completion_width(*, total: int, window: int, completion: int) -> str:
    """The CSS width of the completion segment while a reply streams."""
    return f"{_pct(completion, max(window, total + completion, 1)):.3f}%"


# -- the chart --------------------------------------------------------------------------------

CHART_W, CHART_H = 320, 120
_LEFT, _RIGHT, _TOP, _BOTTOM = 34, 6, 8, 10


# Coordinates are strings formatted here, so template localization can never turn a "." into a ",".


@dataclass(frozen=True, slots=True)
class ChartDot:
    x: str
    y: str
    title: str


@dataclass(frozen=True, slots=True)
class ChartMark:
    x: str
    title: str


@dataclass(frozen=True, slots=True)
class ChartView:
    """Coordinates for templates/chat/fragments.html#chart (viewBox 0 0 CHART_W CHART_H)."""

    empty: bool
    width: int = CHART_W
    height: int = CHART_H
    line: str = ""
    area: str = ""
    dots: tuple[ChartDot, ...] = ()
    marks: tuple[ChartMark, ...] = ()
    threshold_y: str | None = None
    window_y: str = str(_TOP)
    ticks: tuple[tuple[str, str], ...] = ()
    tick_x: int = _LEFT - 6
    mark_y: int = _TOP + 4
    plot_left: int = _LEFT
    plot_right: int = CHART_W - _RIGHT
    plot_top: int = _TOP
    plot_bottom: int = CHART_H - _BOTTOM
    first_turn: int = 0
    last_turn: int = 0
    cleanup_count: int = 0


def _short(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k".replace(".0k", "k") if tokens >= 1000 else str(tokens)


def _size(point: MeterPoint) -> int:
    """The conversation's size at a point; the context's for points that did not record it."""
    return point.session if point.session >= 0 else point.total


def chart_view(history: MeterHistory) -> ChartView:
    """Per step: the context sent (shaded area), the conversation's size (line and dots) against
    the threshold (dashed: the same quantity cleanup compares), cleanups (vertical marks)."""
    points = history.points
    if not points:
        return ChartView(empty=True)
    window = max(p.window for p in points)
    top = max(window, max(p.total for p in points), max(_size(p) for p in points), 1)
    bottom_y, height = CHART_H - _BOTTOM, CHART_H - _BOTTOM - _TOP
    width = CHART_W - _LEFT - _RIGHT
    step = width / max(len(points) - 1, 1)

    def x_of(index: float) -> str:
        return f"{_LEFT + (index * step if len(points) > 1 else width / 2):.1f}"

    def y_of(tokens: int) -> str:
        return f"{bottom_y - height * tokens / top:.1f}"

    context = [(x_of(i), y_of(p.total)) for i, p in enumerate(points)]
    coords = [(x_of(i), y_of(_size(p))) for i, p in enumerate(points)]
    line = " ".join(f"{x},{y}" for x, y in coords)
    area = f"M{context[0][0]},{bottom_y} " + " ".join(f"L{x},{y}" for x, y in context) + f" L{context[-1][0]},{bottom_y} Z"
    dots = tuple(
        ChartDot(x, y, f"turn {p.turn} · step {p.step}: conversation {_size(p):,} tokens, context sent {p.total:,}")
        for (x, y), p in zip(coords, points, strict=True)
    )
    index_of = {p.n: i for i, p in enumerate(points)}
    marks = []
    for mark in history.cleanups:
        if mark.after_n in index_of:
            at = index_of[mark.after_n] + 0.5 if index_of[mark.after_n] < len(points) - 1 else index_of[mark.after_n]
        elif mark.after_n < points[0].n:
            at = 0
        else:
            continue
        title = f"cleanup: {mark.evicted} messages moved, {mark.tokens_before:,} → {mark.tokens_after:,} tokens"
        marks.append(ChartMark(x_of(at), title))
    threshold = points[-1].threshold
    ticks = ((y_of(0), "0"), (y_of(top), _short(top)))
    # The threshold's tick only where it does not overprint the others (10 px text).
    if threshold and any(abs(float(y_of(threshold)) - float(y)) < 10 for y, _ in ticks):
        threshold_tick = ()
    else:
        threshold_tick = ((y_of(threshold), _short(threshold)),) if threshold else ()
    return ChartView(
        empty=False,
        line=line,
        area=area,
        dots=dots,
        marks=tuple(marks),
        threshold_y=y_of(threshold) if threshold else None,
        window_y=y_of(window),
        ticks=ticks + threshold_tick,
        first_turn=points[0].turn,
        last_turn=points[-1].turn,
        cleanup_count=len(marks),
    )
