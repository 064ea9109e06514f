"""ContextAssembler: request shape, pipeline order, accounting, window legality, fit, hooks."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from asgiref.sync import sync_to_async

from memory.assembly.alternation import SUMMARY_NOTED
from memory.assembly.assembler import ContextAssembler, ContextOverflow, default_pipeline
from memory.assembly.base import MemoryProvider, Section, elements_tokens
from memory.assembly.governance import GovernancePolicy
from memory.assembly.xml import element
from memory.config import SUBAGENT_PRESET, MemoryConfig
from memory.core_memory import MEMORY, SOUL, USER, core_scope
from memory.hooks import ContextAssembled
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import ArchiveDocument
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, count_text
from memory.transcript import INTERRUPTED_RESULT, validate_transcript

from .helpers import assistant, chain, new_session, parse, timed, user

INSTRUCTIONS = "You are Modex, a careful assistant."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "pruned_lookup",
            "description": "Return a removed message in full by its number.",
            "parameters": {"type": "object", "properties": {"seq": {"type": "integer"}}, "required": ["seq"]},
        },
    }
]
FULL = MemoryConfig(archive_enabled=True, core_enabled=True)


class Experiences(MemoryProvider):
    name = "experiences"

    def provide(self, ctx):
        text = element("available_experiences", "- deploy.md: how deploys went wrong before")
        return Section.of(name=self.name, tag="available_experiences", text=text, items=1)


def make(bundle, catalog, hooks=None, **kwargs):
    return ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog), hooks=hooks, **kwargs)


def full_memory(bundle, catalog, session):
    """Core files, two archive documents, and a session pruned once (catalog + compact summary)."""
    for file, text in ((SOUL, "I am Modex."), (USER, "Name: Ada"), (MEMORY, "- likes tea")):
        bundle.kv.put(core_scope(file=file, agent="default", user="42"), file, text)
    for i in (1, 2):
        bundle.archive.put(
            CompositeScope(AgentScope("default"), UserScope("42")),
            ArchiveDocument(session=session.key(), summary=f"summary {i}", title=f"doc {i}"),
        )
    old = bundle.messages.append(session, timed([user("old question"), assistant("old answer"), *chain()]))
    catalog.write(session, old)
    head = bundle.messages.head(session)
    summary = Message(role="user", content="[compact_summary] Ada asked an old question.", kind=KIND_COMPACT_SUMMARY)
    bundle.messages.prune(session, through_seq=old[-1].seq, summary=summary, expected_version=head.version)
    bundle.messages.append(session, [user("new question"), assistant("new answer"), user("and now?")])


def test_request_order_and_account(bundle, catalog, hooks, assembled_events):
    session = new_session()
    full_memory(bundle, catalog, session)
    context = make(bundle, catalog, hooks).assemble(
        session=session,
        config=FULL,
        agent="default",
        user="42",
        instructions=INSTRUCTIONS,
        tools=TOOLS,
        supplements=[Experiences()],
    )
    names = [a.name for a in context.account]
    assert names == ["system", "core memory", "archive", "pruned catalog", "experiences", "tools", "messages"]
    system = context.messages[0]
    assert system["role"] == "system" and [m["role"] for m in context.messages].count("system") == 1
    text = system["content"]
    positions = [
        text.index(s)
        for s in (
            INSTRUCTIONS,
            "<your_identity>",
            "<user_profile>",
            "<known_facts>",
            "<archive_summaries",
            "<pruned_messages",
            "<available_experiences>",
        )
    ]
    assert positions == sorted(positions)
    parse(text[len(INSTRUCTIONS) :])  # every section is well-formed XML

    live = bundle.messages.read(session)
    sent = context.messages[1:]
    # the compact summary is a user turn: an assistant placeholder keeps the roles alternating
    assert sent[1] == {"role": "assistant", "content": SUMMARY_NOTED}
    assert [m for m in sent if m is not sent[1]] == [m.to_wire() for m in live]
    assert context.messages[1]["content"].startswith("[compact_summary]")
    assert context.tools == TOOLS

    by_name = {a.name: a for a in context.account}
    assert by_name["system"].tokens == count_text(INSTRUCTIONS)
    assert (
        by_name["tools"].tokens == count_text(json.dumps(TOOLS, separators=(",", ":"))) and by_name["tools"].items == 1
    )
    assert by_name["messages"].items == len(live) + 1  # the placeholder after the summary is sent too
    assert by_name["pruned catalog"].items == 4  # the evicted messages, not the live ones
    assert sum(a.tokens for a in context.account) + context.overhead_tokens == context.total_tokens
    assert 0 <= context.overhead_tokens <= 20
    # The system message is counted from its sections' own counts: exactly what counting it whole says.
    system_cost = context.total_tokens - by_name["tools"].tokens - by_name["messages"].tokens - REPLY_PRIMING
    assert system_cost == MESSAGE_OVERHEAD + count_text(text)
    assert context.total_tokens <= FULL.context_window - context.reply_reserve
    assert assembled_events == [
        ContextAssembled(
            session=session,
            sections=context.account,
            total_tokens=context.total_tokens,
            window=FULL.context_window,
            threshold=FULL.threshold,
            session_tokens=context.session_tokens,
        )
    ]
    assert context.session_tokens == bundle.messages.head(session).tokens


def test_disabled_layers_leave_only_what_is_always_on(bundle, catalog):
    session = new_session()
    full_memory(bundle, catalog, session)
    context = make(bundle, catalog).assemble(
        session=session, config=MemoryConfig(preset=SUBAGENT_PRESET), agent="helper", instructions=INSTRUCTIONS
    )
    assert [a.name for a in context.account] == ["system", "pruned catalog", "tools", "messages"]


def test_an_empty_session_without_instructions_sends_nothing(bundle, catalog):
    context = make(bundle, catalog).assemble(session=new_session(), config=MemoryConfig(), agent="default")
    assert context.messages == [] and context.session_messages == ()
    assert [a.tokens for a in context.account] == [0, 0, 0]


def test_window_starts_at_a_legal_position_and_keeps_chains_whole(bundle, catalog):
    session = new_session()
    messages = []
    for i in range(60):
        messages += [user(f"step {i}"), *chain(3, result="r " * 60)]
    bundle.messages.append(session, messages)
    config = MemoryConfig(context_window=2048)
    context = make(bundle, catalog).assemble(session=session, config=config, agent="default", instructions=INSTRUCTIONS)
    sent = context.session_messages
    assert sent[0].role != "tool"
    validate_transcript(sent)
    assert context.omitted_messages > 0 and sent[-1].seq == len(messages)
    assert context.total_tokens <= config.context_window - context.reply_reserve


def test_an_interrupted_chain_is_repaired_in_the_copy_only(bundle, catalog):
    session = new_session()
    stored = bundle.messages.append(session, [user("run it"), *chain(2)[:2]])  # one of two results is missing
    context = make(bundle, catalog).assemble(session=session, config=MemoryConfig(), agent="default")
    validate_transcript(context.session_messages)
    assert context.session_messages[-1].content == INTERRUPTED_RESULT
    assert len(context.repairs) == 1
    assert bundle.messages.read(session) == stored


def test_a_message_larger_than_the_window_is_truncated_in_the_copy(bundle, catalog):
    session = new_session()
    huge = "lorem ipsum dolor " * 20000
    stored = bundle.messages.append(session, [user("hi"), assistant("hello"), user(huge)])
    config = MemoryConfig(context_window=4096)
    context = make(bundle, catalog).assemble(session=session, config=config, agent="default", instructions=INSTRUCTIONS)
    last = context.session_messages[-1]
    assert last.id == stored[-1].id and last.id in context.truncated
    assert "truncated to fit the context window" in last.content and f"message {stored[-1].seq}" in last.content
    assert context.total_tokens <= config.context_window - context.reply_reserve
    assert bundle.messages.read(session)[-1].content == huge


def test_a_huge_tool_chain_at_the_tail_is_shrunk_not_dropped(bundle, catalog):
    session = new_session()
    bundle.messages.append(session, [user("fetch"), *chain(2, result="data " * 30000)])
    config = MemoryConfig(context_window=4096)
    context = make(bundle, catalog, governance=GovernancePolicy(max_tool_result_tokens=None)).assemble(
        session=session, config=config, agent="default"
    )
    validate_transcript(context.session_messages)
    assert [m.role for m in context.session_messages][-3:] == ["assistant", "tool", "tool"]
    assert context.total_tokens <= config.context_window - context.reply_reserve


def test_fixed_parts_larger_than_the_window_raise_a_clear_error(bundle, catalog):
    session = new_session()
    bundle.messages.append(session, [user("hi")])
    with pytest.raises(ContextOverflow, match="too small"):
        make(bundle, catalog).assemble(
            session=session, config=MemoryConfig(context_window=1024), agent="default", instructions="rule " * 2000
        )


def test_governance_shapes_the_copy_never_the_store(bundle, catalog):
    session = new_session()
    call = Message(
        role="assistant", content=None, reasoning_content="old thinking", tool_calls=(ToolCall("c1", "env", "{}"),)
    )
    result = Message(role="tool", content="OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx", tool_call_id="c1")
    stored = bundle.messages.append(session, [user("show env"), call, result, assistant("done"), user("thanks")])
    context = make(bundle, catalog).assemble(session=session, config=MemoryConfig(), agent="default")
    wire = context.messages
    assert "sk-abc" not in json.dumps(wire) and "[REDACTED:api_key]" in wire[2]["content"]
    assert "reasoning_content" not in wire[1]
    assert context.governance.redactions == 1 and context.governance.reasoning_dropped == 1
    assert bundle.messages.read(session) == stored


def test_a_governed_call_leaves_the_session_files_byte_identical(bundle, catalog, store_root):
    if bundle.backend != "file":
        pytest.skip("file backend: the session is files to hash")

    def digest():
        h = hashlib.sha256()
        for path in sorted(p for p in store_root.rglob("*") if p.is_file()):
            h.update(str(path).encode() + b"\0" + path.read_bytes())
        return h.hexdigest()

    session = new_session()
    call = Message(
        role="assistant", content=None, reasoning_content="thinking", tool_calls=(ToolCall("c1", "cat", "{}"),)
    )
    secret = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    bundle.messages.append(session, [user("read key"), call, Message(role="tool", content=secret + " pad" * 5000,
                                                                        tool_call_id="c1"), user("and?")])
    before = digest()
    context = make(bundle, catalog, governance=GovernancePolicy(max_tool_result_tokens=100)).assemble(
        session=session, config=MemoryConfig(), agent="default"
    )
    assert context.governance.clipped == 1 and context.governance.redactions == 1
    assert context.governance.reasoning_dropped == 1
    assert digest() == before


def test_reply_reserve_is_respected(bundle, catalog):
    session = new_session()
    bundle.messages.append(session, [user("word " * 400) for _ in range(20)])
    config = MemoryConfig(context_window=4096)
    context = make(bundle, catalog, reply_reserve=2000).assemble(session=session, config=config, agent="default")
    assert context.reply_reserve == 2000
    assert context.total_tokens <= 4096 - 2000


@pytest.mark.django_db(transaction=True, databases="__all__")  # threaded_bundle may be on 'pg'
async def test_aassemble_dispatches_asynchronously(threaded_bundle, catalog, hooks, assembled_events):
    # threaded_bundle: aassemble reads the stores from a worker thread with its own connection.
    session = new_session()
    await sync_to_async(threaded_bundle.messages.append)(session, [user("hi")])
    assembler = make(threaded_bundle, catalog, hooks)
    context = await assembler.aassemble(session=session, config=MemoryConfig(), agent="default")
    assert context.messages[-1]["content"] == "hi"
    assert len(assembled_events) == 1


def test_one_assembler_sees_every_change_between_turns(bundle, catalog):
    """Sections and counts kept from the turn before are used only while their inputs are the same."""
    session = new_session()
    full_memory(bundle, catalog, session)
    assembler = make(bundle, catalog)

    def turn(**kwargs):
        args = {"session": session, "config": FULL, "agent": "default", "user": "42",
                "instructions": INSTRUCTIONS, "tools": TOOLS, **kwargs}
        context = assembler.assemble(**args)
        assert context == make(bundle, catalog).assemble(**args)  # a fresh assembler agrees
        return context

    first = turn()
    assert turn() == first
    bundle.kv.put(core_scope(file=MEMORY, agent="default", user="42"), MEMORY, "- likes coffee now")
    after_edit = turn().messages[0]["content"]
    assert "likes coffee now" in after_edit and "likes tea" not in after_edit
    bundle.archive.put(CompositeScope(AgentScope("default"), UserScope("42")),
                       ArchiveDocument(session=session.key(), summary="a third summary", title="doc 3"))
    assert "a third summary" in turn().messages[0]["content"]
    older = bundle.messages.read(session)
    catalog.write(session, older[1:3])
    head = bundle.messages.head(session)
    bundle.messages.prune(session, through_seq=older[2].seq, expected_version=head.version, summary=None)
    after_prune = turn()
    assert after_prune.messages[0]["content"] != first.messages[0]["content"]
    assert [a.items for a in after_prune.account if a.name == "pruned catalog"] == [6]
    changed = turn(instructions="Be brief.", tools=[])
    assert changed.messages[0]["content"].startswith("Be brief.")
    assert {a.name: a.tokens for a in changed.account}["tools"] == 0
    assert {a.name: a.tokens for a in changed.account}["system"] == count_text("Be brief.")


@settings(max_examples=500, deadline=None)
@given(
    st.text(max_size=60),
    st.lists(st.tuples(st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True), st.text(max_size=40)),
             max_size=4),
    st.sampled_from(["\n", "\n\n", "\n\n\n"]),
)
def test_a_system_message_counts_as_its_parts_say(head, contents, separator):
    """Instructions of any text, then sections (elements of any legal tag and any content, "a_"
    and "b-" included), joined by newlines: the count from the parts' own counts is the count of
    the whole."""
    texts = [element(tag, text) for tag, text in contents if not tag.lower().startswith("xml")]
    counted = [(text, count_text(text)) for text in texts]
    whole = separator.join([head, *texts] if head else texts)
    assert elements_tokens(counted, separator=separator, head=head) == count_text(whole)
    loose = [("not an element", count_text("not an element")), *counted]
    assert elements_tokens(loose, separator=separator, head=head) == count_text(
        separator.join([head, *(t for t, _ in loose)] if head else [t for t, _ in loose])
    )
