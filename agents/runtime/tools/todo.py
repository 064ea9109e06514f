"""A per-session todo list, stored in the KVStore under ``todo.json`` in the session scope.

The list survives cleanup (it is not part of the message history), and the memory system's
TodoReorientationHook puts it back in front of the agent after a prune. Stored as
``{"items": [{"id": 1, "text": "...", "status": "pending" | "done"}]}``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.runtime.tools.base import Tool, ToolError
from memory.stores.base import MUST_NOT_EXIST, VersionConflict

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

TODO_KEY = "todo.json"
MAX_ITEMS = 50
_CAS_ATTEMPTS = 5


def load_items(raw: str | None) -> list[dict[str, Any]]:
    if not raw:
        return []
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return []
    items = data.get("items", []) if isinstance(data, dict) else data
    return [i for i in items if isinstance(i, dict) and isinstance(i.get("text"), str)] if isinstance(items, list) else []


def render_items(items: list[dict[str, Any]]) -> str:
    if not items:
        return "The todo list is empty."
    return "\n".join(f"{i['id']}. [{'x' if i.get('status') == 'done' else ' '}] {i['text']}" for i in items)


def _find(items: list[dict[str, Any]], ref: str) -> dict[str, Any] | None:
    ref = ref.strip()
    if ref.isdigit():
        return next((i for i in items if i.get("id") == int(ref)), None)
    lowered = ref.lower()
    exact = [i for i in items if i["text"].lower() == lowered]
    partial = [i for i in items if lowered in i["text"].lower()]
    return (exact or partial or [None])[0]


class TodoTool(Tool):
    name = "todo"
    description = (
        "Your todo list for this conversation. add an item, complete one (by its number or text), "
        "list them, or clear the list. The list survives context cleanup."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "complete", "list", "clear"]},
            "item": {"type": "string", "minLength": 1, "maxLength": 500},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        return await sync_to_async(self._apply, thread_sensitive=True)(ctx, args)

    def _apply(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        action = args["action"]
        kv = ctx.services.bundle.kv
        for _ in range(_CAS_ATTEMPTS):
            current = kv.get(ctx.session, TODO_KEY)
            items = load_items(current.value if current else None)
            if action == "list":
                return render_items(items)
            if action in ("add", "complete") and not args.get("item"):
                raise ToolError(f"'{action}' needs an item")
            if action == "add":
                if len(items) >= MAX_ITEMS:
                    raise ToolError(f"the todo list holds at most {MAX_ITEMS} items; complete some or clear it")
                next_id = max((i.get("id", 0) for i in items), default=0) + 1
                items.append({"id": next_id, "text": args["item"], "status": "pending"})
            elif action == "complete":
                found = _find(items, args["item"])
                if found is None:
                    raise ToolError(f"no todo item matches {args['item']!r}; list the items to see their numbers")
                found["status"] = "done"
            else:
                items = []
            try:
                kv.put(
                    ctx.session,
                    TODO_KEY,
                    json.dumps({"items": items}, ensure_ascii=False),
                    expected_version=current.version if current else MUST_NOT_EXIST,
                    # a turn fenced out by a takeover must not change the list under the new one
                    fence=ctx.fence if ctx.fence is not None and ctx.fence.scope == ctx.session else None,
                )
            except VersionConflict:
                continue  # another writer got there first: redo on the fresh list
            return render_items(items)
        raise ToolError("the todo list is being changed concurrently; try again")
