"""OfflineChatModel: deterministic, streaming, tool-calling, answering from injected memory."""

from __future__ import annotations

import asyncio
import json

import pytest

from agents.llm import (
    OFFLINE_CONSOLIDATION_MARKER,
    OFFLINE_SUMMARY_MARKER,
    SUMMARY_SECTIONS,
    ChatModel,
    ContentDelta,
    Finish,
    OfflineChatModel,
    OfflineTools,
    ReasoningDelta,
    Usage,
    as_text_completion,
    complete,
)
from memory.messages import Message
from memory.tokens import count_text
from memory.transcript import validate_transcript

TOOL_NAMES = ("core_memory", "archive_search", "pruned_lookup", "todo")
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in TOOL_NAMES]
SYSTEM = {
    "role": "system",
    "content": (
        "You are a helpful assistant.\n"
        "<your_identity>Name: Modex</your_identity>\n"
        "<user_profile>\n- Name: Zoë &lt;Z&gt; Martin\n- Lives in Lyon\n- Prefers short answers\n</user_profile>\n"
        "<known_facts>\n- The deploy is on Friday &amp; needs a review\n</known_facts>"
    ),
}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


async def run(messages, tools=TOOLS, model=None):
    model = model or OfflineChatModel()
    return [event async for event in model.stream(messages=messages, tools=tools)]


async def test_is_a_chat_model_that_says_it_is_offline():
    model = OfflineChatModel()
    assert isinstance(model, ChatModel)
    assert model.is_offline and model.name == "modex-offline"
    assert "offline" in model.describe() and "OPENAI_BASE_URL" in model.describe()


async def test_same_input_gives_the_same_events():
    messages = [SYSTEM, user("Remember that my dog is called Rex. Then search the archive for vet bills.")]
    assert await run(messages) == await run(messages)
    chat = [SYSTEM, user("Tell me something about compilers, please.")]
    assert await run(chat) == await run(chat)


async def test_streams_reasoning_and_content_in_several_chunks_and_yields_to_the_loop():
    ticks = 0
    stop = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    events = await run([user("Explain how the memory tiers work together in this system.")])
    stop.set()
    await task
    assert sum(isinstance(e, ReasoningDelta) for e in events) > 1
    assert sum(isinstance(e, ContentDelta) for e in events) > 1
    assert ticks > 2  # other tasks ran while it streamed
    assert isinstance(events[-2], Usage) and events[-1] == Finish("stop")


async def test_usage_is_counted_with_memory_tokens():
    completion = await complete(OfflineChatModel(), messages=[user("hello there")], tools=None)
    assert completion.usage.completion_tokens == count_text(completion.content) + count_text(
        completion.reasoning_content
    )
    assert completion.usage.prompt_tokens > count_text("hello there")
    assert completion.usage.total == completion.usage.prompt_tokens + completion.usage.completion_tokens


@pytest.mark.parametrize(
    ("text", "tool", "arguments"),
    [
        (
            "remember that the deploy moved to Monday",
            "core_memory",
            {"action": "append", "file": "MEMORY.md", "text": "The deploy moved to Monday"},
        ),
        (  # a single-valued fact already in the profile is replaced, not added a second time
            "Remember: my name is Sam.",
            "core_memory",
            {"action": "replace", "file": "USER.md", "old": "Name: Zoë <Z> Martin", "new": "Name: Sam"},
        ),
        (
            "Please remember that I live in Porto",
            "core_memory",
            {"action": "replace", "file": "USER.md", "old": "Lives in Lyon", "new": "Lives in Porto"},
        ),
        ("Remember that I like trams.", "core_memory", {"action": "append", "file": "USER.md", "text": "Likes trams"}),
        (  # the request after the statement
            "The standup moved to 10:30, remember that.",
            "core_memory",
            {"action": "append", "file": "MEMORY.md", "text": "The standup moved to 10:30"},
        ),
        ("I like trams - please remember this!", "core_memory", {"action": "append", "file": "USER.md", "text": "Likes trams"}),
        ("Search the archive for launch plans.", "archive_search", {"query": "launch plans"}),
        ("could you look up pruned message 12?", "pruned_lookup", {"seq": 12}),
        ("todo: write the release notes", "todo", {"action": "add", "item": "write the release notes"}),
        ("show my todo list", "todo", {"action": "list"}),
        ("done: write the release notes", "todo", {"action": "complete", "item": "write the release notes"}),
    ],
)
async def test_trigger_phrases_call_the_offered_tool(text, tool, arguments):
    completion = await complete(OfflineChatModel(), messages=[SYSTEM, user(text)], tools=TOOLS)
    assert [(c.name, c.arguments()) for c in completion.tool_calls] == [(tool, arguments)]
    assert completion.finish_reason == "tool_calls" and completion.reasoning_content


