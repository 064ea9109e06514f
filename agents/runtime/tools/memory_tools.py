"""The core memory tool: the agent's own edits of SOUL.md, USER.md and MEMORY.md.

Scoped to the agent and user of the run; compiled in only when core memory is on for the agent
(``registry``). The tools over history (archive, pruned catalog) are in ``history_tools``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.runtime.tools.base import Tool, ToolError
from memory.core_memory import CORE_FILES, CoreMemory, CoreMemoryError

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext


def core_memory_for(ctx: ToolContext) -> CoreMemory:
    return CoreMemory(
        kv=ctx.services.bundle.kv,
        config=ctx.agent.memory_config,
        agent=ctx.agent.name,
        user=ctx.user_id,
        hooks=ctx.services.hooks,
    )


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
