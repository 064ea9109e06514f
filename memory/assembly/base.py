"""The provider contract of context assembly.

A *provider* turns one memory tier into one *section* of the system prompt::

    class MemoryProvider(ABC):
        name: str                       # the section's name in the token account
        def provide(self, ctx: AssemblyContext) -> Section | None: ...

``provide`` reads what it needs through ``ctx`` (stores, config, who is talking), renders
well-formed XML with ``memory.assembly.xml``, stays within its own token budget, and returns
None when its tier is off or has nothing to say. Providers carry no numeric priority: the
assembler runs them in the order of its pipeline list (core memory, archive summaries, pruned
catalog), then the supplement providers (e.g. ``<available_experiences>``) in theirs.
Providers must not write anything: assembly is read-only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

from memory.config import MemoryConfig
from memory.memo import Memo
from memory.scopes import AgentScope, CompositeScope, Scope, SessionScope, UserScope
from memory.stores.base import MemoryStoreBundle
from memory.tokens import count_text


@dataclass(frozen=True, slots=True)
class SectionPart:
    """One element of a section that holds several (a core memory file, the archive's recall or
    its summaries), for whoever shows the section part by part. ``key`` names it (the file name
    or the XML tag), ``text`` is exactly that element as it stands in the section's text,
    ``tokens`` its own count, ``items`` how many things it holds."""

    key: str
    text: str
    tokens: int
    items: int

    @classmethod
    def of(cls, *, key: str, text: str, items: int) -> SectionPart:
        return cls(key=key, text=text, tokens=count_text(text), items=items)


def joined_tokens(parts: Sequence[SectionPart]) -> int:
    """Tokens of the parts' texts joined by newlines (a section's ``text``), from their own counts.

    Exact, not an estimate: the tokenizer first cuts text into pieces and no token crosses a
    piece, and a newline after an element's closing ">" joins that ">" piece (">\n") while the
    next element's "<" begins a piece of its own. So each join changes the count by
    count(">\n") - count(">"), whatever the elements hold. Parts that are not elements are
    counted joined, as they are.
    """
    return elements_tokens([(part.text, part.tokens) for part in parts], separator="\n")


def elements_tokens(counted: Sequence[tuple[str, int]], *, separator: str, head: str = "") -> int:
    """Tokens of ``head`` (plain text, may be empty) and the texts of ``counted`` ((text, its
    tokens) pairs) joined by ``separator``, a run of newlines: exact, for the reason
    ``joined_tokens`` gives, when every text is an element ("<...>") closed after a letter or
    digit. A head is counted with the separator after it (newlines end the piece they follow, and
    "<" begins one). Anything else is counted joined."""
    texts = [text for text, _ in counted]
    if separator.strip("\n") or not all(_closes_plainly(text) for text in texts):
        return count_text(separator.join([head, *texts] if head else texts))
    if not counted:
        return count_text(head)
    total = sum(tokens for _, tokens in counted) + (len(counted) - 1) * _join_cost(separator)
    return total + (count_text(head + separator) if head else 0)


def _closes_plainly(text: str) -> bool:
    """An element whose closing ">" follows a letter or digit: "_>" or "->" would be one piece
    with the newline after it, and the join would cost another count."""
    return len(text) > 2 and text[0] == "<" and text[-1] == ">" and text[-2].isascii() and text[-2].isalnum()


@lru_cache(maxsize=8)
def _join_cost(separator: str = "\n") -> int:
    return count_text(">" + separator) - count_text(">")


@dataclass(frozen=True, slots=True)
class Section:
    """One rendered section of the system prompt.

    ``name`` is its line in the token account (e.g. "core memory"), ``tag`` its outermost
    XML tag (informational when a section holds several elements), ``text`` the rendered XML,
    ``tokens`` the token count of ``text``, ``items`` how many things it holds (files,
    documents, catalog entries). ``parts``, when the section is made of several elements, are
    those elements in order (their texts joined by newlines are ``text``); empty otherwise.
    """

    name: str
    tag: str
    text: str
    tokens: int
    items: int
    parts: tuple[SectionPart, ...] = ()

    @classmethod
    def of(cls, *, name: str, tag: str, text: str, items: int, parts: tuple[SectionPart, ...] = ()) -> Section:
        """A section whose token count is computed from ``text``."""
        return cls(name=name, tag=tag, text=text, tokens=count_text(text), items=items, parts=parts)


@dataclass(frozen=True, slots=True)
class AssemblyContext:
    """Everything a provider may look at for one turn. Read-only by contract.

    ``live_seqs`` holds the seqs of the live (non-summary) session messages the assembler
    read for this turn, and ``first_live_seq`` the first of them (exact when the whole live
    session was read, else the first of the window read). Pruned catalog entries at or after
    ``first_live_seq`` belong to a cleanup that has not committed: the messages are still in
    the session. ``archive_scope`` is where this agent's archive documents for this user live.
    """

    session: SessionScope
    config: MemoryConfig
    stores: MemoryStoreBundle
    agent: str
    user: str | None = None
    live_seqs: frozenset[int] = field(default_factory=frozenset)
    first_live_seq: int | None = None
    archive_scope: Scope | None = None
    query: str | None = None
    participants: tuple[str, ...] = ()  # the people's names, left out of recall's query
    #: Recall is sent with the latest user message, not in the system message (the assembler's
    #: ``recall_placement``): what stays in the system message must not depend on it.
    recall_in_message: bool = False

    def resolved_archive_scope(self) -> Scope:
        """``archive_scope`` if given; else the agent+user composite (the agent's own when no user)."""
        if self.archive_scope is not None:
            return self.archive_scope
        if self.user is None:
            return AgentScope(self.agent)
        return CompositeScope(AgentScope(self.agent), UserScope(self.user))


class MemoryProvider(ABC):
    """Renders one tier into a Section. Subclasses set ``name`` and implement ``provide``."""

    name: ClassVar[str]

    @abstractmethod
    def provide(self, ctx: AssemblyContext) -> Section | None:
        """The section for this turn, or None when the tier is off or empty.

        Must not write to any store, must return well-formed XML whatever the stored content,
        and must keep ``Section.tokens`` within the provider's budget.
        """


class RenderMemo:
    """What was rendered from which inputs, for the most recent keys (see memory.memo).

    Assembly runs every turn over inputs that rarely change (the same core memory files, archive
    summaries, catalog entries and session messages as the turn before), and rendering and
    counting them is most of its cost. A provider stores its result under a key (e.g. the
    session) together with the inputs it was computed from; ``get`` returns it only when the
    inputs given now are equal to those (identical objects are equal at once), so a change in
    any input renders afresh.
    """

    def __init__(self, size: int = 256) -> None:
        self._memo = Memo(size)

    def get(self, key: Hashable, inputs: Any, default: Any = None) -> Any:
        entry = self._memo.get(key)
        if entry is None:
            return default
        stored, value = entry
        return value if stored is inputs or stored == inputs else default

    def put(self, key: Hashable, inputs: Any, value: Any) -> None:
        self._memo.put(key, (inputs, value))

    def clear(self) -> None:
        self._memo.clear()

    def __len__(self) -> int:
        return len(self._memo)
