"""The evidence matcher: found by id where the message itself was sent, else by its whole text
inside a section, a compact summary or a tool output; and the tier that held it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.evaluation.data import Turn
from agents.evaluation.evidence import (
    TIERS,
    holds,
    locate,
    shares,
    sight_of_context,
    sight_of_tools,
)
from memory.assembly.base import Section
from memory.assembly.xml import element, wrap
from memory.messages import KIND_COMPACT_SUMMARY, Message

SAID = Turn("D3:5", "user", "Nadia", "It really does. We did eight kilometres yesterday, my longest run ever.")
PHOTO = Turn("D1:16", "assistant", "Felix", "Here's the hull frame so far. [shares a photo: a wooden boat frame]")
SHORT = Turn("D2:6", "user", "Nadia", "Maid of honour!")


def context(*, sections=(), messages=()):
    return SimpleNamespace(sections=tuple(sections), session_messages=tuple(messages))


def section(name, text):
    return Section.of(name=name, tag="x", text=text, items=1)


def test_found_by_text_both_ways():
    # found: whole, in order, whatever the case, punctuation, line breaks and XML escaping around it
    assert holds("<m>IT REALLY DOES.\nWe did eight kilometres yesterday &amp; my longest run ever!</m>", SAID.text, escaped=True)
    assert holds('Nadia said: "it really does - we did eight kilometres yesterday, my longest run ever"', SAID.text)
    # not found: a near miss with one word changed, a cut-short excerpt, the words out of order
    assert not holds("It really does. We did nine kilometres yesterday, my longest run ever.", SAID.text)
    assert not holds("It really does. We did eight kilometres yesterday, my longe…", SAID.text)
    assert not holds("my longest run ever. It really does. We did eight kilometres yesterday,", SAID.text)
    # a turn too short to tell apart from anything else is found by id only
    assert not holds("Maid of honour! So I'm already stressing about a speech.", SHORT.text)


def test_entities_are_decoded_only_where_the_text_was_escaped():
    turn = Turn("t", "user", "u", "Tom & Jerry's <favourite> cafe is Bean There")
    rendered = wrap("archive_summaries", [element("document", turn.text)])
    assert "&amp;" in rendered and "&lt;favourite&gt;" in rendered
    assert holds(rendered, turn.text, escaped=True)


def test_the_message_itself_is_found_by_id_in_the_session_tail():
    sent = Message(role="user", content="a governed copy, shortened", id=SAID.message_id)
    found = locate([SAID, SHORT], first=sight_of_context(context(messages=[sent])))
    assert found[0].in_context and found[0].tiers == ("session tail",)
    assert not found[1].in_context and not found[1].reachable  # neither its id nor (too short) its text


@pytest.mark.parametrize(
    ("name", "tier"),
    [("core memory", "core memory"), ("archive", "archive section"), ("pruned catalog", "pruned catalog"),
     ("experiences", "experience"), ("recalled today", "other sections")],
)
def test_a_section_is_attributed_by_its_name(name, tier):
    sight = sight_of_context(context(sections=[section(name, f"<x>On 8 April: {SAID.text}</x>")]))
    [found] = locate([SAID], first=sight)
    assert found.in_context and found.tiers == (tier,)


def test_a_compact_summary_is_its_own_tier_and_other_messages_are_not_read_as_text():
    summary = Message(role="user", content=f"[compact_summary]\n## Facts\n- {PHOTO.text}", kind=KIND_COMPACT_SUMMARY)
    other = Message(role="user", content=f"quoting you: {SAID.text}")  # another message: only its own id counts
    [photo, said] = locate([PHOTO, SAID], first=sight_of_context(context(messages=[summary, other])))
    assert photo.tiers == ("compact summary",) and not said.reachable


def test_tool_outputs_and_later_requests_make_it_reachable_not_in_context():
    tools = sight_of_tools([("archive_search", f"[2023-04-08] Nadia: {SAID.text}"), ("pruned_lookup", PHOTO.text)])
    later = sight_of_context(context(sections=[section("archive", PHOTO.text)]))
    found = locate([SAID, PHOTO, SHORT], first=sight_of_context(context()), later=[later, tools])
    assert [(f.in_context, f.reachable) for f in found] == [(False, True), (False, True), (False, False)]
    assert found[0].tiers == ("archive tools",)
    assert found[1].tiers == ("archive section", "other tools")
    result = shares(found)
    assert result["in_context"] == 0 and result["reachable"] == pytest.approx(2 / 3)
    assert result["tiers"] == {"archive section": pytest.approx(1 / 3), "archive tools": pytest.approx(1 / 3),
                               "other tools": pytest.approx(1 / 3)}
    assert shares([]) == {"in_context": None, "reachable": None, "tiers": {}}


def test_one_table_names_every_tier():
    assert TIERS[:2] == ("session tail", "compact summary") and len(TIERS) == len(set(TIERS)) == 9
