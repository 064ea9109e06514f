"""The context viewer: each section of the meter opens to exactly what the model was sent.

The real socket stack drives turns against the real HTTP fake OpenAI server; the viewer's text,
section by section, is compared with the request the server received (system message, tools,
messages), and each token count with a count of that text.
"""

from __future__ import annotations

import asyncio
import html
import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from agents.chat.context_view import CONTEXT_KEY, ContextSnapshot
from agents.llm.openai import OpenAIChatModel
from agents.runtime import services as services_module
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from agents.runtime.tools.history_tools import archive_scope_for
from memory.core_memory import MEMORY, SOUL, USER, core_scope
from memory.stores.base import ArchiveDocument
from memory.tokens import count_text
from tests.agents.chat.conftest import open_socket, receive_until
from tests.agents.chat.test_consumer import IDLE, send
from tests.fakes.openai_server import FAKE_API_KEY, FakeToolCall, Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts")]

INSTRUCTIONS = "You are a test assistant who keeps notes."

BOT_YML = f"""\
persistence:
  backend: file
model:
  provider: offline
  name: modex-offline
  context_window: 8192
agents:
  default:
    description: Memory on, a small threshold.
    instructions: {INSTRUCTIONS}
    tools: [todo]
    memory:
      archive_enabled: true
      core_enabled: true
      compression_threshold: 400
      keep_tokens: 120
"""

LONG = (
    "Here is a long note about the garden, the tomatoes along the south wall, the basil that bolts in July, "
    "and the watering plan that changes every week depending on the weather report from the coast. "
) * 4


async def _no_sleep(_seconds):
    return None


@pytest.fixture
def viewer_bot(tmp_path, settings):
    path = tmp_path / "viewer-bot.yml"
    path.write_text(BOT_YML)
    settings.MODEX_SCOPES_FILE = path
    return path


@pytest.fixture
def http_runtime(tmp_path, viewer_bot, fake_openai, monkeypatch):
    model = OpenAIChatModel(
        base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", timeout=5, max_retries=1, sleep=_no_sleep
    )
    runtime = Runtime(services=build_services(backend="file", workspace=tmp_path / "ws", model=model))
    chat.set_runtime_for_tests(runtime)
    monkeypatch.setattr(services_module, "_services", runtime.services)
    yield runtime
    chat.set_runtime_for_tests(None)


@pytest.fixture
def conversation(owner, http_runtime):
    return chat.create_conversation(user=owner, agent="default")


def _seed_memory(runtime: Runtime, owner) -> None:
    kv, user = runtime.services.bundle.kv, str(owner.pk)
    kv.put(core_scope(file=SOUL, agent="default", user=user), SOUL, "# Identity\nA careful gardener's helper.")
    kv.put(core_scope(file=USER, agent="default", user=user), USER, "- Lives near the coast <and> likes basil.")
    kv.put(core_scope(file=MEMORY, agent="default", user=user), MEMORY, "")
    runtime.services.bundle.archive.put(
        archive_scope_for(agent="default", user_id=user),
        ArchiveDocument(session="session:earlier", summary="Talked about planting tomatoes in May.", title="Spring"),
    )


def _answer(request):
    return Reply(content="Noted, thank you.")


def _get(user, url: str, htmx: bool):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client.get(url, headers={"HX-Request": "true"} if htmx else {})


def _calling(request):
    if request.json["messages"][-1].get("content") == "What now?":
        return Reply(tool_calls=[FakeToolCall("call_1", "todo", json.dumps({"action": "add", "text": "water <basil>"}))])
    return _answer(request)


async def viewer(user, conversation, section: str, *, htmx: bool = True):
    """The viewer's response for ``user`` (None: not signed in)."""
    url = reverse("chat:context", args=[conversation.pk]) + f"?section={section}"
    return await asyncio.to_thread(_get, user, url, htmx)


