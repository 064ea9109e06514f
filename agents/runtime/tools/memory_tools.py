"""The core memory tool: the agent's own edits of SOUL.md, USER.md and MEMORY.md.

Scoped to the agent and user of the run; compiled in only when core memory is on for the agent
(``registry``). The tools over history (archive, pruned catalog) are in ``history_tools``.

USER.md and MEMORY.md belong to the user of the run: the tool writes them. SOUL.md is shared by
everyone who talks to the agent, and the agent talking to one user has no authority over the
others (``memory.core_memory``): an edit of it becomes a proposal, with the conversation and the
user's last message as its source, for staff to accept or reject; the tool says so, and SOUL.md
is unchanged until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.runtime.tools.base import Tool, ToolError
from memory.core_memory import CORE_FILES, CoreMemory, CoreMemoryError, Origin, is_shared
from memory.core_proposals import ProposalError

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
        "(old must occur exactly once; new may be empty to delete). Files have size caps. SOUL.md is "
        "shared by everyone you talk to: a change to it is only proposed, for staff to review."
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
            if action == "append" and not args.get("text"):
                raise ToolError("'append' needs text")
            if action == "replace" and ("old" not in args or "new" not in args):
                raise ToolError("'replace' needs old and new")
            if is_shared(file):
                return self._propose(ctx, memory, file, action, args)
            if action == "append":
                state = memory.append(file=file, text=args["text"], source="agent", origin=_origin(ctx))
                return f"Appended to {file} (version {state.version})."
            current = memory.read(file=file)
            state = memory.replace(
                file=file, old=args["old"], new=args["new"], source="agent", expected_version=current.version,
                origin=_origin(ctx),
            )
            return f"Updated {file} (version {state.version})."
        except (CoreMemoryError, ProposalError) as exc:
            raise ToolError(str(exc)) from None
        except ValueError as exc:  # a proposal that is not a change (e.g. nothing to replace)
            raise ToolError(str(exc)) from None

    @staticmethod
    def _propose(ctx: ToolContext, memory: CoreMemory, file: str, action: str, args: dict[str, Any]) -> str:
        if action == "append":
            change = {"action": "append", "text": args["text"]}
        elif args["new"]:
            change = {"action": "replace", "old": args["old"], "text": args["new"]}
        else:
            change = {"action": "remove", "old": args["old"]}
        origin = _origin(ctx, evidence=True)
        proposal = memory.propose(file=file, source="agent", origin=origin, **change)
        state = "was rejected by staff before" if proposal.status == "rejected" else "now waits for staff to review it"
        return (
            f"{file} is shared by everyone who talks to you, so it was not changed: the edit was recorded as "
            f"proposal {proposal.id} and {state}. Tell the user that staff decide changes to {file}."
        )


def _origin(ctx: ToolContext, *, evidence: bool = False) -> Origin:
    """The run's conversation (and, for a proposal, what the user last said in it)."""
    said = ""
    if evidence:
        recent = ctx.services.bundle.messages.read(ctx.session, last=20)
        said = next((m.content or "" for m in reversed(recent) if m.role == "user" and m.content), "")
    return Origin(session=ctx.session.key(), evidence=said)
