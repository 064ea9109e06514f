"""The offline model's compact summaries and Dream Engine consolidations, built from the input.

Transcripts are read in whichever form the caller uses:

* real wire messages after the instruction (``role``/``content``/``reasoning_content``, tool
  messages with ``name``);
* or one text with role-labelled lines: ``user: ...``, ``[12] assistant: ...``,
  ``## [12] tool · 2025-01-01T10:00:00Z`` (the pruned catalog form, content on the following
  lines), ``<message role="user">...</message>``; reasoning as ``reasoning: ...`` lines or
  ``<reasoning>...</reasoning>``.

A previous compact summary found in the input (markdown headings naming known sections) is
merged into the new one, so nothing it held is lost across repeated cleanups.

Dates: a header may carry the message's date (``[12] user · 8 May 2023 14:05:``, the form of
``memory.compression.summary_input``); facts and decisions are then grouped under the day
they were said (``- On 8 May 2023:`` and the items indented below it), so the summary keeps
when things were said and each item stays a plain line ("Name: Sam") that readers of the
summary (the Dream Engine) take as it is. Items are whole sentences, shortened only at a
word boundary with ``…``: never "Todo list (add): 1.".
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agents.llm import offline_facts as facts
from memory.compression.statements import excerpt, sentences

#: Default sections of a compact summary, in order, used when the request names none.
SUMMARY_SECTIONS = ("Goal", "Decisions", "Facts", "Reasoning trail", "Tool results", "Open tasks")

_SECTION_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("open", ("open", "todo", "to-do", "pending", "next", "remaining", "follow")),
    ("goal", ("goal", "objective", "intent", "purpose")),
    ("decisions", ("decision", "decided")),
    ("reasoning", ("reason", "thought", "thinking")),
    ("tools", ("tool",)),
    ("facts", ("fact", "user", "profile", "preference", "known", "learn")),
)
_DECISION = re.compile(
    r"\b(?:decided|decide to|agreed|we'll go with|going with|chose|settled on|the plan is|we will use|let's use)\b",
    re.IGNORECASE,
)
_OPEN_TASK = re.compile(
    r"\b(?:todo|to-do|next step|still need|remaining|open task|follow[- ]up|pending|need to|next,)\b", re.IGNORECASE
)
_BARE_TAG = re.compile(r"^\s*</?[A-Za-z_][\w-]*(?:\s[^<>]*)?>\s*$")
# The offline model's own hint to the user ("Try “remember that …”, ..."): not a task or a fact.
_OWN_HINT = re.compile(r"\bTry “remember that")
_ROLE_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?(?:#+\s*)?(?:\[\s*\d+\s*\]\s*)?\**(?P<role>user|assistant|tool|system|human|ai)\**\b(?P<rest>[^\n]*)$",
    re.IGNORECASE,
)
_REASONING_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?\**(?:reasoning(?:_content)?|thinking|thoughts?)\**\s*[:>]\s*(?P<text>.*)$", re.IGNORECASE
)
_ROLE_ALIASES = {"human": "user", "ai": "assistant"}
_MAX_ITEMS = {"decisions": 40, "facts": 60, "reasoning": 12, "tools": 12, "open": 20}


@dataclass
class Turn:
    role: str
    content: str = ""
    reasoning: str = ""
    tool: str = ""
    tool_calls: list[str] = field(default_factory=list)
    date: str = ""  # "8 May 2023" when the transcript dates the message


# " · 8 May 2023 14:05" in a transcript header (memory.compression.dates.stamp)
_STAMP = re.compile(r"\s·\s(?P<day>\d{1,2} [A-Z][a-z]{2} \d{4})(?: \d{2}:\d{2})?(?: UTC)?(?=\s*:?\s*$)")
# "- On 8 May 2023:" opening a group of dated items in a summary
_DAY_GROUP = re.compile(r"^\s*(?:[-*]\s*)?On (?P<day>\d{1,2} [A-Z][a-z]{2} \d{4}):\s*$")


def text_of(content: object) -> str:
    """The text of a wire ``content`` (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def parse_labelled(text: str) -> list[Turn]:
    """Turns from a role-labelled transcript text (see the module docstring)."""
    text = re.sub(r"<message\b[^>]*\brole=\"(\w+)\"[^>]*>", r"\n\1: ", text)
    text = re.sub(r"</message>", "\n", text)
    text = re.sub(
        r"<(reasoning(?:_content)?)\b[^>]*>(.*?)</\1>",
        lambda m: "\nreasoning: " + " ".join(m.group(2).split()) + "\n",
        text,
        flags=re.DOTALL,
    )
    turns: list[Turn] = []
    for line in html.unescape(text).splitlines():
        if _BARE_TAG.match(line):  # the request's own framing (<transcript>, </previous_summary>)
            continue
        stamp = _STAMP.search(line)
        if stamp and _ROLE_LINE.match(line[: stamp.start()]):
            line, day = line[: stamp.start()] + ":", stamp.group("day")
        else:
            day = ""
        role_match = _ROLE_LINE.match(line)
        if role_match and (
            role_match.group("rest").lstrip().startswith((":", "·", "(", "-", "|"))
            or not role_match.group("rest").strip()
        ):
            rest = role_match.group("rest")
            role = _ROLE_ALIASES.get(role_match.group("role").lower(), role_match.group("role").lower())
            turn = Turn(role=role, date=day)
            framed = re.match(r"^(\s*\([^)]*\)[^:]*):(.*)$", rest)  # "(tool calls: a, b):" keeps its colon
            if framed:
                header, body = framed.group(1), framed.group(2)
            else:
                header, _, body = rest.partition(":") if not rest.lstrip().startswith("·") else (rest, "", "")
            tool = re.search(r"\btool[_ ]?(?:name)?[=:]?\s*`?([\w.-]+)`?", header) or re.search(
                r"\(([\w.-]+)\)", header
            )
            if role == "tool" and tool:
                turn.tool = tool.group(1)
            calls = re.search(r"tool[_ ]calls?\b\s*[:=]?\s*([A-Za-z_][\w.-]*(?:\s*,\s*[A-Za-z_][\w.-]*)*)", header)
            if role == "assistant" and calls:
                turn.tool_calls = [n.strip() for n in calls.group(1).split(",") if n.strip()]
            if "reasoning" in header.lower():
                turn.reasoning = body.strip()
            else:
                turn.content = body.strip()
            turns.append(turn)
            continue
        reasoning_match = _REASONING_LINE.match(line)
        if reasoning_match and turns:
            turns[-1].reasoning = (turns[-1].reasoning + " " + reasoning_match.group("text")).strip()
        elif line.strip() and line.strip() != "---":
            if not turns:
                turns.append(Turn(role="unknown"))
            # Indentation is kept: a summary groups items under a day by indenting them.
            turns[-1].content = (turns[-1].content + "\n" + line.rstrip()).strip()
    return turns


def transcript(messages: list[dict], is_instruction: Callable[[dict], bool]) -> tuple[str, list[Turn]]:
    """``(instruction text, turns)``: which messages instruct is decided by ``is_instruction``;
    the rest are the transcript (wire messages, or labelled text inside them)."""
    instruction: list[str] = []
    turns: list[Turn] = []
    for message in messages:
        role = message.get("role", "")
        content = text_of(message.get("content"))
        if is_instruction(message):
            instruction.append(content)
            embedded = parse_labelled(content)
            if sum(t.role != "unknown" for t in embedded) >= 2:
                turns.extend(embedded)
            continue
        labelled = parse_labelled(content) if role == "user" else []
        if any(t.role != "unknown" for t in labelled):
            turns.extend(labelled)
        else:
            turns.append(
                Turn(
                    role=role,
                    content=content,
                    reasoning=text_of(message.get("reasoning_content") or message.get("reasoning")),
                    tool=message.get("name") or "",
                    tool_calls=[c.get("function", {}).get("name", "") for c in message.get("tool_calls") or []],
                )
            )
    return "\n".join(instruction), turns


# -- compact summary -------------------------------------------------------------------------


def requested_sections(instruction: str) -> tuple[str, list[str]]:
    """``(heading prefix, section titles)`` the instruction asks for, in its order."""
    headings = [
        (level, title)
        for level, title in re.findall(r"^(#{1,6})\s+(.+?)\s*$", instruction, flags=re.MULTILINE)
        if not title.startswith("[") and not _is_role_header(title)  # transcript headers, not sections
    ]
    if headings:
        return headings[0][0] + " ", [title.strip("*` ") for _, title in headings]
    lowered = instruction.lower()
    found = [(lowered.find(s.lower()), s) for s in SUMMARY_SECTIONS if s.lower() in lowered]
    titles = [s for _, s in sorted(found)] if len(found) >= 3 else list(SUMMARY_SECTIONS)
    return "## ", titles


def _is_role_header(title: str) -> bool:
    """A transcript header ("user: ...", "tool · 2025-...") rather than a section title such as
    "Tool results that matter"."""
    match = _ROLE_LINE.match(title)
    if match is None:
        return False
    rest = match.group("rest")
    return not rest.strip() or rest.lstrip().startswith((":", "·", "(", "-", "|"))


def section_key(title: str) -> str | None:
    lowered = title.lower()
    for key, words in _SECTION_KEYWORDS:
        if any(w in lowered for w in words):
            return key
    return None


Item = tuple[str, str]  # (day or "", text)


def previous_summary(turns: Iterable[Turn]) -> dict[str, list[Item]]:
    """Items of every earlier compact summary in the input, by section key, with their day."""
    merged: dict[str, list[Item]] = {}
    for turn in turns:
        parts = re.split(r"^#{1,6}\s+(.+?)\s*$", turn.content, flags=re.MULTILINE)
        if len(parts) < 5:  # fewer than two headings: not a summary
            continue
        for title, body in zip(parts[1::2], parts[2::2], strict=False):
            key = section_key(title)
            if key is None:
                continue
            day = ""
            for raw in body.splitlines():
                group = _DAY_GROUP.match(raw)
                if group:
                    day = group.group("day")
                    continue
                if raw.strip() and not raw.startswith((" ", "\t")):
                    day = ""  # an item at the top level ends the day's group
                for line in facts.lines_of(raw):
                    if line.lower() in ("(none)", "none", "(nothing recorded)") or _BARE_TAG.match(line):
                        continue
                    if not _OWN_HINT.search(line):
                        merged.setdefault(key, []).append((day, line))
    return merged


def _add(bucket: list[Item], item: str, *, limit: int = 240, day: str = "") -> None:
    item = excerpt(item, limit)  # whole words, marked when shortened
    if item and item.lower() not in (text.lower() for _, text in bucket):
        bucket.append((day, item))


def _render_items(items: list[Item]) -> str:
    """``- text`` lines; items with a day grouped under ``- On <day>:``, consecutive ones once."""
    lines: list[str] = []
    current = None
    for day, text in items:
        if day:
            if day != current:
                lines.append(f"- On {day}:")
                current = day
            lines.append(f"  - {text}")
        else:
            current = None
            lines.append(f"- {text}")
    return "\n".join(lines)


def build_summary(instruction: str, turns: list[Turn]) -> str:
    """A markdown compact summary with the requested sections, built only from ``turns``."""
    prefix, titles = requested_sections(instruction)
    previous = previous_summary(turns)
    fresh = [t for t in turns if not (len(re.findall(r"^#{1,6}\s", t.content, flags=re.MULTILINE)) >= 2)]
    buckets: dict[str, list[Item]] = {key: list(previous.get(key, [])) for key, _ in _SECTION_KEYWORDS}
    first_user = next((t for t in fresh if t.role == "user" and t.content.strip()), None)
    if first_user is not None and not buckets["goal"]:
        _add(buckets["goal"], " ".join(sentences(first_user.content)[:2]), limit=300)
    for turn in fresh:
        for sentence in sentences(turn.content):
            if _OWN_HINT.search(sentence):
                continue
            if _DECISION.search(sentence):
                _add(buckets["decisions"], sentence, day=turn.date)
            if _OPEN_TASK.search(sentence) and turn.role != "tool":
                _add(buckets["open"], sentence)
        if turn.role == "user":
            for fact in facts.extract_facts(turn.content):
                if fact.kind != "decision":  # those are under Decisions already
                    _add(buckets["facts"], fact.text, day=turn.date)
        if turn.reasoning:
            _add(buckets["reasoning"], (sentences(turn.reasoning) or [""])[0], limit=200)
        if turn.role == "assistant" and turn.tool_calls:
            _add(buckets["reasoning"], f"Called {', '.join(n for n in turn.tool_calls if n)}.")
        if turn.role == "tool" and turn.content.strip():
            _add(buckets["tools"], f"{turn.tool or 'tool'}: {turn.content}", limit=160)
    out = []
    for title in titles:
        key = section_key(title)
        items = buckets.get(key, []) if key else []
        if key in _MAX_ITEMS:
            items = items[-_MAX_ITEMS[key] :]
        if key == "goal":
            body = items[0][1] if items else "(not stated)"
        else:
            body = _render_items(items) or "- (none)"
        out.append(f"{prefix}{title}\n{body}")
    return "\n\n".join(out) + "\n"


# -- consolidation ---------------------------------------------------------------------------

_EXISTING_BLOCK = re.compile(
    r"^[^\n]*\b(?:current|existing)\b[^\n]*\b(SOUL|USER|MEMORY)\.md\b[^\n]*\n(?P<body>.*?)(?=\n\s*\n|\Z)",
    re.IGNORECASE | re.MULTILINE | re.DOTALL,
)


def existing_core(text: str) -> dict[str, list[str]]:
    """Lines of the current core memory files shown in the request, by file name."""
    existing: dict[str, list[str]] = {name: [] for name in facts.CORE_TAGS.values()}
    for tag, file in facts.CORE_TAGS.items():
        existing[file] += facts.lines_of(facts.section(text, tag))
    for match in _EXISTING_BLOCK.finditer(text):
        existing[f"{match.group(1).upper()}.md"] += facts.lines_of(html.unescape(match.group("body")))
    return existing


def build_consolidation(instruction: str, turns: list[Turn], everything: str) -> str:
    """JSON edits for SOUL.md/USER.md/MEMORY.md from the facts in the input (see offline.py).

    A fact already present in the current files yields no edit; a single-valued fact (name,
    location, identity) that changed yields a ``replace`` of the old line.
    """
    existing = existing_core(everything)
    sources = "\n".join(t.content for t in turns if t.role in ("user", "system", "unknown"))
    if not sources.strip():
        sources = facts.without_sections(instruction, facts.CORE_TAGS)
    chosen: dict[tuple[str, str], facts.Fact] = {}  # single-valued kinds: the latest wins
    for fact in facts.extract_facts(sources):
        key = (fact.file, fact.kind) if fact.single_valued else (fact.file, fact.text.lower())
        chosen.pop(key, None)
        chosen[key] = fact
    edits: list[dict[str, str]] = []
    for fact in chosen.values():
        lines = existing[fact.file]
        if fact.text.lower() in (line.lower() for line in lines):
            continue
        old = next((line for line in lines if fact.single_valued and _same_kind(line, fact)), None)
        if old is not None:
            edits.append({"file": fact.file, "action": "replace", "old": old, "text": fact.text})
        else:
            edits.append({"file": fact.file, "action": "append", "text": fact.text})
    return json.dumps({"edits": edits}, ensure_ascii=False, indent=2)


def _same_kind(line: str, fact: facts.Fact) -> bool:
    return any(f.kind == fact.kind for f in facts.extract_facts(line))
