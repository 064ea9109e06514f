"""The offline model as the ExperienceReviewAgent: a deterministic lesson per failed tool call.

Recognised when the system messages carry ``REVIEW_MARKER`` and the review tools are offered
(names in ``ReviewTools``). The run to review is the user message: ``<message role="tool"
name=".." status="error">`` elements mark failed tool calls (``agents.experience.review``
renders it so). The model then walks the ReAct steps a careful reviewer would:

1. no failed tool call in the run: answer "Nothing to record." (no tool call);
2. else ``list_experiences``;
3. a lesson about the failed tool exists (its slug, or its name mentions the tool):
   ``read_experience`` it, then ``update_experience`` with the new error appended to its body,
   or nothing when the body already has it; none exists: ``create_experience``;
4. after the write: a one-line final answer.

Only the first failed tool of a run becomes a lesson, so every review writes at most one file.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any

from agents.llm.offline_facts import ATTRIBUTES
from agents.llm.offline_summary import text_of
from agents.llm.offline_tools import Plan

#: Put this in the reviewer's instructions to make the offline model act as the reviewer.
REVIEW_MARKER = "[experience review]"

_ELEMENT = re.compile(r"<message\b(?P<attrs>[^>]*)>(?P<text>.*?)</message>", re.DOTALL)
_LISTING = re.compile(r"^- (?P<slug>[a-z0-9-]+): (?P<name>.*?) — ", re.MULTILINE)
_EXISTS = re.compile(r"a lesson on this topic exists: (?P<slug>[a-z0-9-]+)")
_FRONT = re.compile(r"\A---\n.*?\n---\n?", re.DOTALL)


@dataclass(frozen=True)
class ReviewTools:
    """The reviewer's tool names (the ones ``agents.experience.review`` offers)."""

    list: str = "list_experiences"
    read: str = "read_experience"
    create: str = "create_experience"
    update: str = "update_experience"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "lesson"


def failed_calls(prompt: str) -> list[tuple[str, str]]:
    """``(tool name, error text)`` of each failed tool call in the rendered run, in order."""
    found = []
    for match in _ELEMENT.finditer(prompt):
        attrs = {k: html.unescape(v) for k, v in ATTRIBUTES.findall(match.group("attrs"))}
        if attrs.get("role") == "tool" and attrs.get("status") == "error":
            text = html.unescape(match.group("text")).strip()
            found.append((attrs.get("name") or "tool", text.removeprefix("Error:").strip()[:240]))
    return found


def _steps(messages: list[dict[str, Any]], start: int) -> list[tuple[str, dict[str, Any], str]]:
    """``(tool name, arguments, result text)`` of the reviewer's own calls so far."""
    results = {m.get("tool_call_id"): text_of(m.get("content")) for m in messages[start:] if m.get("role") == "tool"}
    steps = []
    for message in messages[start:]:
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = {}
            steps.append((function.get("name", ""), arguments, results.get(call.get("id"), "")))
    return steps


def _lesson(tool: str, error: str) -> dict[str, str]:
    return {
        "name": f"Calling {tool}",
        "description": f"What to check before calling {tool}, and what to do when it fails",
        "body": (
            "## Lesson\n"
            f"Calls to `{tool}` can fail (seen: “{error}”). Check the arguments against the tool's "
            "schema before calling it; when it fails, tell the user what happened instead of "
            "repeating the same call.\n\n"
            f"## Seen\n- {error}"
        ),
    }


def plan_review(messages: list[dict[str, Any]], offered: set[str], tools: ReviewTools | None = None) -> Plan | None:
    """The reviewer's next step, or None when this is not an experience review request."""
    tools = tools or ReviewTools()
    system = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
    if REVIEW_MARKER not in system or tools.create not in offered:
        return None
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    failures = failed_calls(text_of(messages[start].get("content")) if messages else "")
    if not failures:
        return Plan("The run had no failed tool call: no lesson to record.", "Nothing to record.")
    tool, error = failures[0]
    lesson = _lesson(tool, error)
    slug = _slug(lesson["name"])
    steps = _steps(messages, start + 1)
    if not steps:
        return Plan(f"{tool} failed in this run; checking the existing lessons first.", "", [(tools.list, {})])
    name, arguments, result = steps[-1]
    if name == tools.list:
        for match in _LISTING.finditer(result):
            if match.group("slug") == slug or tool.lower() in match.group("name").lower():
                return Plan(
                    f"A lesson about {tool} exists ({match.group('slug')}); reading it before updating it.",
                    "",
                    [(tools.read, {"name": match.group("slug")})],
                )
        return Plan(f"No lesson about {tool} yet; creating one.", "", [(tools.create, lesson)])
    if name == tools.read and not result.startswith("Error"):
        body = _FRONT.sub("", result).strip()
        if error in body:
            return Plan(
                f"The lesson already records this {tool} error.", "The lesson already covers this; nothing to add."
            )
        return Plan(
            f"Merging the new {tool} error into the existing lesson.",
            "",
            [(tools.update, {"name": arguments.get("name", slug), "body": f"{body}\n- {error}"})],
        )
    if name == tools.create and (exists := _EXISTS.search(result)):
        return Plan(
            "A lesson on this topic exists; reading it to update it instead.",
            "",
            [(tools.read, {"name": exists.group("slug")})],
        )
    if result.startswith("Error"):
        return Plan("The experience tool refused the change.", f"Could not record the lesson: {result[:200]}")
    return Plan("The lesson is written.", f"Recorded the lesson about {tool}: {result}")
