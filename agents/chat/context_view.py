"""The context viewer: what the latest model step of a conversation was sent, section by section.

Each section of the meter (the agent's instructions, core memory file by file, the archive's
recall and summaries, the pruned catalog, experiences, the tool definitions, the conversation's
messages, and the message framing) opens to the exact text of that section in the request, with
its tokens.

The texts are *kept*, not re-assembled on demand: a re-assembly later would not be what was
sent, because everything it reads moves on after the step (the Dream Engine rewrites core
memory, cleanup prunes the session, the archive's recall depends on the latest message, a new
message arrives). So every ContextReady overwrites one KV item, ``context.json`` in the
conversation's session scope, with that step's request cut into its sections. It is bounded: one
request per conversation (at most about one context window of text), replaced at every step,
never a copy per step, and deleted with the conversation's session scope. The messages are the
copies the model got (``agents.runtime.relay.wire_messages``: governed, truncated to fit,
placeholders and error markers as sent), not the session's stored ones. One step further is
left to the model adapter: for a server whose chat template accepts only plain alternating
turns (``fold_roles``, agents.llm.shaping), tool calls and results are folded into text turns
on the wire; the viewer shows the messages before that folding. With recall sent beside the
message (``MODEX_RECALL_PLACEMENT=message``) the latest user message is shown as sent, recall at
its head; the archive section, where recall is counted, shows it as well.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from agents.chat.meter import MeterPoint
from agents.chat.sections import ABOUT, LABELS, ORDER, count_words, section_key, section_words
from agents.runtime.events import ContextReady
from agents.runtime.relay import wire_messages
from memory.scopes import SessionScope
from memory.stores.base import KVStore

logger = logging.getLogger("agents.chat.service")

CONTEXT_KEY = "context.json"

#: The names a section's parts are shown under (core memory files and the archive's elements).
PART_LABELS: dict[str, str] = {
    "SOUL.md": "SOUL.md · <your_identity>",
    "USER.md": "USER.md · <user_profile>",
    "MEMORY.md": "MEMORY.md · <known_facts>",
    "archive_recall": "<archive_recall> · matching messages",
    "archive_summaries": "<archive_summaries> · conversation summaries",
}


@dataclass(frozen=True, slots=True)
class ViewPart:
    """One element of a section (a core memory file, the archive's recall or its summaries)."""

    key: str
    text: str
    tokens: int
    items: int

    @property
    def label(self) -> str:
        return PART_LABELS.get(self.key, self.key)

    @property
    def words(self) -> str:
        return count_words(self.key, self.items)


@dataclass(frozen=True, slots=True)
class ViewSection:
    """One section of the meter as sent. ``text`` is the section's text in the request (for the
    tools, their schemas as indented JSON); ``messages`` the wire messages for the messages
    section (empty otherwise)."""

    key: str
    tokens: int
    items: int
    words: str
    text: str = ""
    parts: tuple[ViewPart, ...] = ()
    messages: tuple[dict[str, Any], ...] = ()

    @property
    def label(self) -> str:
        return LABELS.get(self.key, self.key)

    @property
    def about(self) -> str:
        return ABOUT.get(self.key, "")

    @property
    def shown_messages(self) -> list[dict[str, Any]]:
        return [message_view(m) for m in self.messages]


@dataclass(frozen=True, slots=True)
class ContextSnapshot:
    """The sections of one step's request. ``n``, ``turn`` and ``step`` name its meter point."""

    n: int
    turn: int
    step: int
    total: int
    window: int
    sections: tuple[ViewSection, ...]

    def section(self, key: str) -> ViewSection | None:
        return next((s for s in self.sections if s.key == key), None)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": 1,
                "n": self.n,
                "turn": self.turn,
                "step": self.step,
                "total": self.total,
                "window": self.window,
                "sections": [
                    {
                        "key": s.key,
                        "tokens": s.tokens,
                        "items": s.items,
                        "words": s.words,
                        "text": s.text,
                        "parts": [[p.key, p.text, p.tokens, p.items] for p in s.parts],
                        "messages": list(s.messages),
                    }
                    for s in self.sections
                ],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> ContextSnapshot | None:
        """Parse ``context.json``; None when absent or unreadable (the viewer then says so)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            sections = tuple(
                ViewSection(
                    key=str(s["key"]),
                    tokens=int(s["tokens"]),
                    items=int(s["items"]),
                    words=str(s.get("words", "")),
                    text=str(s.get("text", "")),
                    parts=tuple(ViewPart(str(k), str(t), int(n), int(i)) for k, t, n, i in s.get("parts", ())),
                    messages=tuple(dict(m) for m in s.get("messages", ())),
                )
                for s in data["sections"]
            )
            return cls(int(data["n"]), int(data["turn"]), int(data["step"]), int(data["total"]), int(data["window"]), sections)
        except (ValueError, TypeError, KeyError, AttributeError):
            logger.warning("unreadable %s; the context viewer shows nothing until the next step", CONTEXT_KEY)
            return None


def snapshot_of(event: ContextReady, *, point: MeterPoint | None) -> ContextSnapshot | None:
    """The step's request cut into the meter's sections (None without the request itself)."""
    request = event.context
    if request is None:
        return None
    accounts = {a.name: a for a in event.sections}
    grouped: dict[str, list] = {}
    for section in request.sections:
        grouped.setdefault(section_key(section.name), []).append(section)

    views: list[ViewSection] = []
    system = accounts.get("system")
    if request.instructions or system is not None:
        views.append(
            ViewSection("system", system.tokens if system else 0, system.items if system else 0, "", request.instructions)
        )
    for key, sections in grouped.items():
        if len(sections) == 1:
            [one] = sections
            parts = tuple(ViewPart(p.key, p.text, p.tokens, p.items) for p in one.parts)
            words = section_words(key, one.items, tuple((p.key, p.items) for p in one.parts))
            views.append(ViewSection(key, one.tokens, one.items, words, one.text, parts))
        else:  # several providers of one colour (e.g. "other"): one part each, in request order
            parts = tuple(ViewPart(s.name, s.text, s.tokens, s.items) for s in sections)
            items = sum(s.items for s in sections)
            text = "\n\n".join(s.text for s in sections)
            views.append(ViewSection(key, sum(s.tokens for s in sections), items, section_words(key, items), text, parts))
    tools = accounts.get("tools")
    if request.tools:
        text = json.dumps(request.tools, ensure_ascii=False, indent=2)
        views.append(ViewSection("tools", tools.tokens if tools else 0, len(request.tools), count_words("tools", len(request.tools)), text))
    wire = wire_messages(request)
    sent = tuple(wire[len(wire) - len(request.session_messages):]) if request.session_messages else ()
    messages = accounts.get("messages")
    views.append(
        ViewSection("messages", messages.tokens if messages else 0, len(sent), count_words("messages", len(sent)), messages=sent)
    )
    framing = event.total_tokens - sum(a.tokens for a in event.sections)
    if framing > 0:
        views.append(ViewSection("overhead", framing, 0, ""))
    views.sort(key=lambda v: ORDER.get(v.key, len(ORDER)))
    n, turn = (point.n, point.turn) if point is not None else (0, 0)
    return ContextSnapshot(n, turn, event.step, event.total_tokens, event.window, tuple(views))


def record_snapshot(*, kv: KVStore, session: SessionScope, snapshot: ContextSnapshot) -> None:
    """Replace the conversation's kept request with ``snapshot`` (the latest step wins)."""
    kv.put(session, CONTEXT_KEY, snapshot.to_json())


def load_snapshot(*, kv: KVStore, session: SessionScope) -> ContextSnapshot | None:
    """The latest step's request of the conversation, or None when no step has been kept yet."""
    return ContextSnapshot.from_json(kv.get_value(session, CONTEXT_KEY))


def message_view(message: dict[str, Any]) -> dict[str, Any]:
    """A wire message for the template: its role, name, text, reasoning and tool calls as sent."""
    calls = [
        {"id": c.get("id", ""), "name": (c.get("function") or {}).get("name", ""),
         "arguments": (c.get("function") or {}).get("arguments", "")}
        for c in message.get("tool_calls") or ()
    ]
    content = message.get("content")
    if isinstance(content, list):  # content parts: show each text part as it was sent
        content = "\n".join(str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in content)
    return {
        "role": message.get("role", ""),
        "name": message.get("name") or "",
        "tool_call_id": message.get("tool_call_id") or "",
        "content": content or "",
        "reasoning": message.get("reasoning_content") or "",
        "calls": calls,
    }
