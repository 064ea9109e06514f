"""Tools over history: the archive of earlier conversations and the pruned catalog.

Each tool is scoped to the agent and user of the run; none can reach another agent's or user's
memory. The archive tools (``archive_search`` ranks messages, ``archive_read`` opens the turns
around one) are only compiled in when the archive is on for the agent (``registry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.runtime.tools.base import Tool, ToolError
from memory.assembly.archive import excerpt
from memory.retrieval.messages import ArchivedMessage, InvalidHandle
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.threads import run_blocking

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

ARCHIVE_HITS = 8
HIT_CHARS = 700
READ_AROUND = 4
READ_MAX = 20
READ_CHARS = 2000


def archive_scope_for(*, agent: str, user_id: str) -> CompositeScope:
    """Where an agent's archive documents about one user live."""
    return CompositeScope(AgentScope(agent), UserScope(user_id))


def _line(message: ArchivedMessage, text: str) -> str:
    title = f" · {message.document_title}" if message.document_title else ""
    return f"[{message.handle}] {message.created_at:%Y-%m-%d %H:%M} · {message.speaker}{title}\n{text}"


class ArchiveSearchTool(Tool):
    name = "archive_search"
    description = (
        "Search everything said in your earlier conversations with this user. Returns the matching "
        "messages with the turn that answered them (or that they answered), each with its date, speaker, "
        "conversation and a handle; archive_read shows the turns around a handle."
    )
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500}},
        "required": ["query"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        scope = archive_scope_for(agent=ctx.agent.name, user_id=ctx.user_id)
        hits = await run_blocking(
            ctx.services.retrieval.search, scope, args["query"], limit=ARCHIVE_HITS, window=1,
            names=ctx.participants,
        )
        if not hits:
            return f"No archived message matches {args['query']!r}."
        # Each match with the other half of its exchange (the answer is often the next turn),
        # in the order they were said; a message shown once.
        shown: dict[str, tuple[ArchivedMessage, tuple[str, ...]]] = {}
        for hit in hits:
            shown.setdefault(hit.message.handle, (hit.message, hit.matched))
            if hit.partner is not None:
                shown.setdefault(hit.partner.handle, (hit.partner, ()))
        ordered = sorted(shown.values(), key=lambda pair: (pair[0].created_at, pair[0].session, pair[0].seq))
        return "\n\n".join(_line(m, excerpt(m, matched, width=HIT_CHARS)) for m, matched in ordered)


class ArchiveReadTool(Tool):
    name = "archive_read"
    description = (
        "Read the turns around an archived message, by the handle archive_search or the <archive_recall> "
        "section gave (e.g. '12.37'): the conversation before and after it, in order."
    )
    parameters = {
        "type": "object",
        "properties": {
            "handle": {"type": "string", "minLength": 1, "maxLength": 40},
            "before": {"type": "integer", "minimum": 0, "maximum": READ_MAX},
            "after": {"type": "integer", "minimum": 0, "maximum": READ_MAX},
        },
        "required": ["handle"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        scope = archive_scope_for(agent=ctx.agent.name, user_id=ctx.user_id)
        before, after = args.get("before", READ_AROUND), args.get("after", READ_AROUND)
        try:
            messages = await run_blocking(ctx.services.retrieval.around, scope, args["handle"], before=before, after=after)
        except InvalidHandle as exc:
            raise ToolError(str(exc)) from None
        if not messages:
            raise ToolError(f"no archived message has the handle {args['handle']!r}")
        parts = []
        for message in messages:
            text = message.text if len(message.text) <= READ_CHARS else message.text[:READ_CHARS] + " […]"
            mark = " ◀" if message.handle == args["handle"].strip().lstrip("#") else ""
            parts.append(_line(message, text) + mark)
        return "\n\n".join(parts)


class PrunedLookupTool(Tool):
    name = "pruned_lookup"
    description = (
        "Read in full a message that cleanup removed from this conversation, by its number in the "
        "<pruned_messages> catalog."
    )
    parameters = {
        "type": "object",
        "properties": {"seq": {"type": ["integer", "string"]}},
        "required": ["seq"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        raw = args["seq"]
        try:
            seq = int(str(raw).strip().lstrip("#"))
        except ValueError:
            raise ToolError(f"seq must be a message number, got {raw!r}") from None
        message = await sync_to_async(ctx.services.catalog.lookup, thread_sensitive=True)(ctx.session, seq)
        if message is None:
            count = await sync_to_async(ctx.services.catalog.count, thread_sensitive=True)(ctx.session)
            raise ToolError(f"no pruned message number {seq} in this conversation ({count} were pruned)")
        parts = [f"[{message.seq}] {message.role} · {message.created_at.isoformat()}"]
        if message.reasoning_content:
            parts.append(f"(reasoning) {message.reasoning_content}")
        if message.content:
            parts.append(message.content)
        for call in message.tool_calls:
            parts.append(f"(called {call.name} with {call.arguments_json})")
        return "\n".join(parts)
