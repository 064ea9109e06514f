"""The pruned catalog's file format: render and parse one catalog file, losslessly.

See ``memory.compression.pruned`` for the layout and the guarantees; this module is the
format alone (pure functions, no I/O), so readers and tools can reuse it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from memory.messages import MalformedMessage, Message, ToolCall
from memory.scopes import SessionScope

HEAD_RE = re.compile(r"^## \[(\d+)\] ")
_META_PREFIX, _META_SUFFIX = "<!-- modex ", " -->"
_INDENT = "    "
_LABELS = {"Reasoning:": "reasoning_content", "Content:": "content"}
# Characters that line-oriented tools or editors treat specially; tab and newline are fine.
_UNSAFE_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029\ufeff\ud800-\udfff]")
_UNESCAPE_RE = re.compile(r"\\(\\|u[0-9a-f]{4})")


class PrunedCatalogError(Exception):
    """Base of the catalog's errors."""


class CatalogUnavailable(PrunedCatalogError):
    """The catalog directory cannot be written or read (disk full, a file in the way, ...)."""


class CatalogConflict(PrunedCatalogError):
    """A seq already in the catalog belongs to another message id (was the session cleared
    without ``delete_session``?). Nothing was written."""


class CorruptCatalog(PrunedCatalogError):
    """A catalog file does not parse; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class PrunedEntry:
    """One catalogued message and where its block starts (``line`` is 1-based, as grep -n)."""

    seq: int
    role: str
    created_at: datetime
    tool_names: tuple[str, ...]
    message: Message
    path: Path
    line: int


# -- format -----------------------------------------------------------------------------------


def _escape(text: str) -> str:
    return _UNSAFE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text.replace("\\", "\\\\"))


def _unescape(text: str) -> str:
    return _UNESCAPE_RE.sub(lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1)[1:], 16)), text)


def _display(text: str) -> str:
    """A name made safe for one heading line (display only; the metadata keeps it exactly)."""
    return _UNSAFE_RE.sub("?", text).replace("\n", " ").replace("\t", " ")


def tool_names(message: Message) -> tuple[str, ...]:
    if message.tool_calls:
        return tuple(call.name for call in message.tool_calls)
    if message.role == "tool" and message.name:
        return (message.name,)
    return ()


def render_block(message: Message) -> str:
    """The markdown block of one message, ending with its ``---`` line and a blank line."""
    heading = f"## [{message.seq}] {message.role} · {message.created_at.isoformat()}"
    if message.tool_calls:
        heading += " · calls: " + ", ".join(_display(c.name) for c in message.tool_calls)
    elif message.role == "tool":
        heading += f" · result: {_display(message.name or message.tool_call_id or '')}"
    meta: dict[str, object] = {
        "id": message.id,
        "seq": message.seq,
        "role": message.role,
        "kind": message.kind,
        "created_at": message.created_at.isoformat(),
        "tokens": message.tokens,
    }
    if message.tool_call_id is not None:
        meta["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        meta["name"] = message.name
    if message.tool_calls:
        meta["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in message.tool_calls]
    sections: list[str] = []
    escaped: list[str] = []
    for label, attr in _LABELS.items():
        value = getattr(message, attr)
        if value is None:
            continue
        if _UNSAFE_RE.search(value):
            value = _escape(value)
            escaped.append(attr)
        body = "\n".join(_INDENT + line for line in value.split("\n"))
        sections.append(f"{label}\n\n{body}\n")
    if escaped:
        meta["escaped"] = escaped
    # ASCII-only JSON with <, > escaped: one line, and "-->" can never close the comment early.
    encoded = json.dumps(meta, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")
    parts = [heading, f"{_META_PREFIX}{encoded}{_META_SUFFIX}", ""]
    for section in sections:
        parts.append(section)
    parts.append("---\n")
    return "\n".join(parts)


def render_file(*, session: SessionScope, number: int, messages: Sequence[Message], cleanup_at: datetime) -> str:
    first, last = messages[0].seq, messages[-1].seq
    header = (
        f"# Pruned catalog · session {session.id}\n"
        f"Cleanup {number} at {cleanup_at.isoformat()} · seq {first}–{last}\n"
        f'{len(messages)} messages · table of contents: grep -n "^## \\[" pruned/{session.id}/*.md\n'
    )
    return header + "\n" + "\n".join(render_block(m) for m in messages)


def parse_file(text: str, *, path: Path) -> list[PrunedEntry]:
    """Every block of one catalog file, in file order; raises CorruptCatalog on bad structure."""
    lines = text.split("\n")
    if not lines[0].startswith("# Pruned catalog · session "):
        raise CorruptCatalog(f"{path}:1: not a pruned catalog file")
    entries: list[PrunedEntry] = []
    index = 3
    count = len(lines)

    def fail(at: int, why: str) -> CorruptCatalog:
        return CorruptCatalog(f"{path}:{at + 1}: {why}")

    while index < count:
        line = lines[index]
        if not line:
            index += 1
            continue
        head = HEAD_RE.match(line)
        if head is None:
            raise fail(index, f"expected a '## [N]' block heading, found {line[:60]!r}")
        start = index
        index += 1
        meta_line = lines[index] if index < count else ""
        if not (meta_line.startswith(_META_PREFIX) and meta_line.endswith(_META_SUFFIX)):
            raise fail(index, "a block heading must be followed by its metadata comment")
        try:
            meta = json.loads(meta_line[len(_META_PREFIX) : -len(_META_SUFFIX)])
        except json.JSONDecodeError as exc:
            raise fail(index, f"unreadable metadata: {exc}") from None
        index += 1
        fields: dict[str, list[str]] = {}
        current: list[str] | None = None
        while True:
            if index >= count:
                raise fail(start, "block is not closed by a '---' line")
            line = lines[index]
            index += 1
            if line == "---":
                break
            if line in _LABELS:
                current = fields.setdefault(_LABELS[line], [])
            elif line.startswith(_INDENT) and current is not None:
                current.append(line[len(_INDENT) :])
            elif line:
                raise fail(index - 1, f"unexpected line inside a block: {line[:60]!r}")
        escaped = set(meta.get("escaped", ()))
        values = {}
        for attr in _LABELS.values():
            if attr in fields:
                value = "\n".join(fields[attr])
                values[attr] = _unescape(value) if attr in escaped else value
        try:
            message = Message(
                role=meta["role"],
                content=values.get("content"),
                reasoning_content=values.get("reasoning_content"),
                tool_calls=tuple(
                    ToolCall(id=c["id"], name=c["name"], arguments_json=c["arguments"])
                    for c in meta.get("tool_calls", ())
                ),
                tool_call_id=meta.get("tool_call_id"),
                name=meta.get("name"),
                kind=meta["kind"],
                id=meta["id"],
                seq=meta["seq"],
                created_at=datetime.fromisoformat(meta["created_at"]),
                tokens=meta.get("tokens"),
            )
        except (KeyError, TypeError, ValueError, MalformedMessage) as exc:
            raise fail(start, f"block does not describe a message: {exc}") from None
        if message.seq != int(head.group(1)):
            raise fail(start, f"heading seq {head.group(1)} differs from metadata seq {message.seq}")
        entries.append(
            PrunedEntry(
                seq=message.seq,
                role=message.role,
                created_at=message.created_at,
                tool_names=tool_names(message),
                message=message,
                path=path,
                line=start + 1,
            )
        )
    return entries