async def test_several_triggers_in_one_message_become_parallel_calls():
    text = "Remember that Ana is my sister. Search the archive for Ana's birthday. todo: buy a gift"
    completion = await complete(OfflineChatModel(), messages=[user(text)], tools=TOOLS)
    assert [c.name for c in completion.tool_calls] == ["core_memory", "archive_search", "todo"]
    assert len({c.id for c in completion.tool_calls}) == 3


async def test_questions_about_remembering_are_not_triggers():
    completion = await complete(OfflineChatModel(), messages=[user("Do you remember that trip?")], tools=TOOLS)
    assert completion.tool_calls == ()
    completion = await complete(OfflineChatModel(), messages=[user("I hate mornings, remember that?")], tools=TOOLS)
    assert completion.tool_calls == ()


async def test_a_trigger_for_a_tool_that_is_not_offered_is_answered_in_text():
    completion = await complete(OfflineChatModel(), messages=[user("search the archive for taxes")], tools=TOOLS[:1])
    assert completion.tool_calls == () and "archive_search" in completion.content


async def test_tool_names_and_argument_shapes_are_configurable():
    tools = OfflineTools(
        core_memory="memory_edit", core_memory_args={"op": "add", "target": "{file}", "content": "{text}"}
    )
    schemas = [{"type": "function", "function": {"name": "memory_edit"}}]
    completion = await complete(OfflineChatModel(tools=tools), messages=[user("remember: tea at 5")], tools=schemas)
    assert [(c.name, c.arguments()) for c in completion.tool_calls] == [
        ("memory_edit", {"op": "add", "target": "MEMORY.md", "content": "Tea at 5"})
    ]


async def test_full_react_round_ends_with_a_final_answer_using_the_results():
    model = OfflineChatModel()
    history = [Message(role="user", content="Search the archive for the Lisbon trip and remember that I like trams.")]
    first = await complete(model, messages=[m.to_wire() for m in history], tools=TOOLS)
    history.append(first.to_message())
    results = {"archive_search": "2023-05: trip to Lisbon, stayed in Alfama.", "core_memory": "ok: appended to USER.md"}
    for call in first.tool_calls:
        history.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=results[call.name]))
    final = await complete(model, messages=[m.to_wire() for m in history], tools=TOOLS)
    history.append(final.to_message())

    validate_transcript(history)
    assert final.tool_calls == () and final.finish_reason == "stop"
    assert "stayed in Alfama" in final.content and "Likes trams" in final.content


async def test_a_failed_tool_is_reported_as_failed():
    call = {"id": "c1", "type": "function", "function": {"name": "pruned_lookup", "arguments": '{"seq": 99}'}}
    messages = [
        user("look up pruned message 99"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error: no pruned message 99 in this session"},
    ]
    final = await complete(OfflineChatModel(), messages=messages, tools=TOOLS)
    assert "failed" in final.content and "no pruned message 99" in final.content


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is my name?", "Your name is Zoë <Z> Martin."),
        ("where do I live?", "You live in Lyon."),
        ("What's my favorite color?", "I don't know your favorite color yet."),
    ],
)
async def test_questions_about_the_user_are_answered_from_injected_core_memory(question, expected):
    completion = await complete(OfflineChatModel(), messages=[SYSTEM, user(question)], tools=TOOLS)
    assert completion.content == expected and completion.tool_calls == ()


async def test_what_do_you_know_about_me_lists_profile_and_facts():
    completion = await complete(OfflineChatModel(), messages=[SYSTEM, user("What do you know about me?")], tools=TOOLS)
    for line in (
        "Name: Zoë <Z> Martin",
        "Lives in Lyon",
        "Prefers short answers",
        "The deploy is on Friday & needs a review",
    ):
        assert line in completion.content
    assert "Modex" not in completion.content  # the identity is not about the user


async def test_without_core_memory_it_falls_back_to_the_conversation_newest_first():
    messages = [
        user("My name is Sam. My favorite color is teal."),
        {"role": "assistant", "content": "Noted."},
        user("Actually my name is Samuel."),
        {"role": "assistant", "content": "Noted."},
        user("what is my name"),
    ]
    assert (await complete(OfflineChatModel(), messages=messages)).content == "Your name is Samuel."
    messages[-1] = user("What is my favorite color?")
    assert (await complete(OfflineChatModel(), messages=messages)).content == "Your favorite color is teal."