def shown(fragment: str) -> dict[str, str]:
    """The texts of a viewer fragment, by part (``data-part``), unescaped."""
    return {key: html.unescape(text) for key, text in re.findall(r'<pre class="context-text" data-part="([^"]+)">(.*?)</pre>', fragment, re.S)}


def shown_tokens(fragment: str) -> int:
    return int(re.search(r'<p class="context-meta[^"]*"><strong>(\d+)</strong> tokens', fragment).group(1))


async def _turns(conversation, owner, fake_openai, texts):
    comm = await open_socket(conversation.pk, owner)
    assert (await comm.connect())[0]
    frames = []
    for text in texts:
        await send(comm, text)
        frames += await receive_until(comm, IDLE, timeout=30)
    await comm.disconnect()
    return "\n".join(frames)


async def test_every_section_shows_exactly_what_the_server_received(conversation, owner, http_runtime, fake_openai):
    await sync_to_async(_seed_memory)(http_runtime, owner)
    # The last turn calls a tool, so its second step is sent a call and its result.
    fake_openai.responder = _calling
    joined = await _turns(conversation, owner, fake_openai, [LONG, LONG + "again", LONG + "and once more", "What now?"])
    catalogued = await sync_to_async(http_runtime.services.catalog.count)(chat.session_of(conversation))
    assert catalogued > 0, "the small threshold moved older messages to the pruned catalog"

    sent = [r.json for r in fake_openai.chat_requests if r.json["messages"][0]["content"].startswith(INSTRUCTIONS)]
    request = sent[-1]  # the latest model step of the conversation
    system, *messages = request["messages"]
    assert system["role"] == "system"

    pages = {key: (await viewer(owner, conversation, key)).content.decode() for key in
             ("system", "core", "archive", "pruned", "tools", "messages", "overhead")}

    # The system message is the instructions, then each memory section, in order, exactly.
    instructions = shown(pages["system"])["system"]
    core = shown(pages["core"])
    archive = shown(pages["archive"])
    pruned = shown(pages["pruned"])["pruned"]
    assert list(core) == ["SOUL.md", "USER.md", "MEMORY.md"]
    assert "archive_summaries" in archive and "Talked about planting tomatoes in May." in archive["archive_summaries"]
    core_text, archive_text = "\n".join(core.values()), "\n".join(archive.values())
    assert system["content"] == "\n\n".join([instructions, core_text, archive_text, pruned])
    assert "likes basil" in core["USER.md"] and "&lt;and&gt;" in core["USER.md"], "as sent: escaped in its XML"
    assert pruned.startswith("<pruned_messages") and archive["archive_summaries"].startswith("<archive_summaries")

    # Tokens shown are the counts of the texts shown (the meter's figures, per part too).
    assert shown_tokens(pages["system"]) == count_text(instructions)
    assert shown_tokens(pages["core"]) == count_text(core_text)
    assert shown_tokens(pages["archive"]) == count_text(archive_text)
    assert shown_tokens(pages["pruned"]) == count_text(pruned)
    for key, text in core.items():
        assert re.search(rf"{re.escape(key)} · &lt;\w+&gt; <span class=\"muted small\">· {count_text(text)} tokens", pages["core"])

    # Tools: the schemas sent, whole.
    assert json.loads(shown(pages["tools"])["tools"]) == request["tools"]
    assert shown_tokens(pages["tools"]) == count_text(json.dumps(request["tools"], ensure_ascii=False, separators=(",", ":")))

    # Messages: each one as sent, in order, role and text and tool calls.
    items = re.findall(r'<li class="context-message role-(\w+)">(.*?)</li>', pages["messages"], re.S)
    assert [role for role, _ in items] == [m["role"] for m in messages]
    for (_, body), message in zip(items, messages, strict=True):
        contents = [html.unescape(t) for t in re.findall(r'data-field="content">(.*?)</pre>', body, re.S)]
        assert contents == ([message["content"] or ""] if message.get("content") or not message.get("tool_calls") else [])
        calls = [html.unescape(t) for t in re.findall(r'data-field="tool_call">(.*?)</pre>', body, re.S)]
        assert calls == [f"{c['function']['name']} {c['function']['arguments']}" for c in message.get("tool_calls") or ()]

    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and messages[0]["content"].startswith("[compact_summary]"), "the compact summary, as sent"
    assert any(m.get("tool_calls") for m in messages) and "tool" in roles, "a call and its result, as sent"
    # The framing has no text of its own; it is explained, with its tokens.
    assert "role markers" in pages["overhead"] and shown_tokens(pages["overhead"]) > 0


