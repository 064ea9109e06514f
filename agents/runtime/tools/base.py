"""The tool contract: a name, a description, a JSON schema, and an async ``run``.

Tool errors never crash a turn: a ``ToolError`` (or any exception) becomes the tool result the
model sees, so it can correct itself. Arguments are validated against the schema first.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from agents.runtime.tools.schema import validate
from memory.messages import storable_json
from memory.text import storable

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

logger = logging.getLogger("agents.runtime.tools")

#: Tool results longer than this are cut before they are stored (the model sees a marker).
MAX_RESULT_CHARS = 20000


class ToolError(Exception):
    """A failure the model should read and can act on (bad arguments, not found, cap reached)."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    ok: bool
    error: str | None = None


class Tool(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @abstractmethod
    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Do the work and return the text the model reads; raise ToolError for usable failures."""


@dataclass
class ToolRoster:
    """The compiled tools of one agent, by name."""

    tools: dict[str, Tool] = field(default_factory=dict)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]

    def names(self) -> list[str]:
        return list(self.tools)

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    async def call(self, ctx: ToolContext, *, name: str, arguments_json: str) -> ToolOutcome:
        """Run one call; every failure comes back as an outcome the model can read."""
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(self.tools) or "none"
            return _failure(f"unknown tool {name!r}; the tools available are: {known}")
        try:
            args = json.loads(arguments_json) if arguments_json.strip() else {}
        except json.JSONDecodeError as exc:
            return _failure(f"the arguments for {name} are not valid JSON ({exc.msg} at position {exc.pos})")
        # Valid JSON text can still decode to lone surrogates ("\\ud83d"): tools only ever see
        # storable strings, so whatever they write (KV values, files, results) can be stored.
        args = storable_json(args)
        problems = validate(tool.parameters, args)
        if problems:
            return _failure(f"invalid arguments for {name}: " + "; ".join(problems))
        try:
            content = await tool.run(ctx, args)
        except ToolError as exc:
            return _failure(str(exc))
        except Exception as exc:  # a tool bug must not end the turn
            logger.exception("tool %s raised", name)
            return _failure(f"{name} failed: {type(exc).__name__}: {exc}")
        content = storable(content) if isinstance(content, str) else storable(str(content))
        if len(content) > MAX_RESULT_CHARS:
            content = content[:MAX_RESULT_CHARS] + f"\n[… cut at {MAX_RESULT_CHARS} characters …]"
        return ToolOutcome(content=content, ok=True)


def _failure(message: str) -> ToolOutcome:
    message = storable(message)  # an error may quote the model's own text
    return ToolOutcome(content=f"Error: {message}", ok=False, error=message)

