"""What the archive index holds and returns: an archived message with where it came from, a
search hit, and the handles ("<document seq>.<message seq>") a model quotes to read around one.
``memory.retrieval.index`` builds and searches them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from memory.messages import KIND_COMPACT_SUMMARY, Message

#: Kinds of message that hold nothing said: the compact summary (a digest, archived separately)
#: and the marker of a failed turn (an error text, not a reply).
UNSEARCHED_KINDS = frozenset({KIND_COMPACT_SUMMARY, "turn_failed"})

_HANDLE = re.compile(r"^\s*#?(\d{1,18})\.(\d{1,18})\s*$")


class InvalidHandle(ValueError):
    """A handle that is not ``<document seq>.<message seq>``."""


def parse_handle(handle: object) -> tuple[int, int]:
    match = _HANDLE.match(str(handle)) if isinstance(handle, str | int | float) else None
    if match is None:
        raise InvalidHandle(f"a handle looks like '12.37' (archive document 12, message 37), not {handle!r}")
    return int(match.group(1)), int(match.group(2))


def message_text(message: Message) -> str:
    """What of a message is searched and shown: its content, and the tools it called by name."""
    parts = [message.content or ""]
    if message.tool_calls:
        parts.append("; ".join(f"called {call.name}({call.arguments_json})" for call in message.tool_calls))
    return "\n".join(p for p in parts if p)


def searchable(message: Message) -> bool:
    return message.kind not in UNSEARCHED_KINDS and bool(message_text(message).strip())


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    """One archived message, with where it came from."""

    document_id: str
    document_seq: int
    session: str  # the session scope key of the conversation
    seq: int  # the message's seq in that session
    role: str
    name: str | None
    created_at: datetime
    text: str
    message_id: str
    document_title: str = ""
    #: Tokens of ``text`` as counted when the message was stored (``memory.tokens.content_tokens``;
    #: None: not known that way), so a message recalled on many turns is not counted again on each.
    text_tokens: int | None = None

    @property
    def handle(self) -> str:
        return f"{self.document_seq}.{self.seq}"

    @property
    def speaker(self) -> str:
        """Who said it: the role, or a tool result's tool name."""
        return self.name if self.role == "tool" and self.name else self.role

    @property
    def conversation(self) -> str:
        """The conversation's id (the session scope key without its kind)."""
        return self.session.split(":", 1)[1] if ":" in self.session else self.session


@dataclass(frozen=True, slots=True)
class MessageHit:
    """A search result: the message, its fused score, and what each ranking said of it."""

    message: ArchivedMessage
    score: float  # reciprocal rank fusion; comparable only within one result list
    words: float | None = None  # BM25 score, when the words matched
    similarity: float | None = None  # cosine similarity, when the vectors took part
    matched: tuple[str, ...] = ()  # the query's words found in the message
    #: The turns right before and right after it in its conversation, nearest first (as many
    #: on each side as the search's ``window`` asked; a window stops at an excluded turn).
    before: tuple[ArchivedMessage, ...] = ()
    after: tuple[ArchivedMessage, ...] = ()

    @property
    def previous(self) -> ArchivedMessage | None:
        return self.before[0] if self.before else None

    @property
    def following(self) -> ArchivedMessage | None:
        return self.after[0] if self.after else None

    @property
    def partner(self) -> ArchivedMessage | None:
        """The other half of its exchange: the turn after a question or a user's message (what
        answered it), else the turn before an assistant's message (what it answered). An answer is
        most often next to the words that match: "Which book did you recommend?" matches the
        request, and the title is in the reply."""
        message = self.message
        if message.role == "user" or message.text.rstrip().endswith("?"):
            return self.following
        return self.previous if message.role == "assistant" else None

    def nearby(self) -> tuple[ArchivedMessage, ...]:
        """Its neighbours in the order they most likely bear on it: the partner, then the turns
        nearest to it, the one after first at each distance (a conversation goes on from what
        matched: the answer to "what did you sell?" is often the second turn after it)."""
        partner = self.partner
        out = [partner] if partner is not None else []
        for distance in range(max(len(self.before), len(self.after))):
            for side in (self.after, self.before):
                if distance < len(side) and side[distance] is not partner:
                    out.append(side[distance])
        return tuple(out)
