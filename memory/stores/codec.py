"""How stored values become bytes and back, and the argument checks every backend shares.

Both backends store a message as the JSON of ``Message.to_record()`` and an archive document as
the JSON of ``document_to_record``; keeping the codec in one place keeps them byte-compatible
(a session can be copied from one backend to the other) and keeps the checks identical, which
the conformance suite relies on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime
from typing import Any

from memory.memo import Memo
from memory.messages import Message
from memory.scopes import Scope
from memory.stores.base import (
    ArchiveDocument,
    CursorMove,
    DuplicateMessage,
    Fence,
    InvalidPrune,
    KVWrite,
    validate_key,
)


def dumps(data: Any) -> str:
    """Compact JSON text that keeps non-ASCII readable.

    json.dumps escapes control characters (NUL included), so the text is safe for any database
    text column; a lone surrogate (legal in a Python str, not in UTF-8) falls back to \\u escapes.
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text


class DecodeMemo(Memo):
    """Values decoded from stored bytes, for the most recently read byte strings.

    A session's tail is read every turn, and decoding its few hundred records (JSON, then a
    Message) was most of a read's cost. A stored record's bytes determine its value and values
    are frozen, so the value decoded from equal bytes is shared: a record that changes (a soft
    delete, a rewrite) has other bytes and is decoded afresh.
    """

    def decode(self, raws: Sequence[Hashable], decode_many: Callable[[list], list[Any]]) -> list[Any]:
        """One value per raw: from the memo, the others through ``decode_many`` (and then kept)."""
        found = self.get_many(raws)
        missing = [i for i, value in enumerate(found) if value is None]
        if missing:
            todo = [raws[i] for i in missing]
            values = decode_many(todo)
            for i, value in zip(missing, values, strict=True):
                found[i] = value
            if len(todo) <= self.size // 2:  # one huge read must not flush every session's tail
                kept = [(raw, value) for raw, value in zip(todo, values, strict=True) if value is not None]
                self.put_many([raw for raw, _ in kept], [value for _, value in kept])
        return found


#: Messages by the JSON text a SQL row holds (shared by every SqlMessageStore of the process).
MESSAGE_TEXTS = DecodeMemo(16384)

#: Archive documents without their messages, by the head of the JSON a SQL row holds
#: (``summary_from_head``): assembly lists the newest summaries every turn. Shared: read-only.
SUMMARY_HEADS = DecodeMemo(4096)


def messages_from_texts(texts: Sequence[str]) -> list[Message]:
    """The messages stored as these ``dumps(message.to_record())`` texts, in order."""
    return MESSAGE_TEXTS.decode(texts, _decode_texts)


def _decode_texts(texts: list[str]) -> list[Message]:
    try:
        # One parse for the lot: each text is one whole JSON object the store wrote.
        records = json.loads("[" + ",".join(texts) + "]")
    except (json.JSONDecodeError, RecursionError):
        records = None
    if not isinstance(records, list) or len(records) != len(texts):
        records = [json.loads(text) for text in texts]  # a bad text raises, about itself
    return [Message.from_stored(record) for record in records]


# -- arguments --------------------------------------------------------------------------------


def check_scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise TypeError(f"expected a Scope, got {type(scope).__name__}")
    return scope


def check_batch(messages: Sequence[Message]) -> list[Message]:
    """The batch as a list; raises TypeError for a non-message, DuplicateMessage for a repeated id."""
    if isinstance(messages, (str, bytes, Message)) or not isinstance(messages, Sequence):
        raise TypeError("append takes a sequence of Message")
    batch = list(messages)
    seen: set[str] = set()
    for message in batch:
        if not isinstance(message, Message):
            raise TypeError(f"append takes Message values, got {type(message).__name__}")
        if message.id in seen:
            raise DuplicateMessage(f"message id {message.id!r} appears twice in one append")
        seen.add(message.id)
    return batch


def check_window(after_seq: int | None, last: int | None) -> None:
    if after_seq is not None and (not isinstance(after_seq, int) or isinstance(after_seq, bool)):
        raise TypeError("after_seq must be an int or None")
    if last is not None and (not isinstance(last, int) or isinstance(last, bool) or last < 0):
        raise ValueError("last must be a non-negative int or None")


