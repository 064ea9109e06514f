"""The ExperienceReviewAgent: a ReAct agent that turns a finished run into EXPERIENCE.md lessons.

It runs on the same machinery as every agent (``Runtime.run_turn`` over the configured
``ChatModel``) with its own tools, bound to the reviewed agent's lessons:
``list_experiences``, ``read_experience``, ``create_experience``, ``update_experience``. Its one
user message is the finished run (the session's messages from the user's request to the final
answer, tool errors marked), rendered as escaped XML; its instructions carry
``REVIEW_MARKER`` (the built-in offline model keys on it) and ask it to prefer updating a
matching lesson over creating a near-duplicate (``create`` also refuses near-duplicates).

Its model calls are background work (``agents.runtime.gate``: they wait while a user's turn
runs) capped at ``MODEX_MAX_TOKENS_REVIEW`` per step. With a model server that cannot call
tools (``capabilities.tools`` False) it asks for the lessons as JSON in one request instead
(``agents.experience.review_json``) and writes them itself; the outcome's answer says which way.

Idempotent per run: the outcome is recorded at ``experience.review.<final id>`` in the session's
KV and a recorded success is never redone; a lease keeps two workers from reviewing one run at
once; the reviewer's own scratch session is cleared before and after. A failed review (model
error) is recorded with a next attempt time and retried by the task layer with backoff, at most
``MAX_ATTEMPTS`` times.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings

from agents.declarations import AgentNode
from agents.runtime.events import TurnFailed, TurnFinished
from agents.experience.supplement import render_listing
from agents.experience.store import ExperienceError, ExperienceStore
from agents.llm.offline_review import REVIEW_MARKER
from agents.runtime.loop import Runtime
from agents.runtime.sizing import probe_window
from agents.runtime.tools.base import Tool, ToolError, ToolRoster
from memory.assembly.xml import element, wrap
from memory.config import SUBAGENT_PRESET, MemoryConfig
from memory.locks import LeaseBusy, acquire_lease, release_lease
from memory.messages import Message, utcnow
from memory.scopes import SessionScope
from memory.tokens import count_text

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext
    from agents.runtime.services import MemoryServices

logger = logging.getLogger("agents.experience.supplement")

LEDGER_PREFIX = "experience.review."
MAX_ATTEMPTS = 3
RUN_WINDOW = 200  # messages looked at before the final answer to find where the run began
TRANSCRIPT_TOKENS = 3000
MESSAGE_CHARS = 1500
RETRY_BASE_SECONDS = 120.0
REVIEW_STEPS = 6

INSTRUCTIONS = f"""{REVIEW_MARKER}
You are the ExperienceReviewAgent of the agent "{{agent}}". You review one finished run of that
agent and keep its EXPERIENCE.md lessons: short, specific advice it will read before similar
tasks later (a tool call that failed and how to avoid it, a correction the user made, a
procedure that worked).
1. If the run holds no such lesson, answer "Nothing to record." without calling any tool.
2. Otherwise call list_experiences, and read_experience any lesson on the same topic.
3. Prefer update_experience on a matching lesson (merge the new insight into its body) over
   creating a near-duplicate; else create_experience with a short name, a one-line description
   saying when it applies, and a markdown body with the lesson.
Never record secrets or facts about the user (core memory keeps those). End with one sentence
saying what you recorded."""


class ReviewStatus(enum.StrEnum):
    REVIEWED = "reviewed"
    ALREADY_REVIEWED = "already_reviewed"
    NOT_FOUND = "not_found"  # the run is no longer in the session or its catalog
    BUSY = "busy"
    FAILED = "failed"
    GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class ReviewOutcome:
    """What a review did: the lessons created and updated (slugs), the reviewer's last words."""

    status: ReviewStatus
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    answer: str = ""
    error: str | None = None
    attempts: int = 0
    next_attempt_at: datetime | None = None


@dataclass
class _Writes:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)


# -- the reviewer's tools ---------------------------------------------------------------------


