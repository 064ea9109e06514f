"""Reading a summarizer's answer into the six sections, however a model wrote them.

Small models rarely write six markdown headings exactly. ``parse_sections`` accepts what they do
write: ``## Goal``, ``**Goal**``, ``Goal:`` (with the text on the same line or below),
``1. Goal``, close names (``Facts``, ``Tasks``, ``Tool results``), and a JSON object (a server in
JSON mode) whose keys name the sections. Each section found is kept as the model wrote it;
the caller fills the others (``memory.compression.summary``). An answer in which no section is
found is not a summary (an error text, a refusal, chatter).
"""

from __future__ import annotations

import json
import re
from typing import Any

from memory.compression.summary_input import GUIDE, SECTIONS

#: Names a model may use for each section (lower case, words separated by one space).
ALIASES: dict[str, tuple[str, ...]] = {
    "Goal": ("goal", "goals", "main goal", "user goal", "overall goal", "objective", "objectives"),
    "Decisions": ("decisions", "decision", "decisions made", "key decisions"),
    "Facts learned": (
        "facts learned", "facts", "key facts", "facts about the user", "user facts", "known facts",
        "facts learnt", "learned facts", "user information", "user info",
    ),
    "Open tasks": ("open tasks", "tasks", "open task", "todo", "to do", "todos", "next steps", "pending tasks"),
    "Reasoning trail": ("reasoning trail", "reasoning", "thoughts", "thinking", "reasoning steps"),
    "Tool results that matter": (
        "tool results that matter", "tool results", "tools", "tool outputs", "tool output", "important tool results",
    ),
}
_BY_ALIAS = {alias: name for name, aliases in ALIASES.items() for alias in aliases}
_ALIAS_RE = "|".join(sorted((re.escape(a).replace(r"\ ", r"[ \t_-]+") for a in _BY_ALIAS), key=len, reverse=True))
# A heading line: markdown heading marks, list numbering and bold/italics around a known name,
# then the end of the line, or a colon and the first of the section's text.
_HEADING = re.compile(
    rf"^[ \t]{{0,3}}(?P<marks>#{{1,6}}[ \t]*)?(?:\d{{1,2}}[.)][ \t]*)?(?P<bold>[*_]{{1,2}})?[ \t]*"
    rf"(?P<name>{_ALIAS_RE})[ \t]*(?:[*_]{{1,2}})?[ \t]*(?P<colon>:)?[ \t]*(?:[*_]{{1,2}})?[ \t]*(?P<rest>.*)$",
    re.IGNORECASE,
)
_FENCE = re.compile(r"\A```[\w-]*\n(?P<body>.*)\n```\Z", re.S)


def _canonical(name: str) -> str | None:
    return _BY_ALIAS.get(re.sub(r"[ \t_-]+", " ", name.strip().lower()))


def _heading(line: str) -> tuple[str, str] | None:
    """``(section, text on the same line)`` if ``line`` is a section heading."""
    match = _HEADING.match(line)
    if match is None:
        return None
    rest = match.group("rest").strip()
    if rest and not match.group("colon"):
        # "Goals of the trip were ..." is text; "## Facts learned (so far)" is still a heading.
        if not (match.group("marks") and rest.startswith("(")):
            return None
        rest = ""
    name = _canonical(match.group("name"))
    return (name, rest) if name else None


def _from_json(text: str) -> dict[str, str] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    found: dict[str, str] = {}
    for key, value in data.items():
        name = _canonical(str(key))
        if name is None or name in found:
            continue
        lines = [f"- {line}" for line in _json_lines(value) if line]
        found[name] = "\n".join(lines) or "- none"
    return found


def _json_lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [" ".join(value.split())]
    if isinstance(value, list):
        return [line for item in value for line in _json_lines(item)]
    if isinstance(value, dict):
        return [f"{key}: {' '.join(_json_lines(item))}" for key, item in value.items()]
    return [str(value)]


def strip_fence(text: str) -> str:
    fenced = _FENCE.match(text.strip())
    return fenced.group("body").strip() if fenced else text.strip()


def parse_sections(text: str) -> dict[str, str]:
    """The sections found in ``text``, by canonical name (in ``SECTIONS`` order), each body as
    written (stripped); a section named twice keeps both bodies, in order. Empty if none."""
    text = strip_fence(text)
    if text.startswith("{"):
        found = _from_json(text)
        if found:
            return {name: found[name] for name in SECTIONS if name in found}
    bodies: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        heading = _heading(line)
        if heading is not None:
            name, rest = heading
            current = bodies.setdefault(name, [])
            if rest:
                current.append(rest)
            continue
        if current is not None:
            current.append(line.rstrip())
    return {name: without_repeats("\n".join(bodies[name])) for name in SECTIONS if name in bodies}


def render_sections(sections: dict[str, str]) -> str:
    """``## Name`` and body for every section given, in ``SECTIONS`` order."""
    return "\n\n".join(f"## {name}\n{sections[name]}".rstrip() for name in SECTIONS if name in sections)


_NOT_AN_ANSWER = re.compile(
    r"^\W*(?:error\b|i['’]?m sorry|sorry,|i cannot|i can['’]t|as an ai\b|unable to|request failed|"
    r"internal server error)",
    re.IGNORECASE,
)
# The transcript or the prompt said back: "[23] user · 18 May 2023 ...", "<transcript>", the guide.
_ECHO = re.compile(
    r"^\s*(?:\[\d+\]\s*(?:user|assistant|tool|system)\b|</?(?:transcript|previous_summary|partial_summary)\b|"
    r"what goes where\b|fill in this template\b|now fill in\b)",
    re.IGNORECASE,
)


def usable_body(text: str) -> bool:
    """Whether an answer can stand as (part of) a summary: not empty, not an error text or a
    refusal, not the transcript or the prompt said back."""
    stripped = text.strip()
    if not stripped or _NOT_AN_ANSWER.match(stripped) or _ECHO.match(stripped):
        return False
    lowered = " ".join(stripped.lower().split())
    return not any(guide.lower() in lowered for guide in GUIDE.values())  # our question, said back


def without_repeats(body: str) -> str:
    """``body`` with every line that repeats an earlier one left out (a small model's loop)."""
    seen: set[str] = set()
    kept = []
    for line in body.splitlines():
        key = " ".join(line.split()).lower()
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
