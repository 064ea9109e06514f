"""Line diffs for showing what a write changed (the scope editor's "changed lines" view)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a diff. ``kind`` is ``"add"``, ``"del"``, ``"ctx"`` (unchanged context) or
    ``"gap"`` (lines skipped between hunks). Line numbers are 1-based, ``None`` where the
    line does not exist on that side."""

    kind: str
    text: str
    old_line: int | None = None
    new_line: int | None = None

    @property
    def sign(self) -> str:
        return {"add": "+", "del": "-", "ctx": " ", "gap": "…"}[self.kind]


def changed_lines(old: str, new: str, *, context: int = 1) -> list[DiffLine]:
    """The lines that differ between ``old`` and ``new``, with ``context`` lines around each change."""
    a, b = old.splitlines(), new.splitlines()
    out: list[DiffLine] = []
    for group in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_grouped_opcodes(context):
        if out:
            out.append(DiffLine("gap", ""))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(DiffLine("ctx", a[i], i + 1, j1 + (i - i1) + 1) for i in range(i1, i2))
                continue
            if tag in ("replace", "delete"):
                out.extend(DiffLine("del", a[i], i + 1, None) for i in range(i1, i2))
            if tag in ("replace", "insert"):
                out.extend(DiffLine("add", b[j], None, j + 1) for j in range(j1, j2))
    return out


def format_diff(lines: list[DiffLine]) -> str:
    """Plain-text rendering (``+``/``-``/`` `` prefixes), for logs and messages."""
    return "\n".join(f"{line.sign}{line.text}" for line in lines)
