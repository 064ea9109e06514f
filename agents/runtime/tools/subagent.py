"""spawn_subagent: hand a task to one of the node's declared subagents and get its answer back.

The subagent runs with subagent_memory in a session of its own, which is cleared when it
finishes; its final answer is the parent's tool result. It gets no core memory tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.runtime.tools.base import Tool, ToolError

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

MAX_DEPTH = 3


class SpawnSubagentTool(Tool):
    name = "spawn_subagent"
    description = "Give a self-contained task to one of your subagents; returns its final answer."

    def __init__(self, subagents: dict[str, str]) -> None:
        self._subagents = subagents  # name -> description
        listing = "; ".join(f"{n}: {d}" for n, d in subagents.items()) or "none"
        self.parameters = {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": list(subagents)},
                "task": {"type": "string", "minLength": 1, "maxLength": 8000},
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        }
        self.description = f"{SpawnSubagentTool.description} Subagents: {listing}."

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        if ctx.depth >= MAX_DEPTH:
            raise ToolError(f"subagents cannot nest deeper than {MAX_DEPTH} levels")
        child = next((n for n in ctx.agent.subagents if n.name == args["agent"]), None)
        if child is None:
            raise ToolError(f"{args['agent']!r} is not one of your subagents ({', '.join(self._subagents)})")
        return await ctx.runtime.run_subagent(parent=ctx, node=child, task=args["task"])
