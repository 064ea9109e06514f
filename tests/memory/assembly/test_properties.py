"""Invariants of assembly, for any session and any governance settings (hypothesis).

* the persisted session (and the pruned catalog) is byte-for-byte the same before and after;
* the messages sent pass validate_transcript, never start with a tool result and never hold two
  user messages in a row;
* memory sections come in pipeline order: core memory → archive → pruned catalog;
* the account's sections sum to the total within the counted overhead, under the window.
"""

from __future__ import annotations

import hashlib

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memory.assembly.alternation import KIND_PLACEHOLDER, alternate_roles
from memory.assembly.assembler import ContextAssembler, default_pipeline
from memory.assembly.governance import GovernancePolicy, ReasoningPolicy, govern
from memory.config import SUBAGENT_PRESET, MemoryConfig
from memory.core_memory import MEMORY, SOUL, USER, core_scope
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import ArchiveDocument
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, message_tokens
from memory.transcript import chain_spans, repair_transcript, validate_transcript

from .helpers import HOSTILE, new_session, parse

MEMORY_ORDER = ["core memory", "archive", "pruned catalog"]
SECRETS = (
    "sk-abcdefghijklmnopqrstuvwxyz123456",
    "AKIAIOSFODNN7EXAMPLE",
    "Bearer abcdefghijklmnopqrstuvwxyz",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
)

texts = st.one_of(st.text(max_size=60), st.sampled_from(HOSTILE + SECRETS))
big_texts = st.builds(lambda word, n: word * n, st.sampled_from(["data ", "x", "\u00e9t\u00e9 "]), st.integers(0, 3000))


@st.composite
def transcripts(draw):
    """A stored session: legal units, sometimes ending in an interrupted chain."""
    out: list[Message] = []
    counter = 0
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "chain"]))
        if kind == "user":
            out.append(Message(role="user", content=draw(st.one_of(texts, big_texts))))
        elif kind == "assistant":
            out.append(Message(role="assistant", content=draw(texts), reasoning_content=draw(st.none() | texts)))
        else:
            ids = [f"c{counter + i}" for i in range(draw(st.integers(1, 3)))]
            counter += len(ids)
            out.append(
                Message(
                    role="assistant",
                    content=None,
                    reasoning_content=draw(st.none() | texts),
                    tool_calls=tuple(ToolCall(i, "tool", '{"a": 1}') for i in ids),
                )
            )
            out.extend(Message(role="tool", content=draw(st.one_of(texts, big_texts)), tool_call_id=i) for i in ids)
    if draw(st.booleans()):
        out.append(Message(role="assistant", content=None, tool_calls=(ToolCall(f"c{counter}", "tool", "{}"),)))
    return out


policies = st.builds(
    GovernancePolicy,
    max_tool_result_tokens=st.none() | st.integers(16, 800),
    reasoning=st.sampled_from(list(ReasoningPolicy)),
    redact_secrets=st.booleans(),
)
configs = st.sampled_from(
    [
        MemoryConfig(),
        MemoryConfig(
            context_window=2048,
            archive_enabled=True,
            core_enabled=True,
            pruned_budget_tokens=300,
            archive_budget_tokens=200,
        ),
        MemoryConfig(context_window=16384, archive_enabled=True, core_enabled=True),
        MemoryConfig(context_window=4096, archive_enabled=True),
        MemoryConfig(preset=SUBAGENT_PRESET, context_window=1024, pruned_budget_tokens=200),
    ]
)


def seed_long_term_memory(bundle, user):
    hostile = "\n".join(HOSTILE)
    for file in (SOUL, USER, MEMORY):  # KV stores refuse NUL; the other controls are kept
        text = f"# {file}\n{hostile}\n".replace("\x00", "")
        bundle.kv.put(core_scope(file=file, agent="default", user=user), file, text)
    bundle.archive.put(
        CompositeScope(AgentScope("default"), UserScope(user)),
        ArchiveDocument(session="session:x", summary=hostile, title=HOSTILE[0]),
    )


def snapshot(bundle, session, paths):
    """Everything persisted: the session's records and head, and every file under ``paths``."""
    records = [m.to_record() for m in bundle.messages.read(session, include_deleted=True)]
    head = bundle.messages.head(session)
    digest = hashlib.sha256()
    for root in paths:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return records, (head.version, head.last_seq, head.count, head.tokens), digest.hexdigest()


