"""Message shaping for strict chat templates: the request copy, folded into alternating turns.

Some chat templates (Gemma's official one, Mistral's, Llama-2's; rendered by llama.cpp, vLLM,
TGI) accept only ``system?, user, assistant, user, ...`` and raise "Conversation roles must
alternate" for a ``tool`` message or an assistant turn with ``tool_calls``. When a server
refuses a request that way, ``OpenAIChatModel`` asks again once with ``fold_roles(messages)``
and keeps folding for that endpoint for the rest of the process:

* every system message is joined into one, first;
* an assistant turn's tool calls become lines of its text (``[called NAME with ARGS]``);
* a tool result becomes user text (``[result of NAME]`` and the result);
* adjacent turns of the same role are joined, and a conversation that starts with the
  assistant gets a neutral user turn first, so roles alternate.

Only the copy sent changes; the session keeps its tool messages. The model reads the same
facts, as text.
"""

from __future__ import annotations

import json
from typing import Any

CONTINUE = "(the conversation continues)"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _call_line(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    name = function.get("name") or "a tool"
    arguments = function.get("arguments") or ""
    try:
        arguments = json.dumps(json.loads(arguments), ensure_ascii=False)
    except (TypeError, ValueError):
        pass
    return f"[called {name} with {arguments or '{}'}]"


def fold_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (OpenAI wire dicts) as ``system?, user, assistant, user, ...`` text turns."""
    names = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call.get("id")] = (call.get("function") or {}).get("name")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content"))
        if role in ("system", "developer"):
            if text:
                system.append(text)
            continue
        if role == "assistant":
            lines = [text] if text else []
            lines += [_call_line(call) for call in message.get("tool_calls") or ()]
            role, text = "assistant", "\n".join(lines)
        elif role == "tool":
            name = message.get("name") or names.get(message.get("tool_call_id")) or "the tool"
            role, text = "user", f"[result of {name}]\n{text}"
        else:
            role = "user"
        if turns and turns[-1][0] == role:
            turns[-1] = (role, f"{turns[-1][1]}\n\n{text}" if text else turns[-1][1])
        else:
            turns.append((role, text))
    if turns and turns[0][0] == "assistant":
        turns.insert(0, ("user", CONTINUE))
    folded: list[dict[str, Any]] = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    folded += [{"role": role, "content": text or CONTINUE} for role, text in turns]
    return folded


def needs_folding(messages: list[dict[str, Any]]) -> bool:
    """Whether ``fold_roles`` would change the roles of ``messages`` (tool turns, or roles that
    do not alternate)."""
    previous = None
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            if previous is not None:
                return True
            continue
        if role == "tool" or message.get("tool_calls") or role == previous:
            return True
        if previous is None and role != "user":
            return True
        previous = role
    return False