class _ReviewTool(Tool):
    def __init__(self, *, store: ExperienceStore, writes: _Writes) -> None:
        self.store = store
        self.writes = writes

    async def _io(self, fn: Any, /, **kwargs: Any) -> Any:
        try:
            return await sync_to_async(fn, thread_sensitive=True)(**kwargs)
        except ExperienceError as exc:
            raise ToolError(str(exc)) from None


class ListExperiencesTool(_ReviewTool):
    name = "list_experiences"
    description = "List the agent's lessons: slug, name, description, last update."
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        return render_listing(await self._io(self.store.list))


class ReadExperienceTool(_ReviewTool):
    name = "read_experience"
    description = "Read one lesson in full (front matter and body) by its slug or name."
    parameters = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200}},
        "required": ["name"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        found = await self._io(self.store.get, name=args["name"])
        if found is None:
            raise ToolError(f"no lesson called {args['name']!r}; list_experiences shows the names")
        return found.render()


class CreateExperienceTool(_ReviewTool):
    name = "create_experience"
    description = "Create a new lesson. Refused when one on the same topic exists: update that one instead."
    parameters = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 80},
            "description": {"type": "string", "minLength": 1, "maxLength": 240},
            "body": {"type": "string", "minLength": 1, "maxLength": 6000},
        },
        "required": ["name", "description", "body"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        created = await self._io(
            self.store.create, name=args["name"], description=args["description"], body=args["body"]
        )
        self.writes.created.append(created.slug)
        return f"Created {created.key}."


class UpdateExperienceTool(_ReviewTool):
    name = "update_experience"
    description = "Update a lesson's description and/or body (give the whole new body)."
    parameters = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "description": {"type": "string", "minLength": 1, "maxLength": 240},
            "body": {"type": "string", "minLength": 1, "maxLength": 6000},
        },
        "required": ["name"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        if "description" not in args and "body" not in args:
            raise ToolError("give a new description, body, or both")
        before = await self._io(self.store.get, name=args["name"])
        updated = await self._io(
            self.store.update, name=args["name"], description=args.get("description"), body=args.get("body")
        )
        if before is not None and updated.version == before.version:
            return f"{updated.key} already says that; nothing changed."
        self.writes.updated.append(updated.slug)
        return f"Updated {updated.key}."


class ReviewRuntime(Runtime):
    """A Runtime whose roster is the reviewer's own tools, whatever the node declares."""

    def __init__(self, *, tools: list[Tool], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tools = {tool.name: tool for tool in tools}

    def roster(self, agent: Any) -> ToolRoster:
        return ToolRoster(tools=dict(self._tools))


# -- the agent --------------------------------------------------------------------------------


def ledger_key(final_id: str) -> str:
    return f"{LEDGER_PREFIX}{final_id}"


def reviewer_node(agent: AgentNode) -> AgentNode:
    """The reviewer as a declaration node: subagent preset (no long-term layers of its own)."""
    return AgentNode(
        name=f"{agent.name[:100]}.experience-review",
        path=(*agent.path, "experience_review"),
        line=agent.line,
        depth=agent.depth + 1,
        parent=agent.name,
        description=f"Reviews finished runs of {agent.name} and keeps its EXPERIENCE.md lessons.",
        instructions=INSTRUCTIONS.format(agent=agent.name),
        tools=(),
        tool_supplements=(),
        memory_overrides=(),
        model=agent.model,
        memory_config=MemoryConfig(preset=SUBAGENT_PRESET, context_window=agent.memory_config.context_window),
    )


def render_run(messages: list[Message], *, agent: str, session: SessionScope, budget: int = TRANSCRIPT_TOKENS) -> str:
    """The run as the reviewer reads it: escaped XML, tool errors marked, newest kept in budget."""
    rendered: list[str] = []
    for message in messages:
        text = " ".join((message.content or "").split())
        if len(text) > MESSAGE_CHARS:
            text = text[: MESSAGE_CHARS - 1] + "…"
        attrs: dict[str, Any] = {"role": message.role}
        if message.role == "assistant" and message.tool_calls:
            attrs["calls"] = ", ".join(f"{c.name}({c.arguments_json[:200]})" for c in message.tool_calls)
        if message.role == "tool":
            attrs["name"] = message.name
            attrs["status"] = "error" if (message.content or "").startswith("Error:") else "ok"
        rendered.append(element("message", text, attrs=attrs))
    head, rest = rendered[:1], rendered[1:]
    while rest and count_text("\n".join(head + rest)) > budget:
        rest.pop(0)  # keep the request and the newest steps
    errors = sum('status="error"' in piece for piece in rendered)
    intro = (
        f"Review this finished run of the agent {agent} (session {session.id}). "
        f"It made {sum(len(m.tool_calls) for m in messages)} tool call(s); {errors} failed."
    )
    return intro + "\n" + wrap("run", head + rest, attrs={"agent": agent, "session": session.id})


class ExperienceReviewAgent:
    """Reviews finished runs of main agents over ``services`` (see the module docstring)."""

    def __init__(self, *, services: MemoryServices, model: Any | None = None, max_steps: int = REVIEW_STEPS) -> None:
        self.services = services
        self.model = model or services.model
        self.max_steps = max_steps

    async def areview(
        self, *, agent: AgentNode, user: str, session: SessionScope, final_id: str, final_seq: int
    ) -> ReviewOutcome:
        """Review the run of ``session`` that ended with message ``final_id`` (at ``final_seq``).

        A run already reviewed (or given up on) is not reviewed again: ALREADY_REVIEWED.
        """
        kv = self.services.bundle.kv
        if self._settled(await self._io(self._ledger, session, final_id)):
            return ReviewOutcome(ReviewStatus.ALREADY_REVIEWED)
        try:
            ttl = float(getattr(settings, "MODEX_TASK_LEASE_TTL", 600.0))
            lease = await self._io(acquire_lease, kv=kv, scope=session, name=f"review.{final_id}", ttl=ttl)
        except LeaseBusy as exc:
            return ReviewOutcome(ReviewStatus.BUSY, error=str(exc))
        try:
            previous = await self._io(self._ledger, session, final_id)  # again, now that it is ours
            if self._settled(previous):
                return ReviewOutcome(ReviewStatus.ALREADY_REVIEWED)
            outcome = await self._review(
                agent=agent, user=user, session=session, final_id=final_id, final_seq=final_seq
            )
            attempts = int(previous.get("attempts", 0)) + 1
            next_attempt_at = None
            status = outcome.status
            if status is ReviewStatus.FAILED:
                if attempts >= MAX_ATTEMPTS:
                    status = ReviewStatus.GAVE_UP
                else:
                    next_attempt_at = utcnow() + timedelta(seconds=RETRY_BASE_SECONDS * 2 ** (attempts - 1))
            outcome = replace(outcome, status=status, attempts=attempts, next_attempt_at=next_attempt_at)
            record = {
                "status": outcome.status.value,
                "attempts": attempts,
                "created": list(outcome.created),
                "updated": list(outcome.updated),
                "answer": outcome.answer[:500],
                "error": outcome.error,
                "at": utcnow().isoformat(),
            }
            await self._io(kv.put, session, ledger_key(final_id), json.dumps(record, ensure_ascii=False))
            return outcome
        finally:
            await asyncio.shield(self._io(release_lease, kv=kv, lease=lease))

    def _ledger(self, session: SessionScope, final_id: str) -> dict[str, Any]:
        item = self.services.bundle.kv.get(session, ledger_key(final_id))
        try:
            data = json.loads(item.value) if item is not None else {}
        except json.JSONDecodeError:
            data = {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _settled(record: dict[str, Any]) -> bool:
        return record.get("status") in (ReviewStatus.REVIEWED, ReviewStatus.NOT_FOUND, ReviewStatus.GAVE_UP)

    async def _review(
        self, *, agent: AgentNode, user: str, session: SessionScope, final_id: str, final_seq: int
    ) -> ReviewOutcome:
        run = await self._io(self._run_messages, session, final_id, final_seq)
        if not run:
            return ReviewOutcome(ReviewStatus.NOT_FOUND, answer="the run is no longer in the session")
        writes = _Writes()
        store = ExperienceStore(kv=self.services.bundle.kv, agent=agent.name, user=user)  # the run's user only
        await probe_window(self.model)
        if getattr(getattr(self.model, "capabilities", None), "tools", None) is False:
            return await self._review_as_json(agent=agent, session=session, run=run, store=store)
        tools: list[Tool] = [
            cls(store=store, writes=writes)
            for cls in (ListExperiencesTool, ReadExperienceTool, CreateExperienceTool, UpdateExperienceTool)
        ]
        runtime = ReviewRuntime(tools=tools, services=self.services, model=self.model, max_steps=self.max_steps,
                                background=True, label="review", reply_cap=self.services.caps.review)
        node = reviewer_node(agent)
        scratch = SessionScope(f"{session.id[:64]}.review-{final_id[:24]}")
        await self._forget(scratch)
        answer, error = "", None
        try:
            prompt = render_run(run, agent=agent.name, session=session)
            async for event in runtime.run_turn(agent=node, user_id=user, session=scratch, text=prompt):
                if isinstance(event, TurnFinished) and event.message is not None:
                    answer = event.message.content or ""
                elif isinstance(event, TurnFailed):
                    error = event.error
        except Exception as exc:  # the model seam raised something else than a ModelError
            logger.exception("the experience review of %s failed", session.key())
            error = f"{type(exc).__name__}: {exc}"
        finally:
            await asyncio.shield(self._forget(scratch))
        created, updated = tuple(dict.fromkeys(writes.created)), tuple(dict.fromkeys(writes.updated))
        if error is not None and not (created or updated):
            return ReviewOutcome(ReviewStatus.FAILED, error=error)
        return ReviewOutcome(ReviewStatus.REVIEWED, created=created, updated=updated, answer=answer)

    async def _review_as_json(
        self, *, agent: AgentNode, session: SessionScope, run: list[Message], store: ExperienceStore
    ) -> ReviewOutcome:
        """The non-tool path (``agents.experience.review_json``), for servers without tools."""
        from agents.experience.review_json import review_as_json
        from agents.llm import ModelError

        model = self.services.calls(self.model, background=True, label="review")
        try:
            done = await review_as_json(
                model=model, store=store, agent=agent.name, run_text=render_run(run, agent=agent.name, session=session),
                max_tokens=self.services.caps.review, io=self._io,
            )
        except (ModelError, ValueError) as exc:
            logger.warning("the experience review (JSON, no tools) of %s failed: %s", session.key(), exc)
            return ReviewOutcome(ReviewStatus.FAILED, error=str(exc))
        answer = f"reviewed without tools (JSON): {done.answer}"
        if done.skipped:
            answer += "; not written: " + "; ".join(done.skipped)
        return ReviewOutcome(ReviewStatus.REVIEWED, created=tuple(dict.fromkeys(done.created)),
                             updated=tuple(dict.fromkeys(done.updated)), answer=answer)

    def _run_messages(self, session: SessionScope, final_id: str, final_seq: int) -> list[Message]:
        after = max(0, final_seq - RUN_WINDOW)
        window = [m for m in self.services.bundle.messages.read(session, after_seq=after) if m.seq <= final_seq]
        if not any(m.id == final_id for m in window):
            # Pruned since the run ended: the pruned catalog holds it (ids are not kept there).
            entries = self.services.catalog.entries(session)
            window = [e.message for e in entries if after < e.seq <= final_seq]
            if not any(m.seq == final_seq for m in window):
                return []
        starts = [i for i, m in enumerate(window) if m.role == "user" and not m.is_compact_summary]
        return window[starts[-1] :] if starts else window

    async def _forget(self, scratch: SessionScope) -> None:
        bundle = self.services.bundle
        await self._io(bundle.messages.clear, scratch)
        for item in await self._io(bundle.kv.list, scratch):
            await self._io(bundle.kv.delete, scratch, item.key)
        await self._io(self.services.catalog.delete_session, scratch)

    @staticmethod
    async def _io(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)
