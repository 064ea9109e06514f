"""The experience review without tools: one request for the lessons as JSON, applied by Modex.

For a model server that cannot call tools (its chat template cannot format them, or it refused
them: ``capabilities.tools`` False), the ExperienceReviewAgent cannot run as a ReAct agent. It
asks instead, in one request, for ``{"lessons": [{"name", "description", "body"}, ...]}`` (an
empty list when the run teaches nothing), with the existing lessons listed so that it can
name one to update. JSON mode is asked for with the schema where the server offers it
(llama.cpp, vLLM, Ollama and OpenAI constrain the output to it); the text is parsed leniently
either way. Each lesson is written with the same store rules the tools use: a lesson whose name
matches an existing one (or a near-duplicate of it) updates that one, otherwise it is created.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agents.experience.store import ExperienceError, ExperienceExists, ExperienceStore
from agents.experience.supplement import render_listing
from agents.llm import complete
from agents.llm.offline_review import REVIEW_MARKER

# Shorter than the tools allow: the whole answer must fit one capped reply (MODEX_MAX_TOKENS_REVIEW),
# and JSON cut off by the cap is lost whole.
MAX_LESSONS = 2
LIMITS = {"name": 80, "description": 160, "body": 800}

INSTRUCTIONS = f"""{REVIEW_MARKER}
You review one finished run of the agent "{{agent}}" and keep its lessons: short, specific
advice it will read before similar tasks later (a tool call that failed and how to avoid it, a
correction the user made, a procedure that worked). Never record secrets or facts about the user.
Answer with JSON only: {{{{"lessons": [{{{{"name": "...", "description": "one line: when it applies",
"body": "the lesson"}}}}]}}}}. Use the name of an existing lesson to update it. If the run holds no
lesson, answer {{{{"lessons": []}}}}.

Existing lessons:
{{listing}}"""

SCHEMA = {
    "type": "object",
    "properties": {
        "lessons": {
            "type": "array",
            "maxItems": MAX_LESSONS,
            "items": {
                "type": "object",
                "properties": {key: {"type": "string", "minLength": 1, "maxLength": size} for key, size in LIMITS.items()},
                "required": ["name", "description", "body"],
            },
        }
    },
    "required": ["lessons"],
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "lessons", "schema": SCHEMA}}

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass
class JsonReview:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why a proposed lesson was not written
    answer: str = ""


def parse_lessons(text: str) -> list[dict[str, str]] | None:
    """The lessons of a reply (None when it holds no JSON object with a ``lessons`` list)."""
    candidates = [text.strip()]
    if match := _OBJECT.search(text or ""):
        candidates.append(match.group(0))
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (TypeError, ValueError):
            continue
        lessons = data.get("lessons") if isinstance(data, dict) else data if isinstance(data, list) else None
        if isinstance(lessons, list):
            clean = []
            for lesson in lessons[:MAX_LESSONS]:
                if isinstance(lesson, dict) and all(isinstance(lesson.get(k), str) and lesson[k].strip() for k in LIMITS):
                    clean.append({k: " ".join(lesson[k].split()) if k != "body" else lesson[k].strip()
                                  for k in LIMITS})
            return [{k: v[: LIMITS[k]] for k, v in lesson.items()} for lesson in clean]
    return None


async def review_as_json(*, model: Any, store: ExperienceStore, agent: str, run_text: str,
                         max_tokens: int, io: Any) -> JsonReview:
    """Ask ``model`` for the lessons of ``run_text`` and write them to ``store`` (``io`` runs a
    store call off the event loop). Raises ``ModelError`` when the call fails and ``ValueError``
    when the reply holds no lessons list (the review is then retried like a failed call)."""
    listing = render_listing(await io(store.list))
    messages = [
        {"role": "system", "content": INSTRUCTIONS.format(agent=agent, listing=listing)},
        {"role": "user", "content": run_text},
    ]
    capabilities = getattr(model, "capabilities", None)
    options: dict[str, Any] = {"max_tokens": max_tokens}
    if getattr(capabilities, "json_mode", None) is not False:
        options["response_format"] = RESPONSE_FORMAT
    completion = await complete(model, messages=messages, **options)
    text = completion.content or ""
    lessons = parse_lessons(text)
    if lessons is None:
        raise ValueError(f"the reviewer's reply is not a JSON lessons list: {text[:200]!r}")
    outcome = JsonReview(answer=f"{len(lessons)} lesson(s) proposed")
    for lesson in lessons:
        try:
            existing = await io(store.get, lesson["name"])
            if existing is not None:
                written = await io(store.update, name=existing.slug, description=lesson["description"], body=lesson["body"])
                if written.version != existing.version:
                    outcome.updated.append(written.slug)
                continue
            try:
                created = await io(store.create, name=lesson["name"], description=lesson["description"], body=lesson["body"])
                outcome.created.append(created.slug)
            except ExperienceExists as exc:
                before = await io(store.get, exc.existing)
                written = await io(store.update, name=exc.existing, description=lesson["description"], body=lesson["body"])
                if before is None or written.version != before.version:
                    outcome.updated.append(written.slug)
        except ExperienceError as exc:
            outcome.skipped.append(f"{lesson['name']}: {exc}")
    return outcome
