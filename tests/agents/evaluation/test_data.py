"""Dataset values: the ids turns are stored under, and the order their dates keep."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from agents.evaluation.data import Session, Turn, message_id, safe_id
from memory.scopes import SessionScope

ID_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def test_valid_ids_are_kept_and_others_made_safe_deterministically():
    assert message_id("u0.s03.t05") == "u0.s03.t05"
    safe = message_id("D1:3")
    assert safe.startswith("D1-3-") and ID_RULE.fullmatch(safe) and safe == message_id("D1:3")
    assert message_id("D1:3") != message_id("D1-3") != message_id("D1;3")
    assert ID_RULE.fullmatch(safe_id("x" * 300)) and ID_RULE.fullmatch(safe_id("..")) and ID_RULE.fullmatch(safe_id(""))
    assert ID_RULE.fullmatch(safe_id("answer_4be1b6b4_2#2:17"))
    SessionScope(safe_id("conv-26.session_1"))  # a scope accepts it


@given(st.text(max_size=300), st.text(max_size=300))
def test_any_two_turn_ids_give_two_valid_message_ids(a, b):
    assert ID_RULE.fullmatch(message_id(a)) and message_id(a) not in (".", "..")
    assert (message_id(a) == message_id(b)) == (a == b)


def test_messages_of_a_session_are_a_second_apart():
    session = Session("s1", datetime(2023, 5, 8, 13, 56, tzinfo=UTC), (Turn("D1:1", "user", "A", "hi"),))
    assert session.stamp(0) == session.date and (session.stamp(3) - session.date).total_seconds() == 3
