"""ContextAssembler: builds one model request from instructions, memory and the session.

The request, in order:

1. one system message: the agent's instructions, then the memory sections in pipeline order
   (core memory → archive → pruned catalog), then the supplement sections (e.g.
   ``<available_experiences>``), separated by blank lines;
2. the tool schemas (sent beside the messages; counted as the "tools" section);
3. the session's newest messages that fit, repaired and passed through governance.

With ``recall_placement="message"`` the archive's recall (``<archive_recall>``, chosen anew
for each user message) is sent at the head of the latest user message instead of in the system
message, and the system message stays the same from turn to turn. A server that caches the
prompt's prefix (llama.cpp, Ollama, vLLM) then reads again only from the previous user message on (sent
without its recall now), where recall in the system message makes it read the whole
conversation again on every turn with archived history. The archive's summaries then get a room
of their own (what recall may take at most is kept for it), so they do not change with recall
either. The token account is the same either way, recall being part of the archive section,
except that a few tokens are kept aside for the join when the window must cut the messages.

Assembly is read-only: nothing is written to any store, so the persisted session is the same
before and after. It ends by dispatching CONTEXT_ASSEMBLED with the token account the chat
meter shows: one line per section (system, each memory/supplement section, tools, messages)
plus the total against the window and the compression threshold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory.assembly.archive import RECALL_TAG, ArchiveProvider
from memory.assembly.archive import SECTION_NAME as ARCHIVE_SECTION
from memory.assembly.base import (
    AssemblyContext,
    MemoryProvider,
    RenderMemo,
    Section,
    SectionPart,
    elements_tokens,
    joined_tokens,
)
from memory.assembly.core import CoreMemoryProvider
from memory.assembly.governance import GovernancePolicy, GovernanceReport
from memory.assembly.pruned import PrunedProvider
from memory.assembly.window import WindowTooSmall, read_tail, select
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from memory.hooks import ContextAssembled, MemoryHookDispatcher, MemoryHookPoint, SectionAccount
from memory.messages import Message
from memory.retrieval.service import Retrieval
from memory.scopes import Scope, SessionScope
from memory.stores.base import MemoryStoreBundle
from memory.threads import run_blocking
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, count_text
from memory.transcript import Repair

SYSTEM = "system"
TOOLS = "tools"
MESSAGES = "messages"
SECTION_SEPARATOR = "\n\n"
#: Where the archive's recall goes: in the system message, in the seed's order of sections (the
#: default), or at the head of the latest user message (``RECALL_BESIDE_MESSAGE``).
RECALL_IN_SYSTEM = "system"
RECALL_BESIDE_MESSAGE = "message"
RECALL_PLACEMENTS = (RECALL_IN_SYSTEM, RECALL_BESIDE_MESSAGE)
#: Tokens kept aside for recall's move into a message: the count of the text joined to the
#: message may differ from the two counts by a piece at the join.
_JOIN_SLACK = 4

# Room left for the model's reply when the caller does not say: MemoryConfig.reply_reserve (an
# eighth of the window, at most 1024 tokens), the figure its budget checks count with.


class AssemblyError(Exception):
    """Base of the errors context assembly raises on purpose."""


class ContextOverflow(AssemblyError):
    """The fixed parts (instructions, sections, tools) leave no room for the newest message."""


@dataclass(frozen=True, slots=True)
class AssembledContext:
    """One assembled request and its token account.

    ``messages`` are OpenAI wire dicts (system message first, then the session messages'
    ``to_wire()``, the latest user message with the archive's recall at its head when the
    assembler sends recall there); ``tools`` the schemas as given. ``account`` lists every section with its
    tokens and items; ``total_tokens`` is the whole request's count, equal to the sum of the
    account plus ``overhead_tokens`` (message framing, section separators, reply priming).
    ``session_messages`` are the governed copies sent; ``omitted_messages`` counts live
    messages too old for the window; ``truncated`` holds the ids of messages shortened to fit;
    ``messages_read`` is what the store returned (the cost of the turn). ``instructions`` is the
    instruction text that opens the system message (before the sections); ``session_tokens``
    the live session's stored tokens when it was read, the quantity cleanup compares with
    ``threshold`` (it counts every live message, also those too old for the window, and none of
    the instructions, sections or tools).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    sections: tuple[Section, ...]
    account: tuple[SectionAccount, ...]
    total_tokens: int
    overhead_tokens: int
    window: int
    threshold: int
    reply_reserve: int
    session_messages: tuple[Message, ...]
    omitted_messages: int
    truncated: tuple[str, ...]
    repairs: tuple[Repair, ...]
    governance: GovernanceReport
    messages_read: int
    instructions: str = ""
    session_tokens: int = 0

    def figures(self) -> dict[str, Any]:
        """What the meter draws of this context, as the events that report it name it
        (``ContextAssembled`` here, the runtime's ``ContextReady``)."""
        return {"sections": self.account, "total_tokens": self.total_tokens, "window": self.window,
                "threshold": self.threshold, "session_tokens": self.session_tokens}

    def event(self, *, session: SessionScope) -> ContextAssembled:
        """The CONTEXT_ASSEMBLED event for this context."""
        return ContextAssembled(session=session, **self.figures())


