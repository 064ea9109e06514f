"""Role alternation in the request copy: strict chat templates never see two user turns in a row."""

from __future__ import annotations

from memory.assembly.alternation import KIND_PLACEHOLDER, NO_REPLY, SUMMARY_NOTED, alternate_roles
from memory.assembly.assembler import ContextAssembler, default_pipeline
from memory.config import MemoryConfig
from memory.messages import KIND_COMPACT_SUMMARY, Message

from .helpers import assistant, chain, new_session, user


def test_a_placeholder_goes_between_two_user_messages_only():
    summary = Message(role="user", content="[compact_summary] ...", kind=KIND_COMPACT_SUMMARY)
    messages = [summary, user("one"), user("two"), assistant("hi"), *chain(1), user("three")]
    out, inserted = alternate_roles(messages)
    assert inserted == 2
    assert [(m.role, m.content) for m in out[:5]] == [
        ("user", "[compact_summary] ..."),
        ("assistant", SUMMARY_NOTED),
        ("user", "one"),
        ("assistant", NO_REPLY),
        ("user", "two"),
    ]
    assert out[5:] == messages[3:]  # the rest, tool chain included, is untouched
    assert all(m.kind == KIND_PLACEHOLDER and m.seq is None and m.tokens for m in (out[1], out[3]))


def test_an_alternating_transcript_is_returned_as_is():
    messages = [user("a"), assistant("b"), user("c")]
    out, inserted = alternate_roles(messages)
    assert inserted == 0 and out == messages


def test_assembly_sends_alternating_roles_and_persists_nothing(bundle, catalog):
    session = new_session()
    bundle.messages.append(session, [user("first, never answered"), user("second"), assistant("answer")])
    before = [m.to_record() for m in bundle.messages.read(session)]
    assembler = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog))
    context = assembler.assemble(session=session, config=MemoryConfig(), agent="default", instructions="Be brief.")
    assert [m["role"] for m in context.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert context.messages[2]["content"] == NO_REPLY
    assert [m.to_record() for m in bundle.messages.read(session)] == before