async def test_other_text_gets_a_helpful_deterministic_reply():
    completion = await complete(OfflineChatModel(), messages=[user("Tell me about compilers.")], tools=TOOLS)
    assert "Tell me about compilers" in completion.content and "offline" in completion.content
    assert completion.reasoning_content and completion.tool_calls == ()


RECALLED = {
    "role": "system",
    "content": (
        "<archive_recall>\n<note>Earlier conversations with this user.</note>\n"
        '<conversation title="Family news" date="6 Dec 2026">\n'
        "1.1 user: My sister Maya just moved to Porto for a job at a bakery.\n"
        "1.2 assistant: Porto has lovely bakeries &amp; the river.\n"
        "1.3 user, 7 Dec 2026: I'm allergic to hazelnuts.\n"
        "</conversation>\n</archive_recall>"
    ),
}


async def test_a_question_is_answered_by_quoting_what_recall_brought_back():
    completion = await complete(OfflineChatModel(), messages=[RECALLED, user("Where did my sister move?")], tools=TOOLS)
    assert completion.content == (
        "From our earlier conversation on 6 Dec 2026, you said: “My sister Maya just moved to Porto for a job at a bakery.”"
    )
    completion = await complete(OfflineChatModel(), messages=[RECALLED, user("Which nuts am I allergic to?")], tools=TOOLS)
    assert completion.content == "From our earlier conversation on 7 Dec 2026, you said: “I'm allergic to hazelnuts.”"
    # Sharing no word with anything recalled, or not a question: the usual reply.
    completion = await complete(OfflineChatModel(), messages=[RECALLED, user("Any plans for the weekend?")], tools=TOOLS)
    assert completion.content.startswith("I understood:")
    completion = await complete(OfflineChatModel(), messages=[RECALLED, user("My sister called today.")], tools=TOOLS)
    assert completion.content.startswith("I understood:")


async def test_recall_sent_at_the_head_of_the_message_is_read_as_recall_not_as_the_question():
    # MODEX_RECALL_PLACEMENT=message: the assembler puts <archive_recall> before the user's text.
    ahead = user(RECALLED["content"] + "\n\nWhere did my sister move?")
    completion = await complete(OfflineChatModel(), messages=[ahead], tools=TOOLS)
    assert completion.content == (
        "From our earlier conversation on 6 Dec 2026, you said: “My sister Maya just moved to Porto for a job at a bakery.”"
    )
    # Not a question: the reply quotes what the user said, without the recalled lines.
    completion = await complete(OfflineChatModel(), messages=[user(RECALLED["content"] + "\n\nMy sister called today.")], tools=TOOLS)
    assert completion.content.startswith("I understood:") and "My sister called today" in completion.content
    assert "Porto" not in completion.content and "archive_recall" not in completion.content


async def test_memory_sections_that_look_like_summaries_do_not_trigger_summarizing():
    system = {
        "role": "system",
        "content": (
            "Summarize nothing.\n<archive_summaries>## Goal\nx\n## Decisions\n- y\n## Facts\n- z\n</archive_summaries>"
        ),
    }
    completion = await complete(OfflineChatModel(), messages=[system, user("hello")], tools=TOOLS)
    assert completion.content.startswith("Hello!")


async def test_a_compact_summary_in_the_context_is_material_not_a_request():
    earlier = {
        "role": "system",
        "content": "[compact_summary]\n## Goal\nSummarize the Q3 report.\n## Decisions\n- none\n## Facts\n- Name: Ida",
    }
    completion = await complete(OfflineChatModel(), messages=[earlier, user("what is my name?")], tools=None)
    assert completion.content == "Your name is Ida."


async def test_max_tokens_cuts_the_reply_with_finish_length():
    completion = await complete(OfflineChatModel(), messages=[user("Tell me a long story about ships")], max_tokens=5)
    assert count_text(completion.content) <= 5 and completion.finish_reason == "length"


# -- compact summaries -------------------------------------------------------------------------

TRANSCRIPT = [
    user("I want to plan the Modex launch for May. My name is Sam and I live in Paris."),
    {
        "role": "assistant",
        "content": "Let's plan it.",
        "reasoning_content": "The user wants a launch plan. Start from dates.",
    },
    user("We decided to use SQLite for the first release."),
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Check earlier launches in the archive.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "archive_search", "arguments": '{"query": "launch"}'}}
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "archive_search",
        "content": "2024 launch: slipped two weeks because of docs.",
    },
    user("Next step: we still need to write the README. Remember that the venue is the Lyon office."),
]