def default_pipeline(
    *, catalog: PrunedCatalog, core_caps: Mapping[str, int] | None = None, retrieval: Retrieval | None = None
) -> tuple[MemoryProvider, ...]:
    """The memory pipeline in its fixed order: core memory, the archive (recall and summaries),
    the pruned catalog. Without ``retrieval`` the archive section shows summaries only."""
    return (CoreMemoryProvider(caps=core_caps), ArchiveProvider(retrieval=retrieval), PrunedProvider(catalog=catalog))


def latest_user_text(messages: Sequence[Message]) -> str | None:
    """The text of the last user message (not a compact summary) of ``messages``, if any."""
    for message in reversed(messages):
        if message.role == "user" and not message.is_compact_summary and message.content:
            return message.content
    return None


def _tools_json(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), ensure_ascii=False, separators=(",", ":")) if tools else ""


def tools_tokens(tools: Sequence[Mapping[str, Any]]) -> int:
    """The token cost of the tool schemas, counted as their compact JSON."""
    return count_text(_tools_json(tools))


class ContextAssembler:
    """Assembles requests for any agent over one store bundle.

    ``pipeline`` is the list of memory providers, run in list order (use ``default_pipeline``);
    ``hooks`` receives CONTEXT_ASSEMBLED (None: nobody listens); ``governance`` is the lens
    applied to the session messages; ``reply_reserve`` tokens of the window are kept free for
    the model's answer (default: an eighth of the window, at most 1024); ``recall_placement``
    says where the archive's recall goes (``RECALL_PLACEMENTS``, see the module's docstring).
    """

    def __init__(
        self,
        *,
        stores: MemoryStoreBundle,
        pipeline: Sequence[MemoryProvider],
        hooks: MemoryHookDispatcher | None = None,
        governance: GovernancePolicy | None = None,
        reply_reserve: int | None = None,
        recall_placement: str = RECALL_IN_SYSTEM,
    ) -> None:
        if reply_reserve is not None and reply_reserve < 0:
            raise ValueError("reply_reserve must not be negative")
        if recall_placement not in RECALL_PLACEMENTS:
            known = ", ".join(RECALL_PLACEMENTS)
            raise ValueError(f"recall_placement must be one of {known}, not {recall_placement!r}")
        self._recall_beside_message = recall_placement == RECALL_BESIDE_MESSAGE
        self._stores = stores
        self._pipeline = tuple(pipeline)
        self._hooks = hooks
        self._governance = governance or GovernancePolicy()
        self._reply_reserve = reply_reserve
        # Per session: the counts of the instructions, tools and system text, while those texts
        # are the same as last turn (they change only when memory or the declaration does).
        self._counts = RenderMemo(1024)

    def assemble(
        self,
        *,
        session: SessionScope,
        config: MemoryConfig,
        agent: str,
        user: str | None = None,
        instructions: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        supplements: Sequence[MemoryProvider] = (),
        archive_scope: Scope | None = None,
        participants: Sequence[str] = (),
    ) -> AssembledContext:
        """Build the request for the next model call of ``session`` and dispatch CONTEXT_ASSEMBLED.

        ``supplements`` are extra providers (e.g. experiences) rendered after the memory
        pipeline. Raises ContextOverflow when the instructions, sections and tools leave no
        room for even a truncated newest message. ``participants``: the names of the
        conversation's people (the user's), which archive recall leaves out of its query.
        """
        context = self._build(
            session=session,
            config=config,
            agent=agent,
            user=user,
            instructions=instructions,
            tools=tools,
            supplements=supplements,
            archive_scope=archive_scope,
            participants=participants,
        )
        if self._hooks is not None:
            self._hooks.dispatch(MemoryHookPoint.CONTEXT_ASSEMBLED, context.event(session=session))
        return context

    async def aassemble(
        self,
        *,
        session: SessionScope,
        config: MemoryConfig,
        agent: str,
        user: str | None = None,
        instructions: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        supplements: Sequence[MemoryProvider] = (),
        archive_scope: Scope | None = None,
        note: Callable[[], str | None] | None = None,
        participants: Sequence[str] = (),
    ) -> AssembledContext:
        """``assemble`` for async callers: store reads run on a store thread (memory.threads:
        a thread of their own, not the one every conversation shares), hooks are awaited with
        ``adispatch``. ``note``, if given, is called on that thread first, in the same trip; text
        it returns is added to the instructions after a blank line (the runtime's one-time
        reorientation note, ``memory.hooks.take_reorientation``)."""

        def build() -> AssembledContext:
            text = note() if note is not None else None
            return self._build(
                session=session,
                config=config,
                agent=agent,
                user=user,
                instructions=f"{instructions}\n\n{text}".strip() if text else instructions,
                tools=tools,
                supplements=supplements,
                archive_scope=archive_scope,
                participants=participants,
            )

        context = await run_blocking(build)
        if self._hooks is not None:
            await self._hooks.adispatch(MemoryHookPoint.CONTEXT_ASSEMBLED, context.event(session=session))
        return context

    # -- internals ----------------------------------------------------------------------------

    def reply_reserve(self, config: MemoryConfig) -> int:
        if self._reply_reserve is not None:
            return min(self._reply_reserve, config.context_window // 2)
        return config.reply_reserve

    def _build(
        self,
        *,
        session: SessionScope,
        config: MemoryConfig,
        agent: str,
        user: str | None,
        instructions: str,
        tools: Sequence[Mapping[str, Any]],
        supplements: Sequence[MemoryProvider],
        archive_scope: Scope | None,
        participants: Sequence[str],
    ) -> AssembledContext:
        reserve = self.reply_reserve(config)
        limit = config.context_window - reserve
        tools_json = _tools_json(tools)
        fixed = self._counts.get(("fixed", session.key()), (instructions, tools_json))
        if fixed is None:
            fixed = (count_text(instructions), count_text(tools_json))
            self._counts.put(("fixed", session.key()), (instructions, tools_json), fixed)
        instruction_cost, tool_cost = fixed

        # The tail is read before the providers run (the pruned catalog needs to know which
        # seqs are live), for the largest budget messages could get; sections only shrink it.
        upper = limit - MESSAGE_OVERHEAD - instruction_cost - tool_cost - REPLY_PRIMING
        tail = read_tail(store=self._stores.messages, session=session, budget=upper, policy=self._governance)

        ctx = AssemblyContext(
            session=session,
            config=config,
            stores=self._stores,
            agent=agent,
            user=user,
            live_seqs=tail.live_seqs,
            first_live_seq=tail.first_live_seq,
            archive_scope=archive_scope,
            query=latest_user_text(tail.messages),
            participants=tuple(participants),
            recall_in_message=self._recall_beside_message,
        )
        sections = tuple(
            section for provider in (*self._pipeline, *supplements) if (section := provider.provide(ctx)) is not None
        )

        # The system message's count from its parts' own: recall changes the archive section
        # every turn, and counting the whole message again each time cost more than the recall.
        system_text, system_cost = _system_message(instructions, [(s.text, s.tokens) for s in sections])
        # Recall sent with the latest user message is counted in the system message for the
        # budget, with a little more for the join; the request is counted as sent at the end.
        recall = _recall_part(sections) if self._recall_beside_message else None
        slack = _JOIN_SLACK if recall is not None else 0
        budget = limit - system_cost - slack - tool_cost - REPLY_PRIMING
        try:
            chosen = select(tail, budget=budget)
        except WindowTooSmall as exc:
            raise ContextOverflow(
                f"the context window ({config.context_window} tokens, {reserve} kept for the reply) is too "
                f"small: instructions take {instruction_cost}, sections "
                f"{', '.join(f'{s.name} {s.tokens}' for s in sections) or 'none'}, tools {tool_cost}; {exc}"
            ) from None

        account = (
            SectionAccount(SYSTEM, instruction_cost, 1 if instructions else 0),
            *(SectionAccount(s.name, s.tokens, s.items) for s in sections),
            SectionAccount(TOOLS, tool_cost, len(tools)),
            SectionAccount(MESSAGES, chosen.tokens, len(chosen.messages)),
        )
        total = system_cost + tool_cost + chosen.tokens + REPLY_PRIMING
        wire = [{"role": "system", "content": system_text}] if system_text else []
        wire.extend(m.to_wire() for m in chosen.messages)
        if recall is not None and (moved := _recall_into_message(wire, chosen.messages, recall)) is not None:
            kept = [_without(s, recall) if s.name == ARCHIVE_SECTION else (s.text, s.tokens) for s in sections]
            kept_text, kept_cost = _system_message(instructions, kept)
            wire[:1] = [{"role": "system", "content": kept_text}] if kept_text else []
            total += kept_cost - system_cost + moved
        return AssembledContext(
            messages=wire,
            tools=[dict(t) for t in tools],
            sections=sections,
            account=account,
            total_tokens=total,
            overhead_tokens=total - sum(a.tokens for a in account),
            window=config.context_window,
            threshold=config.threshold,
            reply_reserve=reserve,
            session_messages=chosen.messages,
            omitted_messages=chosen.omitted,
            truncated=chosen.truncated,
            repairs=tail.repairs,
            governance=tail.governance,
            messages_read=tail.read_count,
            instructions=instructions,
            session_tokens=tail.session_tokens,
        )


def _system_message(instructions: str, sections: Sequence[tuple[str, int]]) -> tuple[str, int]:
    """The system message's text (the instructions, then each non-empty section, separated by
    blank lines) and its tokens with the message's framing, counted from the sections' own
    counts; ("", 0) when there is nothing to send."""
    shown = [pair for pair in sections if pair[0]]
    if not instructions and not shown:
        return "", 0
    text = SECTION_SEPARATOR.join(text for text in (instructions, *(text for text, _ in shown)) if text)
    return text, MESSAGE_OVERHEAD + elements_tokens(shown, separator=SECTION_SEPARATOR, head=instructions)


def _recall_into_message(wire: list[dict[str, Any]], messages: Sequence[Message], recall: SectionPart) -> int | None:
    """Put ``recall`` at the head of the latest user message in ``wire`` (which ends with
    ``messages``, the session's) and return the tokens that added; None when no user message was
    sent (the window left it out) and nothing was changed: recall stays in the system message."""
    offset = len(wire) - len(messages)
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role == "user" and not message.is_compact_summary and message.content:
            content = wire[offset + i].get("content")
            if not isinstance(content, str):
                return None
            joined = recall.text + SECTION_SEPARATOR + content
            wire[offset + i] = {**wire[offset + i], "content": joined}
            return count_text(joined) - count_text(content)
    return None


def _recall_part(sections: Sequence[Section]) -> SectionPart | None:
    """The archive section's recall, if this turn recalled anything."""
    for section in sections:
        if section.name == ARCHIVE_SECTION:
            return next((part for part in section.parts if part.key == RECALL_TAG and part.text), None)
    return None


def _without(section: Section, recall: SectionPart) -> tuple[str, int]:
    """The archive ``section``'s text and tokens with ``recall`` left out (its other parts)."""
    rest = [part for part in section.parts if part is not recall]
    return "\n".join(part.text for part in rest), joined_tokens(rest)
