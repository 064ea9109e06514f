"""Tools over history: the archive of earlier conversations and the pruned catalog.

Each tool is scoped to the agent and user of the run; none can reach another agent's or user's
memory. The archive tool is only compiled in when the archive is on for the agent (``registry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.runtime.tools.base import Tool, ToolError
from memory.scopes import AgentScope, CompositeScope, UserScope

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

ARCHIVE_HITS = 5
EXCERPT_CHARS = 600


def archive_scope_for(*, agent: str, user_id: str) -> CompositeScope:
    """Where an agent's archive documents about one user live."""
    return CompositeScope(AgentScope(agent), UserScope(user_id))


class ArchiveSearchTool(Tool):
    name = "archive_search"
    description = "Search your long-term archive of earlier conversations with this user. Returns the best matches."
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 500}},
        "required": ["query"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        scope = archive_scope_for(agent=ctx.agent.name, user_id=ctx.user_id)
        hits = await sync_to_async(ctx.services.bundle.archive.search, thread_sensitive=True)(
            scope, args["query"], limit=ARCHIVE_HITS
        )
        if not hits:
            return f"No archived conversation matches {args['query']!r}."
        lines = []
        for hit in hits:
            doc = hit.document
            lines.append(
                f"[archive {doc.seq} · {doc.created_at:%Y-%m-%d}] {doc.title or 'untitled'}\n"
                f"{hit.snippet}\nSummary: {doc.summary[:EXCERPT_CHARS]}"
            )
        return "\n\n".join(lines)


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