def _sections(summary: str) -> dict[str, str]:
    parts = summary.split("## ")[1:]
    return {p.split("\n", 1)[0].strip(): p.split("\n", 1)[1] for p in parts}


async def test_summary_request_with_the_marker_has_every_section_built_from_the_input():
    instruction = {"role": "system", "content": f"{OFFLINE_SUMMARY_MARKER} Summarize the conversation."}
    summarize = as_text_completion(OfflineChatModel())
    text = await summarize([instruction, *TRANSCRIPT])
    sections = _sections(text)
    assert list(sections) == list(SUMMARY_SECTIONS)
    assert "plan the Modex launch for May" in sections["Goal"]
    assert "We decided to use SQLite" in sections["Decisions"]
    assert "Name: Sam" in sections["Facts"] and "Lives in Paris" in sections["Facts"]
    assert "The venue is the Lyon office" in sections["Facts"]
    assert "The user wants a launch plan." in sections["Reasoning trail"]
    assert "Check earlier launches in the archive." in sections["Reasoning trail"]
    assert "archive_search: 2024 launch: slipped two weeks" in sections["Tool results"]
    assert "write the README" in sections["Open tasks"]
    assert text == await summarize([instruction, *TRANSCRIPT])


async def test_summary_is_recognised_from_a_labelled_transcript_without_the_marker():
    instruction = {
        "role": "system",
        "content": (
            "Write a compact summary with the sections Goal, Decisions, Facts, Reasoning trail, Tool results "
            "and Open tasks."
        ),
    }
    body = user(
        "## [3] user · 2025-01-01T10:00:00Z\nHelp me move to Berlin. I prefer quiet neighbourhoods.\n---\n"
        "## [4] assistant · 2025-01-01T10:00:05Z\nSure.\nreasoning: Housing first, then paperwork.\n---\n"
        "## [5] tool · 2025-01-01T10:00:09Z\nrent index: Pankow is affordable\n---\n"
    )
    sections = _sections(await as_text_completion(OfflineChatModel())([instruction, body]))
    assert "Help me move to Berlin" in sections["Goal"]
    assert "Prefers quiet neighbourhoods" in sections["Facts"]
    assert "Housing first, then paperwork." in sections["Reasoning trail"]
    assert "Pankow is affordable" in sections["Tool results"]


async def test_summary_request_may_come_last_after_the_transcript():
    request = user("Summarize the conversation above with the sections Goal, Decisions, Facts and Open tasks.")
    text = await as_text_completion(OfflineChatModel())([*TRANSCRIPT, request])
    sections = _sections(text)
    assert list(sections) == ["Goal", "Decisions", "Facts", "Open tasks"]
    assert "plan the Modex launch" in sections["Goal"] and "Lives in Paris" in sections["Facts"]


async def test_summary_of_a_pruned_catalog_embedded_in_one_message():
    catalog = (
        f"{OFFLINE_SUMMARY_MARKER} Summarize this pruned catalog:\n"
        "## [3] user · 2025-01-01T10:00:00Z\nI want a new bike. My name is Ola.\n---\n"
        "## [4] assistant · 2025-01-01T10:00:01Z · tool_calls: archive_search\n"
        "Let me look.\nreasoning: check shops\n---\n"
        "## [5] tool · 2025-01-01T10:00:02Z\nbike shops: 3 found\n---\n"
    )
    sections = _sections(await as_text_completion(OfflineChatModel())([user(catalog)]))
    assert list(sections) == list(SUMMARY_SECTIONS)  # the catalog's "## [N]" lines are not sections
    assert "I want a new bike" in sections["Goal"] and "Name: Ola" in sections["Facts"]
    assert "check shops" in sections["Reasoning trail"] and "Called archive_search." in sections["Reasoning trail"]
    assert "bike shops: 3 found" in sections["Tool results"]


