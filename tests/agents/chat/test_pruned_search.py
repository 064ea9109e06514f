"""Search on the pruned page of a conversation: the catalogued messages holding every word searched
for (the start of a word is enough), excerpts with the matches marked and escaped; file paths and
the raw catalog headings for staff only."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from memory.messages import Message, ToolCall


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def catalogue(runtime, conversation, messages: list[Message]) -> list[Message]:
    svc = runtime.services
    session = chat.session_of(conversation)
    stored = svc.bundle.messages.append(session, messages)
    svc.catalog.write(session, stored)
    head = svc.bundle.messages.head(session)
    svc.bundle.messages.prune(session, through_seq=stored[-1].seq, expected_version=head.version,
                              summary=Message(role="user", content="summary", kind="compact_summary"))
    return stored


def pruned(client: Client, conversation, q: str | None = None) -> str:
    data = {"q": q} if q is not None else {}
    return client.get(reverse("chat:pruned", args=[conversation.pk]), data).content.decode()


def test_search_finds_messages_by_the_start_of_their_words_and_marks_them(owner, conversation, chat_runtime):
    catalogue(chat_runtime, conversation, [
        Message(role="user", content="We moved to Lisbon in spring; the <b>flat</b> is small."),
        Message(role="assistant", content="Lisbon is lovely in spring."),
        Message(role="user", content="My sister lives in Porto."),
        Message(role="assistant", content=None, reasoning_content="Check the Lisbon tram map.",
                tool_calls=(ToolCall(id="c1", name="todo", arguments_json='{"text": "tram"}'),)),
        Message(role="tool", content="added", tool_call_id="c1", name="todo"),
    ])
    client = logged_in(owner)
    page = pruned(client, conversation, "lisb spring")
    assert "2 messages with “lisb spring”" in page
    assert "We moved to <mark>Lisbon</mark> in <mark>spring</mark>; the &lt;b&gt;flat&lt;/b&gt; is small." in page
    assert "<mark>Lisbon</mark> is lovely in <mark>spring</mark>." in page
    hits = page[page.index('class="card pruned-hits"'):page.index('class="card toc"')]
    assert 'href="#seq-1"' in hits and 'href="#seq-2"' in hits and 'href="#seq-3"' not in hits
    assert "Message 1</a> · user" in hits
    # Reasoning and tool calls are searched too.
    tram = pruned(client, conversation, "tram")
    assert "1 message with “tram”" in tram and "Check the Lisbon <mark>tram</mark> map." in tram
    none = pruned(client, conversation, "lisbon sister")
    assert "No message holds “lisbon sister”" in none and "try fewer words" in none
    # Without a query: the whole catalog, no result list.
    assert 'class="card pruned-hits"' not in pruned(client, conversation)
    assert 'id="pruned-q"' in pruned(client, conversation)


def test_a_query_of_stop_words_only_asks_for_a_word(owner, conversation, chat_runtime):
    catalogue(chat_runtime, conversation, [Message(role="user", content="What is this about?")])
    page = pruned(logged_in(owner), conversation, "what is this")
    assert "Type a word to search for" in page and "<mark>" not in page


def test_paths_seqs_and_raw_headings_are_for_staff(owner, staff, conversation, chat_runtime):
    catalogue(chat_runtime, conversation, [Message(role="user", content="hello there")])
    page = pruned(logged_in(owner), conversation)
    assert f"pruned/{conversation.session_id}" not in page and "grep" not in page
    assert "## [1]" not in page and "<th>seq</th>" not in page and ".md:" not in page
    assert "Message 1 · user · " in page
    # staff reading their own conversation see where the catalog lives, exactly as stored
    mine = chat.create_conversation(user=staff, agent="default")
    catalogue(chat_runtime, mine, [Message(role="user", content="hello there")])
    staff_page = pruned(logged_in(staff), mine)
    assert f"<code>pruned/{mine.session_id}/</code>" in staff_page and "grep -n" in staff_page
    assert "<code>## [1] user · " in staff_page


def test_another_users_pruned_page_is_a_404_search_included(outsider, conversation, chat_runtime):
    catalogue(chat_runtime, conversation, [Message(role="user", content="secret plans for Lisbon")])
    response = logged_in(outsider).get(reverse("chat:pruned", args=[conversation.pk]), {"q": "lisbon"})
    assert response.status_code == 404 and b"Lisbon" not in response.content
