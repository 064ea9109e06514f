import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.assembly.governance import GovernancePolicy, ReasoningPolicy, govern, redact
from memory.messages import Message, ToolCall
from memory.tokens import compute_message_tokens, count_text
from memory.transcript import validate_transcript

SECRETS = {
    "api_key": "sk-proj-abcdefghijklmnop1234567890",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_" + "a1" * 18,
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc==\n-----END RSA PRIVATE KEY-----",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_redacts_each_kind(kind):
    text, count = redact(f"before {SECRETS[kind]} after")
    assert count == 1
    assert SECRETS[kind] not in text
    assert text == f"before [REDACTED:{kind}] after"


def test_bearer_keeps_the_scheme():
    text, count = redact("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig")
    assert count == 1
    assert text == "Authorization: Bearer [REDACTED:bearer_token]"


def test_private_key_without_end_marker_is_redacted_to_the_end_of_the_block():
    text, _ = redact("key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nthen prose")
    assert "MIIEvQ" not in text and "[REDACTED:private_key]" in text


def test_ordinary_text_is_untouched():
    text = "ask-me later; sk-short; AKIA123; the bearer of news"
    assert redact(text) == (text, 0)


def _chain():
    return [
        Message(role="user", content="first", seq=1),
        Message(role="assistant", content="a", reasoning_content="old thought", seq=2),
        Message(role="user", content="second", seq=3),
        Message(
            role="assistant",
            content=None,
            reasoning_content="current thought",
            tool_calls=(ToolCall("c1", "shell", json.dumps({"env": "KEY=" + SECRETS["api_key"]})),),
            seq=4,
        ),
        Message(role="tool", content="word " * 5000, tool_call_id="c1", seq=5),
    ]


def test_default_policy_clips_drops_stale_reasoning_and_redacts():
    messages = _chain()
    out, report = govern(messages, policy=GovernancePolicy(max_tool_result_tokens=100))
    validate_transcript(out)
    assert [m.id for m in out] == [m.id for m in messages]
    assert out[1].reasoning_content is None  # before the last user message: stale
    assert out[3].reasoning_content == "current thought"
    assert SECRETS["api_key"] not in out[3].tool_calls[0].arguments_json
    assert json.loads(out[3].tool_calls[0].arguments_json) == {"env": "KEY=[REDACTED:api_key]"}
    assert count_text(out[4].content) <= 100
    assert "clipped" in out[4].content
    assert out[4].tokens == compute_message_tokens(out[4])
    assert report.clipped == 1 and report.reasoning_dropped == 1 and report.redactions == 1
    assert out[0] is messages[0]  # untouched messages are not copied
    assert messages[4].content == "word " * 5000 and messages[1].reasoning_content == "old thought"  # input unchanged


def test_drop_all_and_keep_all():
    out, _ = govern(_chain(), policy=GovernancePolicy(reasoning=ReasoningPolicy.DROP_ALL))
    assert all(m.reasoning_content is None for m in out)
    out, _ = govern(
        _chain(), policy=GovernancePolicy(reasoning="keep_all", redact_secrets=False, max_tool_result_tokens=None)
    )
    assert [m.reasoning_content for m in out] == [m.reasoning_content for m in _chain()]
    assert SECRETS["api_key"] in out[3].tool_calls[0].arguments_json
    assert out[4].content == "word " * 5000


def test_too_small_clip_limit_is_refused():
    with pytest.raises(ValueError):
        GovernancePolicy(max_tool_result_tokens=3)


def test_secret_is_redacted_before_clipping():
    content = "x " * 30 + SECRETS["api_key"] + " y" * 400
    out, _ = govern(
        [
            Message(role="assistant", tool_calls=(ToolCall("c", "t", "{}"),)),
            Message(role="tool", content=content, tool_call_id="c"),
        ],
        policy=GovernancePolicy(max_tool_result_tokens=40),
    )
    assert "sk-proj" not in out[1].content


@given(st.lists(st.text(max_size=60), max_size=6), st.sampled_from(list(ReasoningPolicy)))
def test_governance_never_changes_structure(texts, reasoning):
    messages = []
    for index, text in enumerate(texts):
        messages.append(Message(role="user", content=text))
        messages.append(
            Message(
                role="assistant",
                content=text,
                reasoning_content=text,
                tool_calls=(ToolCall(f"c{index}", "t", json.dumps({"q": text})),),
            )
        )
        messages.append(Message(role="tool", content=text * 20, tool_call_id=f"c{index}"))
    out, _ = govern(messages, policy=GovernancePolicy(max_tool_result_tokens=16, reasoning=reasoning))
    validate_transcript(out)
    assert [(m.id, m.role, m.call_ids, m.tool_call_id) for m in out] == [
        (m.id, m.role, m.call_ids, m.tool_call_id) for m in messages
    ]
    for message in out:
        for call in message.tool_calls:
            json.loads(call.arguments_json)


def test_a_message_is_governed_afresh_when_it_differs_under_the_same_id():
    policy = GovernancePolicy()
    clean = Message(role="user", content="nothing secret here", id="m-1", seq=1)
    out, report = govern([clean], policy=policy)
    assert out[0] is clean and report.redactions == 0
    # Same id, other content (a different store, a rewritten row): not the governed copy of the first.
    leaky = Message(role="user", content=f"key {SECRETS['api_key']}", id="m-1", seq=1)
    out, report = govern([leaky], policy=policy)
    assert report.redactions == 1 and SECRETS["api_key"] not in out[0].content
    # And the first again: unchanged, the same object as given.
    again = Message(role="user", content="nothing secret here", id="m-1", seq=1)
    out, report = govern([again], policy=policy)
    assert out[0] is again and report.redactions == 0
    # Another policy on the same message is its own entry.
    out, report = govern([leaky], policy=GovernancePolicy(redact_secrets=False))
    assert out[0] is leaky and report.redactions == 0


def test_repeated_governing_reports_the_same_and_counts_stay_exact():
    policy = GovernancePolicy(max_tool_result_tokens=100)
    messages = [Message(role=m.role, content=m.content, reasoning_content=m.reasoning_content,
                        tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, seq=m.seq,
                        tokens=compute_message_tokens(m)) for m in _chain()]
    first = govern(messages, policy=policy)
    second = govern(messages, policy=policy)
    assert first == second
    out, report = second
    assert report.reasoning_dropped == 1 and report.clipped == 1 and report.redactions == 1
    assert all(m.tokens == compute_message_tokens(m) for m in out)
