"""Synthetic conversations for the benchmarks: legal sessions with tool chains, seeded.

A history is a run of turns: a user message, then zero to three tool rounds (an assistant
message with one call or 2-4 parallel calls, then one tool result per call, in shuffled order,
as real servers return them), then a final assistant answer with reasoning. Text is random
pseudo-words, so the tokenizer's text cache does not turn repeated strings into free hits.

Two size profiles: ``large`` (tool outputs up to ~1,200 words: the trim workload, where
message sizes vary a lot) and ``small`` (chat-sized messages: the store, growth, assembly and
cleanup workloads, which need 100k messages to build in seconds).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from memory.messages import Message, ToolCall
from memory.tokens import with_tokens

_SYLLABLES = (
    "ka lo mi ne ra to su vi de po an el or is un ba ce fu gi ho ju ke li mo nu pa qui re sa te "
    "ul va we xo ya ze tion ment ing er ly al"
).split()
TOOLS = ("search", "fetch_page", "read_file", "run_query", "lookup_user")
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Profile:
    user: tuple[int, int]
    call_content: tuple[int, int]
    call_reasoning: tuple[int, int]
    arguments: tuple[int, int]
    result: tuple[int, int]
    answer: tuple[int, int]
    answer_reasoning: tuple[int, int]
    tool_turn_share: float = 0.6
    parallel_share: float = 0.35


PROFILES = {
    "large": Profile(
        user=(8, 120),
        call_content=(0, 30),
        call_reasoning=(10, 60),
        arguments=(3, 12),
        result=(20, 1200),
        answer=(30, 300),
        answer_reasoning=(20, 120),
    ),
    "small": Profile(
        user=(4, 30),
        call_content=(0, 8),
        call_reasoning=(4, 16),
        arguments=(2, 6),
        result=(5, 60),
        answer=(8, 50),
        answer_reasoning=(4, 20),
    ),
}


class _Words:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.vocabulary = [
            "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(4000)
        ]

    def text(self, bounds: tuple[int, int], *, log_scale: bool = False) -> str:
        low, high = bounds
        if log_scale and low > 0:
            count = int(round(low * (high / low) ** self.rng.random()))
        else:
            count = self.rng.randint(low, high)
        return " ".join(self.rng.choices(self.vocabulary, k=count))


def chat_history(*, count: int, seed: int = 7, profile: str = "large", counted: bool = True) -> list[Message]:
    """``count`` messages forming a legal transcript (whole units only, ends on a unit boundary).

    ``counted`` fills ``Message.tokens`` (as the stores do at append); seqs are left unset.
    """
    p = PROFILES[profile]
    rng = random.Random(seed)
    words = _Words(rng)
    out: list[Message] = []
    clock = 0
    call_number = 0

    def at() -> datetime:
        nonlocal clock
        clock += 1
        return _EPOCH + timedelta(seconds=clock)

    def add(unit: list[Message]) -> bool:
        if len(out) + len(unit) > count:
            return False
        out.extend(unit)
        return True

    while len(out) < count:
        if not add([Message(role="user", content=words.text(p.user), created_at=at())]):
            break
        rounds = rng.choice((1, 1, 2, 3)) if rng.random() < p.tool_turn_share else 0
        stop = False
        for _ in range(rounds):
            width = rng.randint(2, 4) if rng.random() < p.parallel_share else 1
            calls = []
            for _ in range(width):
                call_number += 1
                arguments = json.dumps({"query": words.text(p.arguments), "limit": rng.randint(1, 20)})
                calls.append(ToolCall(id=f"call_{call_number:07d}", name=rng.choice(TOOLS), arguments_json=arguments))
            content = words.text(p.call_content) or None
            call_message = Message(
                role="assistant",
                content=content,
                reasoning_content=words.text(p.call_reasoning),
                tool_calls=tuple(calls),
                created_at=at(),
            )
            results = [
                Message(
                    role="tool",
                    content=words.text(p.result, log_scale=True),
                    tool_call_id=call.id,
                    name=call.name,
                    created_at=at(),
                )
                for call in calls
            ]
            rng.shuffle(results)
            if not add([call_message, *results]):
                stop = True
                break
        if stop:
            break
        answer = Message(
            role="assistant",
            content=words.text(p.answer),
            reasoning_content=words.text(p.answer_reasoning),
            created_at=at(),
        )
        if not add([answer]):
            break
    # Fill the last few slots with single messages (each its own unit) to hit ``count`` exactly.
    while len(out) < count:
        role = "user" if not out or out[-1].role != "user" else "assistant"
        out.append(Message(role=role, content=words.text(p.user), created_at=at()))
    if counted:
        out = [with_tokens(m) for m in out]
    return out


def numbered(messages: list[Message], *, start: int = 1) -> list[Message]:
    """The messages with seqs ``start, start + 1, ...`` (as a store would have given them)."""
    return [replace(m, seq=start + i) for i, m in enumerate(messages)]


# -- peers' formats ----------------------------------------------------------------------------


def to_langchain(messages: list[Message]) -> list:
    """The same messages as langchain-core messages, with ``id`` = the Modex id (for mapping back)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out = []
    for m in messages:
        if m.role == "user":
            out.append(HumanMessage(content=m.content or "", id=m.id))
        elif m.role == "system":
            out.append(SystemMessage(content=m.content or "", id=m.id))
        elif m.role == "tool":
            out.append(ToolMessage(content=m.content or "", tool_call_id=m.tool_call_id, name=m.name, id=m.id))
        else:
            extra = {"reasoning_content": m.reasoning_content} if m.reasoning_content else {}
            calls = [
                {"name": c.name, "args": json.loads(c.arguments_json), "id": c.id, "type": "tool_call"}
                for c in m.tool_calls
            ]
            out.append(AIMessage(content=m.content or "", tool_calls=calls, additional_kwargs=extra, id=m.id))
    return out
