"""Tools over the memory tiers: core memory, archive search, pruned lookup.

Each tool is scoped to the agent and user of the run; none can reach another agent's or user's
memory. They are only compiled in when the tier is on for the agent (``registry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.runtime.tools.base import Tool, ToolError
from memory.core_memory import CORE_FILES, CoreMemory, CoreMemoryError
from memory.scopes import AgentScope, CompositeScope, UserScope

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

ARCHIVE_HITS = 5
EXCERPT_CHARS = 600


def core_memory_for(ctx: ToolContext) -> CoreMemory:
    return CoreMemory(
        kv=ctx.services.bundle.kv,
        config=ctx.agent.memory_config,
        agent=ctx.agent.name,
        user=ctx.user_id,
        hooks=ctx.services.hooks,
    )


def archive_scope_for(*, agent: str, user_id: str) -> CompositeScope:
    """Where an agent's archive documents about one user live."""
    return CompositeScope(AgentScope(agent), UserScope(user_id))


class CoreMemoryTool(Tool):
    name = "core_memory"
    description = (
        "Your always-in-context memory files: SOUL.md (who you are), USER.md (the user's profile), "
        "MEMORY.md (facts worth keeping). read a file, append a line, or replace one exact passage "
        "(old must occur exactly once; new may be empty to delete). Files have size caps."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["read", "append", "replace"]},
            "file": {"type": "string", "enum": list(CORE_FILES)},
            "text": {"type": "string", "minLength": 1, "maxLength": 4000},
            "old": {"type": "string", "minLength": 1, "maxLength": 4000},
            "new": {"type": "string", "maxLength": 4000},
        },
        "required": ["action", "file"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        return await sync_to_async(self._apply, thread_sensitive=True)(ctx, args)

    def _apply(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        memory = core_memory_for(ctx)
        file, action = args["file"], args["action"]
        try:
            if action == "read":
                state = memory.read(file=file)
                return state.text if state.text.strip() else f"{file} is empty."
            if action == "append":
                if not args.get("text"):
                    raise ToolError("'append' needs text")
                state = memory.append(file=file, text=args["text"], source="agent")
                return f"Appended to {file} (version {state.version})."
            if "old" not in args or "new" not in args:
                raise ToolError("'replace' needs old and new")
            current = memory.read(file=file)
            state = memory.replace(
                file=file, old=args["old"], new=args["new"], source="agent", expected_version=current.version
            )
            return f"Updated {file} (version {state.version})."
        except CoreMemoryError as exc:
            raise ToolError(str(exc)) from None


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