async def test_the_meter_names_sections_for_users_and_says_counts_in_words(conversation, owner, http_runtime, fake_openai):
    await sync_to_async(_seed_memory)(http_runtime, owner)
    fake_openai.responder = _answer
    joined = await _turns(conversation, owner, fake_openai, ["hello"])
    meter = joined
    for label, words in ((">Core memory", "2 files filled"), (">Archive recall", "1 summary"),
                         (">Tool definitions", "1 tool"), (">Messages", "1 message")):
        assert re.search(rf"{label}<span class=\"sr-only\">: show what was sent</span></a> <span class=\"muted\">· {words}</span>", meter), label
    assert "Message framing" in meter and "Formatting" not in meter
    # After a reload the legend says the same, from the stored history.
    page = (await asyncio.to_thread(_get, owner, reverse("chat:conversation", args=[conversation.pk]), False)).content.decode()
    assert '· 2 files filled' in page and 'aria-haspopup="dialog"' in page and 'id="context-dialog"' in page


async def test_only_the_owner_opens_the_viewer(conversation, owner, colleague, staff, http_runtime, fake_openai):
    fake_openai.responder = _answer
    await _turns(conversation, owner, fake_openai, ["a secret about basil"])
    for user in (colleague, staff):
        assert (await viewer(user, conversation, "messages")).status_code == 404
        assert (await viewer(user, conversation, "messages", htmx=False)).status_code == 404
    anonymous = await viewer(None, conversation, "messages")
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
    response = await viewer(owner, conversation, "messages")
    assert response.status_code == 200 and "a secret about basil" in response.content.decode()
    # A plain request (no htmx) gets the whole request on a page, the asked-for section open.
    page = (await viewer(owner, conversation, "messages", htmx=False)).content.decode()
    assert '<details class="card context-details" id="section-messages" open>' in page and "<html" in page
    assert (await viewer(owner, conversation, "nonsense")).status_code == 404


async def test_before_any_step_and_for_an_absent_section_the_viewer_says_so(conversation, owner, http_runtime, fake_openai):
    empty = await viewer(owner, conversation, "core")
    assert empty.status_code == 200 and "Nothing kept yet" in empty.content.decode()
    fake_openai.responder = _answer
    await _turns(conversation, owner, fake_openai, ["hi"])
    absent = (await viewer(owner, conversation, "experiences")).content.decode()
    assert "This section was not in the latest request" in absent


async def test_only_the_latest_step_is_kept(conversation, owner, http_runtime, fake_openai):
    fake_openai.responder = _answer
    await _turns(conversation, owner, fake_openai, ["first words"])
    kv, session = http_runtime.services.bundle.kv, chat.session_of(conversation)
    first = ContextSnapshot.from_json(await sync_to_async(kv.get_value)(session, CONTEXT_KEY))
    await _turns(conversation, owner, fake_openai, ["second words"])
    items = await sync_to_async(kv.list)(session, prefix="context")
    assert [item.key for item in items] == [CONTEXT_KEY], "one kept request per conversation, replaced"
    second = ContextSnapshot.from_json(items[0].value)
    assert (first.turn, second.turn) == (1, 2)
    assert "second words" in json.dumps(second.section("messages").messages)
    # Deleting the conversation deletes the kept request with the rest of its session scope.
    await sync_to_async(chat.delete_conversation)(user=owner, conversation_id=conversation.pk)
    assert await sync_to_async(kv.get_value)(session, CONTEXT_KEY) is None
