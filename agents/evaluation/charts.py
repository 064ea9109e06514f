"""Horizontal bar charts as SVG, drawn on the server (no script, no inline style: the page's
Content-Security-Policy holds). Colours come from classes (``static/css/evaluation.css``):
``series-N`` for the N-th series of a chart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 600
LABEL = 150  # the group labels' column
VALUE = 70  # room right of the longest bar for its value
BAR = 13
GAP = 3
GROUP_GAP = 12
LEGEND = 20


@dataclass(frozen=True)
class Group:
    """One row block: its label, and one value per series (None: no bar, a dash)."""

    label: str
    values: tuple[float | None, ...]


def bars(
    *,
    title: str,
    series: Sequence[str],
    groups: Sequence[Group],
    maximum: float | None = None,
    fmt: Callable[[float], str] = lambda v: f"{100 * v:.0f}%",
) -> str:
    """A grouped horizontal bar chart of ``groups`` (rows) by ``series`` (bars in each row)."""
    legend, top = _legend(series)
    present = [v for g in groups for v in g.values if v is not None]
    scale = maximum if maximum is not None else max(present, default=0.0)
    scale = scale if scale > 0 else 1.0
    span = WIDTH - LABEL - VALUE
    parts: list[str] = []
    y = top
    for group in groups:
        block = len(group.values) * (BAR + GAP) - GAP
        parts.append(
            f'<text class="chart-label" x="{LABEL - 8}" y="{y + block / 2 + 4:.1f}" text-anchor="end">{escape(group.label)}</text>'
        )
        for index, value in enumerate(group.values):
            name = escape(series[index]) if index < len(series) else ""
            if value is None:
                parts.append(f'<text class="chart-value" x="{LABEL + 4}" y="{y + BAR - 2}">–</text>')
            else:
                width = max(0.0, min(1.0, value / scale)) * span
                parts.append(
                    f'<rect class="series-{index}" x="{LABEL}" y="{y}" width="{width:.1f}" height="{BAR}" rx="2">'
                    f"<title>{escape(group.label)} · {name}: {escape(fmt(value))}</title></rect>"
                )
                parts.append(f'<text class="chart-value" x="{LABEL + width + 4:.1f}" y="{y + BAR - 2}">{escape(fmt(value))}</text>')
            y += BAR + GAP
        y += GROUP_GAP - GAP
    height = y + 4
    axis = f'<line class="chart-axis" x1="{LABEL}" y1="{top - 2}" x2="{LABEL}" y2="{height - 4}"></line>'
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        + "".join(legend) + axis + "".join(parts) + "</svg>"
    )


def _legend(series: Sequence[str]) -> tuple[list[str], int]:
    """The legend (one swatch and name per series, wrapped to the width) and where bars start."""
    if len(series) < 2:
        return [], 4
    parts, x, y = [], 8, 4
    for index, name in enumerate(series):
        needed = 22 + 7 * len(name)
        if x > 8 and x + needed > WIDTH:
            x, y = 8, y + 16
        parts.append(f'<rect class="series-{index}" x="{x}" y="{y}" width="10" height="10" rx="2"></rect>')
        parts.append(f'<text class="chart-legend" x="{x + 14}" y="{y + 9}">{escape(name)}</text>')
        x += needed
    return parts, y + LEGEND
