"""A session stored before text was made storable at the store's door may hold lone surrogates
(``"\\ud83d"``): reading it, summarizing it through a real HTTP endpoint and assembling its
pruned section must not fail, and must not fall back for want of a sendable prompt."""

from __future__ import annotations

import json

from agents.llm import as_text_completion
from agents.llm.openai import OpenAIChatModel
from memory.assembly.pruned import PrunedProvider
from memory.compression.summary_input import serialize_message
from memory.messages import Message, ToolCall
from memory.text import is_storable
from tests.fakes.openai_script import Reply
from tests.fakes.openai_server import FAKE_API_KEY
from tests.memory.assembly.helpers import ctx

from .helpers import good_answer, no_sleep
from .test_cleanup import ARCHIVE, cleanup, conserved
from .test_faults import ARCHIVE_CONFIG, archived_ids


def raw_session() -> list[Message]:
    out: list[Message] = []
    for i in range(10):
        out.append(Message(role="user", content=f"I moved to Porto \ud83d in turn {i}. " + "word " * 40))
        call = ToolCall(f"call_{i}", "search\udc00", '{"q": "caf\\ud83d"}')
        out.append(Message(role="assistant", content=None, tool_calls=(call,), reasoning_content="think \ud800 first"))
        out.append(Message(role="tool", content="found \udfff " + "data " * 40, tool_call_id=f"call_{i}",
                           name="search\udc00"))
        out.append(Message(role="assistant", content=f"Answer {i} \ud83d " + "text " * 40))
    return out


def test_a_session_with_lone_surrogates_is_summarized_over_http(bundle, session, catalog, fake_openai) -> None:
    appended = bundle.messages.append(session, raw_session())
    live = bundle.messages.read(session)
    assert "\ud83d" in live[0].content  # stored as it was, surrogate and all
    fake_openai.script(Reply(content=good_answer()))
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake", timeout=10, max_retries=0,
                            sleep=no_sleep)
    result = cleanup(bundle, session, catalog, summarizer=as_text_completion(model), config=ARCHIVE_CONFIG,
                     archive_scope=ARCHIVE, force=True)
    assert result.committed and not result.fallback_summary, result.summary_error  # the model wrote it
    sent = json.dumps(fake_openai.requests[0].json["messages"], ensure_ascii=False)
    assert "\ufffd" in sent and "I moved to Porto \ufffd in turn 0" in sent  # replaced, not dropped
    summary = bundle.messages.read(session)[0]
    assert is_storable(summary.content)
    section = PrunedProvider(catalog=catalog).provide(ctx(bundle, session, config=ARCHIVE_CONFIG))
    assert section is not None and is_storable(section.text) and "search\ufffd" in section.text
    conserved(bundle, session, catalog, [m.id for m in appended])
    assert archived_ids(bundle) == [e.message.id for e in catalog.entries(session)]


def test_the_summarizer_input_of_such_a_message_is_storable() -> None:
    for message in raw_session()[:4]:
        text = serialize_message(message.with_seq(1))
        assert is_storable(text) and "\ufffd" in text