def check_int(value: object, what: str, *, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value


def check_prune_arguments(scope: Scope, through_seq: object, summary: object, expected_version: object) -> None:
    """Shape checks of a prune request, made before anything is read."""
    check_int(expected_version, "expected_version", minimum=0)
    if summary is not None and not isinstance(summary, Message):
        raise TypeError(f"summary must be a Message or None, got {type(summary).__name__}")
    if not isinstance(through_seq, int) or isinstance(through_seq, bool) or through_seq < 1:
        raise InvalidPrune(f"through_seq must be the seq of a live message of {scope}, got {through_seq!r}")


def check_expected_version(expected: int | None) -> int | None:
    return None if expected is None else check_int(expected, "expected_version", minimum=0)


def check_kv_value(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a KV value must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError("a KV value must not contain the NUL character (it cannot be stored portably)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a KV value must be valid Unicode text (it holds a lone surrogate)") from None
    return value


def check_fence(fence: object, *, kv_scope: Scope | None = None, key: str | None = None) -> Fence | None:
    """``fence`` checked for shape; for a KV write, its lease must be another key of the same scope."""
    if fence is None:
        return None
    if not isinstance(fence, Fence):
        raise TypeError(f"fence must be a Fence or None, got {type(fence).__name__}")
    check_scope(fence.scope)
    validate_key(fence.key, what="fence lease key")
    if kv_scope is not None and (fence.scope != kv_scope or fence.key == key):
        raise ValueError("a fenced KV write must be to another key of the lease's own scope")
    return fence


def check_commit(
    writes: object, cursor: object, fence: object
) -> tuple[list[KVWrite], CursorMove | None, Fence | None]:
    """``KVStore.commit``'s arguments checked for shape (nothing is read): keys and values as
    ``put`` takes them, each key once, the fence's lease not among the written keys."""
    if isinstance(writes, (str, bytes, KVWrite)) or not isinstance(writes, Sequence):
        raise TypeError("commit takes a sequence of KVWrite")
    checked: list[KVWrite] = []
    seen: set[tuple[str, str]] = set()
    for write in writes:
        if not isinstance(write, KVWrite):
            raise TypeError(f"commit takes KVWrite values, got {type(write).__name__}")
        scope = check_scope(write.scope)
        key = validate_key(write.key)
        value = None if write.value is None else check_kv_value(write.value)
        expected = check_expected_version(write.expected_version)
        if (scope.key(), key) in seen:
            raise ValueError(f"{key} in {scope} is written twice in one commit")
        seen.add((scope.key(), key))
        checked.append(KVWrite(scope, key, value, expected))
    if cursor is not None:
        if not isinstance(cursor, CursorMove):
            raise TypeError(f"cursor must be a CursorMove or None, got {type(cursor).__name__}")
        check_scope(cursor.scope)
        cursor = CursorMove(cursor.scope, validate_key(cursor.consumer, what="consumer name"),
                            check_int(cursor.position, "cursor position", minimum=0), cursor.expected)
        if cursor.expected is not ... and cursor.expected is not None:
            check_int(cursor.expected, "expected position")
    fence = check_fence(fence)
    if fence is not None and (fence.scope.key(), fence.key) in seen:
        raise ValueError("a commit must not write the lease that fences it")
    return checked, cursor, fence


def check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, got {type(prefix).__name__}")
    return prefix


def check_document_id(document_id: object) -> str:
    return validate_key(document_id, what="archive document id")


def check_ids(ids: Sequence[str]) -> list[str]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError("ids must be a sequence of message ids")
    out: dict[str, None] = {}
    for value in ids:
        if not isinstance(value, str):
            raise TypeError(f"message ids are strings, got {type(value).__name__}")
        out.setdefault(value, None)
    return list(out)


# -- archive documents ------------------------------------------------------------------------


def document_to_record(document: ArchiveDocument) -> dict[str, Any]:
    if not isinstance(document, ArchiveDocument):
        raise TypeError(f"expected an ArchiveDocument, got {type(document).__name__}")
    check_document_id(document.id)
    for what in ("session", "summary", "title"):
        if not isinstance(getattr(document, what), str):
            raise TypeError(f"archive document {what} must be a string")
    if not isinstance(document.metadata, Mapping):
        raise TypeError("archive document metadata must be a mapping")
    if not isinstance(document.created_at, datetime) or document.created_at.tzinfo is None:
        raise ValueError("archive document created_at must be a timezone-aware datetime")
    messages = list(document.messages)
    if not all(isinstance(m, Message) for m in messages):
        raise TypeError("archive document messages must be Message values")
    record = {
        "id": document.id,
        "seq": document.seq,
        "session": document.session,
        "title": document.title,
        "summary": document.summary,
        "created_at": document.created_at.isoformat(),
        "metadata": dict(document.metadata),
        "messages": [m.to_record() for m in messages],
    }
    try:
        json.dumps(record["metadata"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"archive document metadata must be JSON values: {exc}") from None
    return record


def document_from_record(record: Mapping[str, Any]) -> ArchiveDocument:
    return ArchiveDocument(
        id=record["id"],
        seq=record["seq"],
        session=record["session"],
        title=record.get("title", ""),
        summary=record["summary"],
        created_at=datetime.fromisoformat(record["created_at"]),
        metadata=dict(record.get("metadata") or {}),
        messages=tuple(Message.from_stored(m) for m in record.get("messages", ())),
    )



#: The keys ``document_to_record`` writes before "messages" (its last key).
_HEAD_KEYS = frozenset({"id", "seq", "session", "title", "summary", "created_at", "metadata"})


def summary_from_head(head: str | None) -> ArchiveDocument | None:
    """The document without its messages, from the JSON text before ``,"messages":[``; None
    when that text is not exactly the head ``document_to_record`` writes.

    ``head`` is cut at the first ``,"messages":[`` of the record's JSON. Inside a JSON string a
    quote is always escaped, so that sequence is structural: either the top-level key (the head
    then holds every other key, and closing it with ``}`` gives valid JSON) or a key nested in
    ``metadata`` (the head then leaves an object open and does not decode), never a false match.
    """
    if not head:
        return None
    try:
        record = json.loads(head + "}")
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(record, dict) or record.keys() != _HEAD_KEYS:
        return None
    try:
        return document_from_record(record)
    except (KeyError, TypeError, ValueError):
        return None