def touched_paths(store_root, catalog, session, user):
    """The directories a turn of ``session`` could write to, if assembly ever wrote anything:
    the session's, its catalog's, and those of every scope the providers read."""
    scopes = (session, AgentScope("default"), UserScope(user), CompositeScope(AgentScope("default"), UserScope(user)))
    return [store_root.joinpath(*scope.path_parts()) for scope in scopes] + [catalog.directory(session)]


def store(bundle, catalog, session, messages, prune_units):
    stored = bundle.messages.append(session, messages) if messages else []
    spans = chain_spans(stored)
    units = min(prune_units, len(spans) - 1)
    if units > 0:  # prune whole units only, as cleanup's boundary does
        evicted = stored[: spans[units - 1][1]]
        catalog.write(session, evicted)
        head = bundle.messages.head(session)
        summary = Message(role="user", content="[compact_summary] earlier work", kind=KIND_COMPACT_SUMMARY)
        bundle.messages.prune(session, through_seq=evicted[-1].seq, summary=summary, expected_version=head.version)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    messages=transcripts(),
    policy=policies,
    config=configs,
    prune_units=st.integers(0, 4),
    tools=st.sampled_from([(), ({"type": "function", "function": {"name": "t", "parameters": {}}},)]),
)
def test_assembly_invariants(bundle, catalog, store_root, messages, policy, config, prune_units, tools):
    session = new_session()
    user = session.id  # a fresh user per example: its own core files and archive
    seed_long_term_memory(bundle, user)
    store(bundle, catalog, session, messages, prune_units)
    paths = touched_paths(store_root, catalog, session, user)
    before = snapshot(bundle, session, paths)

    assembler = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog), governance=policy)
    context = assembler.assemble(
        session=session, config=config, agent="default", user=user, instructions="Be helpful.", tools=list(tools)
    )

    assert snapshot(bundle, session, paths) == before
    for label, happened in (
        ("pruned catalog shown", any(s.name == "pruned catalog" for s in context.sections)),
        ("older messages omitted", context.omitted_messages > 0),
        ("message truncated to fit", bool(context.truncated)),
        ("transcript repaired", bool(context.repairs)),
        ("governance changed something", context.governance.changed),
    ):
        event(f"{label}: {happened}")

    sent = context.session_messages
    validate_transcript(sent)
    assert not sent or sent[0].role != "tool"
    # strict chat templates: never two user messages in a row, never a placeholder first
    assert all(not (a.role == b.role == "user") for a, b in zip(sent, sent[1:]))
    assert not sent or sent[0].kind != KIND_PLACEHOLDER
    assert context.messages[1:] == [m.to_wire() for m in sent]

    names = [a.name for a in context.account]
    memory_names = [n for n in names if n in MEMORY_ORDER]
    assert memory_names == [n for n in MEMORY_ORDER if n in memory_names]
    assert names[0] == "system" and names[-2:] == ["tools", "messages"]
    system = context.messages[0]["content"]
    tags = [t for t in ("<your_identity>", "<archive_summaries", "<pruned_messages") if t in system]
    assert [system.index(t) for t in tags] == sorted(system.index(t) for t in tags)
    parse("".join(s.text for s in context.sections))

    # The window is a suffix of the session, and it is full: the next older unit would not fit.
    live = bundle.messages.read(session)
    stored_seqs = [m.seq for m in live]
    sent_seqs = [m.seq for m in sent if m.seq is not None]
    assert sent_seqs == stored_seqs[len(stored_seqs) - len(sent_seqs) :]
    if context.omitted_messages and not context.truncated:
        governed, _ = alternate_roles(govern(repair_transcript(live)[0], policy=policy)[0])
        first = next(i for i, m in enumerate(governed) if m.id == sent[0].id)
        start = next(a for a, b in chain_spans(governed) if b == first)
        if governed[start].kind == KIND_PLACEHOLDER:  # never sent first: the unit before comes with it
            start = next(a for a, b in chain_spans(governed) if b == start)
        older = sum(message_tokens(m) for m in governed[start:first])
        assert context.total_tokens + older > config.context_window - context.reply_reserve

    parts = 1 + len(context.sections)
    assert sum(a.tokens for a in context.account) + context.overhead_tokens == context.total_tokens
    assert (
        MESSAGE_OVERHEAD + REPLY_PRIMING - parts
        <= context.overhead_tokens
        <= MESSAGE_OVERHEAD + REPLY_PRIMING + 2 * parts
    )
    assert context.total_tokens <= config.context_window - context.reply_reserve