async def test_summary_follows_the_requests_own_headings_and_merges_the_previous_summary():
    instruction = {
        "role": "system",
        "content": f"{OFFLINE_SUMMARY_MARKER}\nUse these headings:\n### Goal\n### Facts\n### Decisions\n### Notes",
    }
    previous = {
        "role": "user",
        "content": (
            "[compact_summary]\n## Goal\nShip Modex 1.0\n## Facts\n- Name: Sam\n"
            "## Decisions\n- We decided to ship in May"
        ),
    }
    text = await as_text_completion(OfflineChatModel())([instruction, previous, user("I live in Rome now.")])
    assert text.startswith("### Goal\nShip Modex 1.0\n")
    assert "### Facts\n- Name: Sam\n- Lives in Rome" in text
    assert "- We decided to ship in May" in text and "### Notes\n- (none)" in text


# -- consolidation -----------------------------------------------------------------------------


async def test_consolidation_returns_valid_json_edits_for_the_facts_in_the_archive():
    instruction = {
        "role": "system",
        "content": (
            f"{OFFLINE_CONSOLIDATION_MARKER} Propose edits to SOUL.md, USER.md and MEMORY.md as JSON.\n"
            "<user_profile>- Name: Sam\n- Lives in Lyon</user_profile>\n"
            "<known_facts>- The office is in Lyon</known_facts>"
        ),
    }
    archive = user(
        "Archive document 7 (session abc):\n"
        "user: My name is Sam. I moved to Paris last month.\n"
        "user: Remember that the deploy is on Friday. I prefer tea.\n"
        "user: Remember that the office is in Lyon.\n"
        "assistant: Your name is Sam, noted.\n"
    )
    text = await as_text_completion(OfflineChatModel())([instruction, archive])
    edits = json.loads(text)["edits"]
    # Known facts (Name: Sam, the office) yield no edit; the assistant's words are no evidence.
    assert edits == [
        {"file": "USER.md", "action": "replace", "old": "Lives in Lyon", "text": "Lives in Paris"},
        {"file": "MEMORY.md", "action": "append", "text": "The deploy is on Friday"},
        {"file": "USER.md", "action": "append", "text": "Prefers tea"},
    ]
    assert text == await as_text_completion(OfflineChatModel())([instruction, archive])


async def test_consolidation_is_recognised_without_the_marker_and_may_be_empty():
    instruction = {
        "role": "system",
        "content": "Consolidate into SOUL.md, USER.md and MEMORY.md. Answer with JSON only.",
    }
    text = await as_text_completion(OfflineChatModel())([instruction, user("user: nothing memorable happened")])
    assert json.loads(text) == {"edits": []}


# -- consolidation of Dream Engine documents, experience review, compaction --------------------


def dream_prompt(files, *documents):
    from memory.dream.prompt import build_prompt
    from memory.stores.base import ArchiveDocument

    docs = [
        ArchiveDocument(
            id=f"doc{i}", session="session:s", summary="## Goal\n- chat", messages=tuple(user_messages), seq=i
        )
        for i, user_messages in enumerate(documents, 1)
    ]
    return build_prompt(documents=docs, files=files, caps={"SOUL.md": 1500, "USER.md": 1500, "MEMORY.md": 3000})


async def test_dream_documents_give_edits_with_their_source_and_the_newer_fact_wins():
    from memory.dream.prompt import CONSOLIDATION_MARKER

    assert CONSOLIDATION_MARKER == OFFLINE_CONSOLIDATION_MARKER
    said = lambda text: Message(role="user", content=text)  # noqa: E731
    prompt = dream_prompt(
        {"USER.md": "- Name: Sam\n- Likes jazz", "MEMORY.md": "- The deploy is on Friday"},
        [said("I live in Lyon. Your name is Ada."), Message(role="assistant", content="My name is Bob.")],
        [said("I moved to Paris. Forget that the deploy is on Friday. I don't like jazz anymore. My name is Sam.")],
    )
    edits = json.loads(await as_text_completion(OfflineChatModel())(prompt))["edits"]
    assert edits == [
        {"file": "USER.md", "action": "add", "text": "Lives in Lyon", "source": "doc1", "about": "user"},
        {"file": "SOUL.md", "action": "add", "text": "Name: Ada", "source": "doc1", "about": "identity"},
        {
            "file": "USER.md",
            "action": "update",
            "old": "Lives in Lyon",
            "text": "Lives in Paris",
            "source": "doc2",
            "about": "user",
        },
        {"file": "MEMORY.md", "action": "remove", "old": "The deploy is on Friday", "source": "doc2", "about": "fact"},
        {"file": "USER.md", "action": "remove", "old": "Likes jazz", "source": "doc2", "about": "user"},
    ]


