"""A model that answers the compact summary's template with no section (the smallest models chat
on to the completion cap) is asked each section alone from its next cleanup on, and the template
again every ``RECHECK_EVERY``-th; a model that writes sections keeps getting the template. Real
HTTP fake server, real stores, the runtime's ``compact``."""

from __future__ import annotations

import pytest

from agents.llm.openai import OpenAIChatModel
from agents.runtime import summary_style
from agents.runtime.cleanup import compact
from agents.runtime.services import build_services
from memory.compression.summary_input import _SECTION_SYSTEM
from memory.messages import Message
from memory.scopes import SessionScope
from memory.threads import run_blocking
from tests.agents.test_long_term import long_term_agent
from tests.fakes.openai_server import FAKE_API_KEY, Reply

pytestmark = pytest.mark.django_db(transaction=True)


def is_template(request) -> bool:
    return request.json["messages"][0]["content"] != _SECTION_SYSTEM


RAMBLE = "Sure! Let me tell you a story about the sea and the boats and the harbour. " * 30
SHORT = "Sure, happy to help with that."


def world(tmp_path, fake_openai, *, follows, otherwise=RAMBLE):
    """``follows()`` says whether the model writes a section of the template now; ``otherwise``
    is what it answers when it does not."""
    def answer(request):
        if is_template(request):
            return Reply(content="## Goal\nPlan the trip." if follows() else otherwise)
        return Reply(content="- the trip to Ghent in May")

    fake_openai.responder = answer
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", max_retries=0)
    services = build_services(backend="sqlite", workspace=tmp_path, model=model)
    return model, services, long_term_agent(archive_enabled=False, core_enabled=False)


async def cleanup(services, agent, n: int):
    session = SessionScope(f"style-{n}")
    await run_blocking(services.bundle.messages.append, session, [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"Turn {i}: we planned the trip to Ghent. " * 8)
        for i in range(12)
    ])
    return await compact(services=services, session=session, agent=agent, user_id="7", model=services.model, force=True)


@pytest.mark.parametrize("otherwise, misses", [(RAMBLE, 1), (SHORT, summary_style.MISSES)])
async def test_a_model_that_writes_no_section_is_asked_each_alone_and_the_template_again_later(
    tmp_path, fake_openai, otherwise, misses
):
    """A model that chats on past the budget is switched after one such answer; one that answers
    short without a section after ``MISSES`` in a row."""
    follows = {"now": False}
    model, services, agent = world(tmp_path, fake_openai, follows=lambda: follows["now"], otherwise=otherwise)
    for n in range(misses):  # the template, then the six sections alone
        before = len(fake_openai.chat_requests)
        missed = await cleanup(services, agent, n)
        assert missed.committed and not missed.fallback_summary and missed.template_followed is False
        assert missed.template_ran_on is (otherwise == RAMBLE)
        asked = [is_template(r) for r in fake_openai.chat_requests[before:]]
        assert asked[0] and not any(asked[1:]) and len(asked) == 7

    n = misses
    for n in range(n, n + summary_style.RECHECK_EVERY):  # then the template is not asked ...
        before = len(fake_openai.chat_requests)
        result = await cleanup(services, agent, n)
        assert result.committed and not result.fallback_summary and result.template_followed is None
        assert not any(is_template(r) for r in fake_openai.chat_requests[before:]), n
        assert len(fake_openai.chat_requests) - before == 6
    follows["now"] = True  # ... until the check, and a model that writes sections gets it again
    for n in range(n + 1, n + 3):
        before = len(fake_openai.chat_requests)
        again = await cleanup(services, agent, n)
        assert is_template(fake_openai.chat_requests[before]) and again.template_followed is True
    await model.aclose()


async def test_one_answer_without_a_section_changes_nothing(tmp_path, fake_openai):
    """A model that writes sections but once answered short without one keeps getting the template."""
    follows = {"now": True}
    model, services, agent = world(tmp_path, fake_openai, follows=lambda: follows["now"], otherwise=SHORT)
    for n, writes in enumerate([False, True, False, True, True]):
        follows["now"] = writes
        before = len(fake_openai.chat_requests)
        result = await cleanup(services, agent, n)
        assert result.committed and is_template(fake_openai.chat_requests[before]), n
        assert result.template_followed is writes
    await model.aclose()
