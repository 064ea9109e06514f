"""The offline model's tool use: trigger phrases -> tool calls, and tool results -> an answer.

Tool names and argument shapes live in ``OfflineTools`` so the runtime's real tools can be
matched without touching this code: an argument template value ``"{name}"`` is replaced by the
extracted value (its type kept: ``"{seq}"`` becomes an int).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agents.llm import offline_facts as facts


@dataclass(frozen=True)
class OfflineTools:
    """Tool names and argument templates the offline model emits (see ``agents.llm.offline``)."""

    core_memory: str = "core_memory"
    archive_search: str = "archive_search"
    pruned_lookup: str = "pruned_lookup"
    todo: str = "todo"
    core_memory_args: dict[str, Any] = field(
        default_factory=lambda: {"action": "append", "file": "{file}", "text": "{text}"}
    )
    core_memory_replace_args: dict[str, Any] = field(
        default_factory=lambda: {"action": "replace", "file": "{file}", "old": "{old}", "new": "{new}"}
    )
    archive_search_args: dict[str, Any] = field(default_factory=lambda: {"query": "{query}"})
    pruned_lookup_args: dict[str, Any] = field(default_factory=lambda: {"seq": "{seq}"})
    todo_add_args: dict[str, Any] = field(default_factory=lambda: {"action": "add", "item": "{item}"})
    todo_list_args: dict[str, Any] = field(default_factory=lambda: {"action": "list"})
    todo_complete_args: dict[str, Any] = field(default_factory=lambda: {"action": "complete", "item": "{item}"})


@dataclass
class Plan:
    """What the offline model will say: reasoning, content and ``(tool name, arguments)`` calls."""

    reasoning: str
    content: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def fill(template: dict[str, Any], **values: Any) -> dict[str, Any]:
    """``template`` with every ``"{name}"`` value replaced by ``values[name]`` (type kept)."""
    out: dict[str, Any] = {}
    for key, value in template.items():
        if isinstance(value, str) and value.startswith("{") and value.endswith("}") and value[1:-1] in values:
            out[key] = values[value[1:-1]]
        elif isinstance(value, dict):
            out[key] = fill(value, **values)
        else:
            out[key] = value
    return out


_FLAGS = re.IGNORECASE | re.MULTILINE
_SEARCH = re.compile(r"\bsearch (?:in )?(?:the |my )?archives? (?:for|about)\s+(?P<v>[^\n]+)", _FLAGS)
_LOOKUP = re.compile(
    r"\b(?:look ?up|show|fetch|open|get)\s+(?:the\s+)?(?:pruned\s+)?message\s+(?:#|number\s+|no\.?\s*)?(?P<v>\d+)",
    _FLAGS,
)
_TODO_ADD = re.compile(r"(?:^|[.!;]\s+)\s*to-?do\s*:\s*(?P<v>[^\n]+)", _FLAGS)
_TODO_DONE = re.compile(r"(?:^|[.!;]\s+)\s*(?:done|completed?|finished)\s*:\s*(?P<v>[^\n]+)", _FLAGS)
_TODO_LIST = re.compile(
    r"\b(?:show|list|what(?:'s| is) on)\s+(?:me\s+)?(?:my\s+|the\s+)?to-?do(?:s|\s+list)?\b", _FLAGS
)
_FAILED = re.compile(r"^\s*(?:\{\s*\"error\"|error\b|failed\b|refused\b)", re.IGNORECASE)


def _phrase(raw: str) -> str:
    """The first sentence of ``raw``, without quotes or closing punctuation."""
    return facts.clean_value(re.split(r"(?<!\d)[.!?](?:\s|$)", raw, maxsplit=1)[0], cut_clauses=False)


def plan_tool_calls(
    tools: OfflineTools, user: str, offered: set[str], core: dict[str, list[str]] | None = None
) -> Plan | None:
    """Calls for the trigger phrases in ``user``, in text order; None when nothing triggers.

    ``core``: the current core memory lines by file (as shown in the context). "remember that
    my name is X" replaces the line of a single-valued fact already there instead of adding a
    second one."""
    wanted: list[tuple[int, str, dict[str, Any], str]] = []  # (position, tool, arguments, note)
    note = facts.remembered(user)
    if note:
        # Each fact of the sentence is its own line ("my name is Sam and I live in Porto": two).
        for fact in facts.facts_to_remember(note):
            lines = (core or {}).get(fact.file, [])
            old = next(
                (line for line in lines
                 if fact.single_valued and any(f.kind == fact.kind for f in facts.extract_facts(line))),
                None,
            )
            if old is not None and old != fact.text:
                arguments = fill(tools.core_memory_replace_args, file=fact.file, old=old, new=fact.text)
                what = f"replace “{old}” with “{fact.text}” in {fact.file}"
            else:
                arguments = fill(tools.core_memory_args, file=fact.file, text=fact.text)
                what = f"save “{fact.text}” to {fact.file}"
            wanted.append((user.lower().find("remember"), tools.core_memory, arguments, what))
    triggers = (
        (
            _SEARCH,
            tools.archive_search,
            lambda v: fill(tools.archive_search_args, query=_phrase(v)),
            "search the archive",
        ),
        (
            _LOOKUP,
            tools.pruned_lookup,
            lambda v: fill(tools.pruned_lookup_args, seq=int(v)),
            "look up a pruned message",
        ),
        (_TODO_ADD, tools.todo, lambda v: fill(tools.todo_add_args, item=_phrase(v)), "add a todo"),
        (_TODO_DONE, tools.todo, lambda v: fill(tools.todo_complete_args, item=_phrase(v)), "complete a todo"),
    )
    for pattern, name, build, what in triggers:
        wanted += [(m.start(), name, build(m.group("v")), what) for m in pattern.finditer(user)]
    if (match := _TODO_LIST.search(user)) is not None:
        wanted.append((match.start(), tools.todo, fill(tools.todo_list_args), "show the todo list"))
    if not wanted:
        return None
    wanted.sort(key=lambda w: w[0])
    usable = [w for w in wanted if w[1] in offered]
    if not usable:
        missing = ", ".join(sorted({w[1] for w in wanted}))
        return Plan(
            f"The user asked me to use {missing}, but no such tool is offered here.",
            f"I would use {missing} for that, but it is not available to me in this conversation."
            + _LAYER_HINTS.get(missing, ""),
        )
    steps = "; ".join(w[3] for w in usable)
    return Plan(f"The request maps to tools: {steps}.", "", [(w[1], w[2]) for w in usable])


_LAYER_HINTS = {
    "core_memory": (
        " Core memory is switched off for this agent: staff can turn on archive and core memory in "
        "the scope editor (/scopes/), then restart the server."
    ),
    "archive_search": (
        " The archive is switched off for this agent: staff can turn it on in the scope editor "
        "(/scopes/), then restart the server."
    ),
}


def report_tool_results(tools: OfflineTools, messages: list[dict[str, Any]]) -> Plan:
    """The final answer after the trailing tool messages: one line per result."""
    start = len(messages)
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    calls = {c.get("id"): c.get("function", {}) for c in (messages[start - 1].get("tool_calls") or [] if start else [])}
    lines = []
    for result in messages[start:]:
        function = calls.get(result.get("tool_call_id"), {})
        name = function.get("name") or result.get("name") or "tool"
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = {}
        content = result.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content else ""
        lines.append(_report(tools, name, arguments if isinstance(arguments, dict) else {}, text))
    reasoning = f"{len(messages) - start} tool result(s) arrived; reporting what they returned."
    return Plan(reasoning, "\n".join(lines) or "The tools returned nothing.")


def _report(tools: OfflineTools, name: str, arguments: dict[str, Any], result: str) -> str:
    snippet = facts.clean_value(" ".join(result.split())[:300], cut_clauses=False) if result.strip() else ""
    if _FAILED.search(result):
        return f"{name} failed: {snippet}"
    if name == tools.core_memory:
        file, text = arguments.get("file", "core memory"), arguments.get("text") or arguments.get("new") or ""
        if "proposal" in result:  # a shared file (SOUL.md) is only proposed to staff
            return f"{file} is shared by everyone I talk to, so I proposed “{text}” to staff; it is not in effect yet."
        return f"Saved to {file}: “{text}”."
    if name == tools.archive_search:
        return f"Archive search for “{arguments.get('query', '')}”: {snippet or 'nothing found'}."
    if name == tools.pruned_lookup:
        return f"Pruned message {arguments.get('seq', '?')}: {snippet or 'not found'}."
    if name == tools.todo:
        return f"Todo list ({arguments.get('action', 'update')}): {snippet or 'done'}."
    return f"{name} returned: {snippet or '(nothing)'}."