async def test_a_document_without_user_messages_falls_back_to_its_summary():
    from memory.dream.prompt import build_prompt
    from memory.stores.base import ArchiveDocument

    doc = ArchiveDocument(id="d1", session="session:s", summary="## Facts learned\n- Name: Kim\n- Works at Acme", seq=1)
    prompt = build_prompt(documents=[doc], files={}, caps={})
    edits = json.loads(await as_text_completion(OfflineChatModel())(prompt))["edits"]
    assert [(e["text"], e["source"]) for e in edits] == [("Name: Kim", "d1"), ("Works at Acme", "d1")]


REVIEW_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("list_experiences", "read_experience", "create_experience", "update_experience")
]


def review_request(run_xml, *steps):
    from agents.llm.offline import OFFLINE_REVIEW_MARKER

    return [
        {"role": "system", "content": f"{OFFLINE_REVIEW_MARKER}\nYou review runs."},
        user(f"Review this run.\n<run>\n{run_xml}\n</run>"),
        *steps,
    ]


def call_and_result(call_id, name, arguments, result):
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


async def test_the_reviewer_lists_then_creates_or_updates_one_lesson_per_failed_tool():
    failed = (
        '<message role="tool" name="todo" status="error">Error: invalid arguments for todo: item is required</message>'
    )
    ok = '<message role="tool" name="todo" status="ok">Added.</message>'
    quiet = await complete(OfflineChatModel(), messages=review_request(ok), tools=REVIEW_TOOLS)
    assert quiet.tool_calls == () and quiet.content == "Nothing to record."

    first = await complete(OfflineChatModel(), messages=review_request(failed), tools=REVIEW_TOOLS)
    assert [c.name for c in first.tool_calls] == ["list_experiences"]
    listed = call_and_result("c1", "list_experiences", {}, "No lessons recorded yet.")
    create = await complete(OfflineChatModel(), messages=review_request(failed, *listed), tools=REVIEW_TOOLS)
    [call] = create.tool_calls
    args = json.loads(call.arguments_json)
    assert call.name == "create_experience" and args["name"] == "Calling todo"
    assert "invalid arguments for todo: item is required" in args["body"] and args["description"]
    done = call_and_result("c2", "create_experience", args, "Created experience.calling-todo.md.")
    final = await complete(OfflineChatModel(), messages=review_request(failed, *listed, *done), tools=REVIEW_TOOLS)
    assert final.tool_calls == () and "calling-todo" in final.content

    existing = call_and_result(
        "c1", "list_experiences", {}, "- calling-todo: Calling todo — What to check (updated 2025-01-01)"
    )
    read = await complete(OfflineChatModel(), messages=review_request(failed, *existing), tools=REVIEW_TOOLS)
    assert [(c.name, json.loads(c.arguments_json)) for c in read.tool_calls] == [
        ("read_experience", {"name": "calling-todo"})
    ]
    body = "---\nname: Calling todo\ndescription: x\nupdated: 2025-01-01T00:00:00+00:00\n---\n## Lesson\nOld text."
    opened = call_and_result("c2", "read_experience", {"name": "calling-todo"}, body)
    update = await complete(OfflineChatModel(), messages=review_request(failed, *existing, *opened), tools=REVIEW_TOOLS)
    [call] = update.tool_calls
    assert call.name == "update_experience"
    assert (
        json.loads(call.arguments_json)["body"]
        == "## Lesson\nOld text.\n- invalid arguments for todo: item is required"
    )
    # not a review without the marker or without the tools
    plain = await complete(OfflineChatModel(), messages=[user("hello")], tools=REVIEW_TOOLS)
    assert plain.tool_calls == ()


async def test_a_compact_summary_as_last_message_triggers_no_tools():
    summary = user(
        "[compact_summary] Earlier history.\n## Open tasks\n- Try “remember that …”, “search the archive for …”"
    )
    completion = await complete(OfflineChatModel(), messages=[SYSTEM, summary], tools=TOOLS)
    assert completion.tool_calls == () and "compacted" in completion.content


async def test_summary_sections_named_like_roles_are_kept():
    instruction = {
        "role": "system",
        "content": "Summarize the earlier history. Write Markdown with exactly these level-2 sections:\n"
        "## Goal\n## Decisions\n## Facts learned\n## Open tasks\n## Reasoning trail\n## Tool results that matter",
    }
    text = await as_text_completion(OfflineChatModel())(
        [instruction, user("<transcript>\nuser: My name is Sam.\n</transcript>")]
    )
    assert "## Tool results that matter" in text and "## Facts learned\n- Name: Sam" in text
