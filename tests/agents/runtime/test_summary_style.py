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


def world(tmp_path, fake_openai, *, follows: bool):
    def answer(request):
        if is_template(request):
            return Reply(content="## Goal\nPlan the trip." if follows else "Sure! Let me tell you a story about " * 30)
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


async def test_a_model_that_writes_no_section_is_asked_each_alone_and_the_template_again_later(tmp_path, fake_openai):
    model, services, agent = world(tmp_path, fake_openai, follows=False)
    first = await cleanup(services, agent, 0)
    assert first.committed and not first.fallback_summary and first.template_followed is False
    asked = [is_template(r) for r in fake_openai.chat_requests]
    assert asked[0] and not any(asked[1:]) and len(asked) == 7  # the template, then the six sections alone

    for n in range(1, summary_style.RECHECK_EVERY + 1):  # the template is not asked again ...
        before = len(fake_openai.chat_requests)
        result = await cleanup(services, agent, n)
        assert result.committed and not result.fallback_summary and result.template_followed is None
        assert not any(is_template(r) for r in fake_openai.chat_requests[before:]), n
        assert len(fake_openai.chat_requests) - before == 6
    before = len(fake_openai.chat_requests)
    again = await cleanup(services, agent, summary_style.RECHECK_EVERY + 1)  # ... until the check
    assert is_template(fake_openai.chat_requests[before]) and again.template_followed is False
    await model.aclose()


async def test_a_model_that_writes_sections_keeps_getting_the_template(tmp_path, fake_openai):
    model, services, agent = world(tmp_path, fake_openai, follows=True)
    for n in range(3):
        before = len(fake_openai.chat_requests)
        result = await cleanup(services, agent, n)
        assert result.committed and result.template_followed is True
        assert is_template(fake_openai.chat_requests[before])  # then the missing sections, each alone
    await model.aclose()
