"""Messages as immutable values, and their exact mapping to the OpenAI chat wire format.

Two serialisations exist and they are kept apart:

* the **wire** form (``to_wire``/``from_wire``) is what an OpenAI-compatible endpoint speaks:
  ``role``, ``content``, ``reasoning_content``, ``tool_calls``, ``tool_call_id``, ``name``;
* the **record** form (``to_record``/``from_record``) is what stores persist: the wire fields
  plus Modex's own ``id``, ``seq``, ``kind``, ``created_at`` and cached ``tokens``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from memory.text import is_storable, storable

ROLES = ("system", "user", "assistant", "tool")

#: Message kinds the memory system itself produces. Other kinds are allowed (the runtime adds its
#: own), as long as they are short identifiers.
KIND_MESSAGE = "message"
KIND_COMPACT_SUMMARY = "compact_summary"

_WIRE_KEYS = frozenset({"role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name"})


class MalformedMessage(ValueError):
    """A message (wire dict, record or constructor arguments) that cannot be a valid Message."""


def new_message_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def _require_str(value: Any, what: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise MalformedMessage(f"{what} must be a string, got {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by an assistant message."""

    id: str
    name: str
    arguments_json: str

    def __post_init__(self) -> None:
        _require_str(self.id, "tool call id")
        _require_str(self.name, "tool call name")
        _require_str(self.arguments_json, "tool call arguments")
        if not self.id:
            raise MalformedMessage("tool call id must not be empty")
        if not self.name:
            raise MalformedMessage("tool call name must not be empty")

    def arguments(self) -> Any:
        """The decoded arguments; raises MalformedMessage if they are not valid JSON."""
        try:
            return json.loads(self.arguments_json) if self.arguments_json.strip() else {}
        except json.JSONDecodeError as exc:
            raise MalformedMessage(f"tool call {self.id} ({self.name}) has invalid JSON arguments: {exc}") from None

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments_json}}

    @classmethod
    def from_wire(cls, data: Any) -> ToolCall:
        if not isinstance(data, Mapping):
            raise MalformedMessage(f"a tool call must be an object, got {type(data).__name__}")
        kind = data.get("type", "function")
        if kind != "function":
            raise MalformedMessage(f"tool call type {kind!r} is not supported (only 'function')")
        function = data.get("function")
        if not isinstance(function, Mapping):
            raise MalformedMessage("a tool call needs a 'function' object with 'name' and 'arguments'")
        arguments = function.get("arguments", "")
        if isinstance(arguments, (dict, list)):
            # Some servers send decoded arguments; keep them as canonical JSON text.
            arguments = json.dumps(arguments, ensure_ascii=False)
        return cls(
            id=_require_str(data.get("id"), "tool call id"),
            name=_require_str(function.get("name"), "tool call name"),
            arguments_json=_require_str(arguments, "tool call arguments"),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a session. Immutable; derive changed copies with ``dataclasses.replace``."""

    role: str
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    kind: str = KIND_MESSAGE
    id: str = field(default_factory=new_message_id)
    seq: int | None = None
    created_at: datetime = field(default_factory=utcnow)
    tokens: int | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise MalformedMessage(f"role must be one of {', '.join(ROLES)}; got {self.role!r}")
        _require_str(self.content, "content", allow_none=True)
        _require_str(self.reasoning_content, "reasoning_content", allow_none=True)
        _require_str(self.name, "name", allow_none=True)
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if not isinstance(self.tool_calls, tuple) or not all(isinstance(c, ToolCall) for c in self.tool_calls):
            raise MalformedMessage("tool_calls must be a tuple of ToolCall")
        if self.tool_calls and self.role != "assistant":
            raise MalformedMessage(f"only assistant messages carry tool_calls (got role {self.role!r})")
        if len({c.id for c in self.tool_calls}) != len(self.tool_calls):
            raise MalformedMessage("tool call ids within one message must be distinct")
        if self.role == "tool":
            if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
                raise MalformedMessage("a tool message needs the tool_call_id it answers")
        elif self.tool_call_id is not None:
            raise MalformedMessage(f"tool_call_id is only valid on tool messages (got role {self.role!r})")
        if not isinstance(self.kind, str) or not self.kind or len(self.kind) > 64:
            raise MalformedMessage("kind must be a short non-empty string")
        if not isinstance(self.id, str) or not self.id or len(self.id) > 128:
            raise MalformedMessage("id must be a non-empty string of at most 128 characters")
        if self.seq is not None and (not isinstance(self.seq, int) or isinstance(self.seq, bool) or self.seq < 0):
            raise MalformedMessage("seq must be a non-negative integer or None")
        if self.tokens is not None and (
            not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 0
        ):
            raise MalformedMessage("tokens must be a non-negative integer or None")
        if not isinstance(self.created_at, datetime) or self.created_at.tzinfo is None:
            raise MalformedMessage("created_at must be a timezone-aware datetime")

    # -- convenience -------------------------------------------------------------------------

    @property
    def is_compact_summary(self) -> bool:
        return self.kind == KIND_COMPACT_SUMMARY

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(call.id for call in self.tool_calls)

    def text(self) -> str:
        return self.content or ""

    # -- wire format -------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        """The OpenAI chat message dict. ``content`` is always present (possibly None)."""
        wire: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning_content is not None:
            wire["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            wire["tool_calls"] = [call.to_wire() for call in self.tool_calls]
        if self.tool_call_id is not None:
            wire["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            wire["name"] = self.name
        return wire

    @classmethod
    def from_wire(cls, data: Any, **meta: Any) -> Message:
        """Parse an OpenAI chat message dict. ``meta`` sets id/seq/kind/created_at/tokens.

        Content given as a list of text parts is joined; any other part type is rejected, since
        Modex would otherwise silently drop it.
        """
        if not isinstance(data, Mapping):
            raise MalformedMessage(f"a message must be an object, got {type(data).__name__}")
        unknown = set(data) - _WIRE_KEYS - {"refusal", "audio", "function_call", "annotations"}
        if unknown:
            raise MalformedMessage(f"unknown message field(s): {', '.join(sorted(unknown))}")
        content = data.get("content")
        if isinstance(content, list):
            content = _join_text_parts(content)
        raw_calls = data.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise MalformedMessage("tool_calls must be a list")
        return cls(
            role=_require_str(data.get("role"), "role"),
            content=_require_str(content, "content", allow_none=True),
            reasoning_content=_require_str(data.get("reasoning_content"), "reasoning_content", allow_none=True),
            tool_calls=tuple(ToolCall.from_wire(c) for c in raw_calls),
            tool_call_id=_require_str(data.get("tool_call_id"), "tool_call_id", allow_none=True),
            name=_require_str(data.get("name"), "name", allow_none=True),
            **meta,
        )

    # -- record format (storage) -------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict holding every field, for stores."""
        record = self.to_wire()
        record.update(
            id=self.id,
            seq=self.seq,
            kind=self.kind,
            created_at=self.created_at.isoformat(),
            tokens=self.tokens,
        )
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Message:
        if not isinstance(record, Mapping):
            raise MalformedMessage("a message record must be an object")
        wire = {k: v for k, v in record.items() if k in _WIRE_KEYS}
        try:
            created_at = datetime.fromisoformat(record["created_at"])
        except (KeyError, TypeError, ValueError):
            raise MalformedMessage("a message record needs an ISO created_at") from None
        return cls.from_wire(
            wire,
            id=record.get("id") or new_message_id(),
            seq=record.get("seq"),
            kind=record.get("kind") or KIND_MESSAGE,
            created_at=created_at,
            tokens=record.get("tokens"),
        )

    @classmethod
    def from_stored(cls, record: Any) -> Message:
        """``from_record`` for a record a store wrote itself with ``to_record``: the same value,
        without re-validating every field (the message was validated when it was built, and
        the record is the store's own bytes). Anything that does not have the exact shape
        ``to_record`` writes goes through ``from_record``, which validates and raises
        MalformedMessage as usual."""
        try:
            role = record["role"]
            content = record["content"]
            message_id = record["id"]
            kind = record["kind"]
            seq = record["seq"]
            tokens = record["tokens"]
            created_at = datetime.fromisoformat(record["created_at"])
            reasoning = record.get("reasoning_content")
            tool_call_id = record.get("tool_call_id")
            name = record.get("name")
            raw_calls = record.get("tool_calls")
            calls = () if raw_calls is None else tuple(_stored_call(c) for c in raw_calls)
            # Shapes to_record can never write go the validating way (and fail there, clearly).
            if (
                role not in ROLES
                or type(message_id) is not str or not message_id or len(message_id) > 128
                or type(kind) is not str or not kind or len(kind) > 64
                or created_at.tzinfo is None
                or (content is not None and type(content) is not str)
                or (reasoning is not None and type(reasoning) is not str)
                or (name is not None and type(name) is not str)
                or (tool_call_id is None) == (role == "tool")
                or (tool_call_id is not None and (type(tool_call_id) is not str or not tool_call_id))
                or (calls and (role != "assistant" or len({c.id for c in calls}) != len(calls)))
                or (seq is not None and (type(seq) is not int or seq < 0))
                or (tokens is not None and (type(tokens) is not int or tokens < 0))
            ):
                raise _NotStored
        except (_NotStored, KeyError, TypeError, ValueError, AttributeError):
            return cls.from_record(record)
        message = object.__new__(cls)
        s = _MESSAGE_SLOTS
        s.role(message, role)
        s.content(message, content)
        s.reasoning_content(message, reasoning)
        s.tool_calls(message, calls)
        s.tool_call_id(message, tool_call_id)
        s.name(message, name)
        s.kind(message, kind)
        s.id(message, message_id)
        s.seq(message, seq)
        s.created_at(message, created_at)
        s.tokens(message, tokens)
        return message

    def with_seq(self, seq: int) -> Message:
        return replace(self, seq=seq)


class _Slots:
    """The slot setters of a frozen slotted dataclass, by field name: ``from_stored`` fills a
    new value through them (half the cost of ``object.__setattr__``, which looks the slot up
    by name each time)."""

    def __init__(self, cls: type) -> None:
        for name in cls.__slots__:
            setattr(self, name, cls.__dict__[name].__set__)


_MESSAGE_SLOTS = _Slots(Message)
_CALL_SLOTS = _Slots(ToolCall)


class _NotStored(Exception):
    """Internal: a record without the exact shape ``Message.to_record`` writes."""


def _stored_call(data: Any) -> ToolCall:
    """A ToolCall from the wire dict ``ToolCall.to_wire`` wrote (see ``Message.from_stored``)."""
    function = data["function"]
    call_id, name, arguments = data["id"], function["name"], function["arguments"]
    if (
        data.get("type") != "function"
        or type(call_id) is not str or not call_id
        or type(name) is not str or not name
        or type(arguments) is not str
    ):
        raise _NotStored
    call = object.__new__(ToolCall)
    _CALL_SLOTS.id(call, call_id)
    _CALL_SLOTS.name(call, name)
    _CALL_SLOTS.arguments_json(call, arguments)
    return call


def _join_text_parts(parts: list[Any]) -> str:
    texts = []
    for part in parts:
        if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise MalformedMessage("only text content parts are supported")
        texts.append(part["text"])
    return "".join(texts)


def messages_from_wire(items: Any) -> list[Message]:
    """Parse a list of wire dicts, naming the position of the first bad one."""
    if not isinstance(items, list):
        raise MalformedMessage("messages must be a list")
    out = []
    for index, item in enumerate(items):
        try:
            out.append(Message.from_wire(item))
        except MalformedMessage as exc:
            raise MalformedMessage(f"message {index}: {exc}") from None
    return out


def storable_message(message: Message) -> Message:
    """``message`` with every text field made storable (``memory.text.storable``: lone
    surrogates to U+FFFD), so any store, the pruned catalog and the browser can take it.

    The same object when nothing needed changing. NUL is kept: messages are stored as JSON,
    where it is an escape, on every backend.
    """
    calls = tuple(
        call
        if is_storable(call.id) and is_storable(call.name) and storable_arguments(call.arguments_json) is call.arguments_json
        else ToolCall(id=storable(call.id), name=storable(call.name), arguments_json=storable_arguments(call.arguments_json))
        for call in message.tool_calls
    )
    fields = {
        name: storable(value)
        for name in ("content", "reasoning_content", "tool_call_id", "name")
        if isinstance(value := getattr(message, name), str) and not is_storable(value)
    }
    if any(new is not old for new, old in zip(calls, message.tool_calls)):
        fields["tool_calls"] = calls
    if not fields:
        return message
    return replace(message, **fields, tokens=None)  # the count, if any, was of the old text


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def storable_arguments(arguments_json: str) -> str:
    """Tool call arguments whose text *and* decoded strings are storable.

    Valid JSON text can still decode to a lone surrogate (``"\\ud83d"``), which the tool would
    then try to store; such arguments are re-encoded from their storable decoding. Anything
    else (including invalid JSON, which the runtime answers with a tool error) keeps its text,
    made storable. The same object when nothing needed changing.
    """
    text = storable(arguments_json)
    if not _SURROGATE_ESCAPE.search(text):
        return text
    try:
        decoded = json.loads(text)
    except ValueError:
        return text
    clean = storable_json(decoded)
    return text if clean == decoded else json.dumps(clean, ensure_ascii=False)


def storable_json(value: Any) -> Any:
    """Decoded JSON with every string (keys too) made storable."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        return [storable_json(v) for v in value]
    if isinstance(value, dict):
        return {storable(k): storable_json(v) for k, v in value.items()}
    return value
