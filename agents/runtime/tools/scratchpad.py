"""The run's scratchpad: notes shared by the nodes cooperating in one run.

Not a memory tier: it lives in process memory for the duration of one run, is never persisted
and never injected as memory. It disappears when the run ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.runtime.tools.base import Tool, ToolError

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

MAX_NOTES = 100
MAX_NOTE_CHARS = 4000


class RunScratchpad:
    """Key → note, shared by a main agent and the subagents it spawns within one run."""

    def __init__(self) -> None:
        self._notes: dict[str, str] = {}

    def write(self, key: str, text: str) -> None:
        if key not in self._notes and len(self._notes) >= MAX_NOTES:
            raise ToolError(f"the scratchpad holds at most {MAX_NOTES} notes; overwrite or reuse a key")
        self._notes[key] = text[:MAX_NOTE_CHARS]

    def read(self, key: str) -> str | None:
        return self._notes.get(key)

    def keys(self) -> list[str]:
        return sorted(self._notes)


class GraphKnowledgeBaseTool(Tool):
    name = "knowledge_base"
    description = (
        "Shared notes for this run only (you and the subagents you spawn). Not long-term memory: "
        "everything here is gone when the run ends."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["write", "read", "list"]},
            "key": {"type": "string", "minLength": 1, "maxLength": 100},
            "text": {"type": "string", "maxLength": MAX_NOTE_CHARS},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        pad = ctx.scratchpad
        action = args["action"]
        if action == "list":
            keys = pad.keys()
            return "Notes: " + ", ".join(keys) if keys else "The scratchpad is empty."
        key = args.get("key")
        if not key:
            raise ToolError(f"'{action}' needs a key")
        if action == "write":
            if "text" not in args:
                raise ToolError("'write' needs text")
            pad.write(key, args["text"])
            return f"Saved note {key!r}."
        note = pad.read(key)
        return note if note is not None else f"No note named {key!r}."
