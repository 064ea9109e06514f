"""``OfflineChatModel``: the built-in deterministic model. No network; the same input always
gives the same events. It is what ``make run`` uses without an endpoint, and the tests'
workhorse, so it exercises the real paths: reasoning and content stream in several chunks, tool
calls are made when tools are offered, the ReAct loop gets a final answer after tool results.

What it does, by request (first match wins):

1. **Experience review** (``REVIEW_MARKER`` in the instructions, the review tools offered): the
   ExperienceReviewAgent's steps, one lesson per failed tool call (``offline_review``).
2. **Compact summary**: the request contains ``OFFLINE_SUMMARY_MARKER``, or (no tools offered)
   its instructions ask to summarize and name at least three of ``SUMMARY_SECTIONS``. Answer: a
   markdown summary with the requested headings (``## Goal`` ... or the request's own ``#``
   headings), built from the transcript: Goal = the first user message, Decisions, Facts (from
   user messages, normalised like "Name: Sam"), Reasoning trail (from ``reasoning_content``),
   Tool results (excerpts), Open tasks; an earlier summary in the input is merged in.
3. **Consolidation** (Dream Engine): the request contains ``OFFLINE_CONSOLIDATION_MARKER``, or
   (no tools) names SOUL.md, USER.md and MEMORY.md and asks for JSON. Answer: JSON
   ``{"edits": [{"file": "USER.md", "action": "append", "text": "Name: Sam"},
   {"file": "USER.md", "action": "replace", "old": "Lives in Lyon", "text": "Lives in Paris"},
   ...]}`` from the facts in the input, skipping facts the current files already hold.
   When the request shows archive documents (``<archive_document id=..>``, the Dream Engine's
   form), every edit also names its ``source`` document and what it is ``about``, actions are
   ``add``/``update``/``remove`` ("forget that X" removes a line), and later documents win
   (``offline_dream``).
4. **After tool results** (last message has role ``tool``): a final answer reporting each result.
   A last message that is a stored compact summary (a cleanup mid-turn evicted the request)
   gets a plain answer, never tool calls.
5. **Tool triggers** in the last user message, each only if that tool is offered (several in one
   message become parallel calls); names and argument shapes are ``OfflineTools`` fields:

   ===================================  ==============  =============================================
   user text                            tool            arguments
   ===================================  ==============  =============================================
   "remember that X" / "remember: X"    core_memory     {"action": "append", "file": F, "text": T}
   "X, remember that" (or "... this")   core_memory     the same
   "search the archive for X"           archive_search  {"query": "X"}
   "look up pruned message N"           pruned_lookup   {"seq": N}
   "todo: X"                            todo            {"action": "add", "item": "X"}
   "show my todo list"                  todo            {"action": "list"}
   "done: X"                            todo            {"action": "complete", "item": "X"}
   ===================================  ==============  =============================================

   F/T: a user fact goes to USER.md normalised ("remember that my name is Sam" -> "Name: Sam"),
   anything else to MEMORY.md as written ("The deploy is on Friday").
6. **Questions about the user** ("what do you know about me", "what is my name", "where do I
   live", "what is my <thing>"): answered from ``<user_profile>`` and ``<known_facts>`` in the
   system messages (XML-escaped text), then the rest of the context (archive and pruned
   sections, summaries), then earlier user messages, newest first.
7. **Other questions** (ending with "?") when the archive section recalled messages
   (``<archive_recall>``): the recalled message sharing most of the question's words (the
   user's own first), quoted with the day it was said.
8. Anything else: a short deterministic reply saying what it understood, with a reasoning trace.

Every reply ends with ``Usage`` counted with ``memory.tokens``.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.llm import offline_dream as dream
from agents.llm import offline_facts as facts
from agents.llm import offline_summary as summary
from agents.llm.base import ContentDelta, Finish, ModelEvent, ReasoningDelta, ToolCallReady, Usage
from agents.llm.offline_review import REVIEW_MARKER, plan_review
from agents.llm.offline_summary import text_of
from agents.llm.offline_tools import OfflineTools, Plan, plan_tool_calls, report_tool_results
from memory.assembly.archive import recall_lines
from memory.messages import ToolCall
from memory.retrieval import text as analysis
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, TOOL_CALL_OVERHEAD, count_text, truncate_text

OFFLINE_MODEL_NAME = "modex-offline"
#: Put this in a summarizer prompt to make the offline model answer with a compact summary.
OFFLINE_SUMMARY_MARKER = "[compact_summary request]"
#: How a stored compact summary begins (``memory.compression``): context, never a request.
COMPACT_SUMMARY_PREFIX = "[compact_summary]"
#: Put this in a Dream Engine prompt to make the offline model answer with JSON core-memory edits.
OFFLINE_CONSOLIDATION_MARKER = "[consolidation request]"
#: Put this in the ExperienceReviewAgent's instructions to make the offline model review a run.
OFFLINE_REVIEW_MARKER = REVIEW_MARKER
SUMMARY_SECTIONS = summary.SUMMARY_SECTIONS


_TAGS = re.compile(r"</?[A-Za-z_][\w.-]*(?:\s[^<>]*)?/?>")
_FRAGMENT = re.compile(r"[<>\"\u201c\u201d]|\u2026")
_RECALL = re.compile(r"<archive_recall>(?P<body>.*?)</archive_recall>", re.DOTALL)
_CONVERSATION = re.compile(r"<conversation(?P<attrs>[^>]*)>(?P<body>.*?)</conversation>", re.DOTALL)
_GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|hallo|bonjour)\b", re.IGNORECASE)


class OfflineChatModel:
    """The deterministic offline ChatModel. ``chunk_delay`` (seconds) slows streaming down for UI
    demos (0: only yield to the event loop between chunks); ``chunk_words`` sets chunk size."""

    is_offline = True

    def __init__(
        self,
        *,
        chunk_delay: float = 0.0,
        chunk_words: int = 3,
        tools: OfflineTools | None = None,
        name: str = OFFLINE_MODEL_NAME,
    ) -> None:
        self.name = name
        self.chunk_delay = max(0.0, chunk_delay)
        self.chunk_words = max(1, chunk_words)
        self.tools = tools or OfflineTools()

    def __repr__(self) -> str:
        return f"OfflineChatModel(name={self.name!r})"

    def describe(self) -> str:
        return (
            f"{self.name}: the built-in offline model (deterministic, no network, no real language "
            "understanding); set OPENAI_BASE_URL to use a real model"
        )

    async def stream(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> AsyncIterator[ModelEvent]:
        """See ``ChatModel.stream``; ``model``, ``temperature``, ``timeout`` and ``response_format``
        are ignored (its structured answers are always the JSON asked for)."""
        plan = self._plan(messages, tools)
        finish = "tool_calls" if plan.calls else "stop"
        content = plan.content
        if max_tokens is not None and count_text(content) > max_tokens:
            content, finish = truncate_text(content, max_tokens, marker=""), "length"
        first = True
        for kind, text in [(ReasoningDelta, plan.reasoning), (ContentDelta, content)]:
            for piece in self._pieces(text):
                if not first:
                    await asyncio.sleep(self.chunk_delay)
                first = False
                yield kind(piece)
        calls = [self._call(messages, i, name, args) for i, (name, args) in enumerate(plan.calls)]
        for call in calls:
            await asyncio.sleep(0)
            yield ToolCallReady(call)
        prompt = _count_prompt(messages, tools)
        completion = count_text(content) + count_text(plan.reasoning)
        completion += sum(TOOL_CALL_OVERHEAD + count_text(c.name) + count_text(c.arguments_json) for c in calls)
        yield Usage(prompt, completion, prompt + completion)
        yield Finish(finish)

    # -- planning ----------------------------------------------------------------------------

    def _plan(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Plan:
        offered = {t.get("function", {}).get("name") for t in tools or () if isinstance(t, dict)}
        system = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
        last = messages[-1] if messages else {"role": "user", "content": ""}
        review = plan_review(messages, offered)
        if review is not None:
            return review
        # Only system messages and the last message can instruct; their XML memory sections
        # (which may hold earlier summaries) are not instructions.
        probes = [text_of(m.get("content")) for m in messages if m.get("role") == "system"]
        probes += [text_of(last.get("content"))] if last.get("role") != "system" else []
        marked = "\n".join(probes)
        instructions = [facts.without_sections(p) for p in probes]
        if OFFLINE_SUMMARY_MARKER in marked or (not offered and any(map(_asks_for_summary, instructions))):
            check = _instruction_check(messages, OFFLINE_SUMMARY_MARKER, _asks_for_summary)
            instruction, turns = summary.transcript(messages, check)
            return Plan(
                "Compact summary requested: collecting goal, decisions, facts, reasoning, tool results and open tasks.",
                summary.build_summary(instruction, turns),
            )
        if OFFLINE_CONSOLIDATION_MARKER in marked or (not offered and any(map(_asks_for_consolidation, instructions))):
            check = _instruction_check(messages, OFFLINE_CONSOLIDATION_MARKER, _asks_for_consolidation)
            instruction, turns = summary.transcript(messages, check)
            everything = "\n".join(text_of(m.get("content")) for m in messages)
            if dream.has_documents(everything):
                return Plan(
                    "Consolidation requested: reading each archive document, oldest first, against the current files.",
                    dream.build_document_consolidation(everything),
                )
            return Plan(
                "Consolidation requested: extracting durable facts and comparing them with the current core memory.",
                summary.build_consolidation(instruction, turns, everything),
            )
        if last.get("role") == "tool":
            return report_tool_results(self.tools, messages)
        if last.get("role") == "user" and text_of(last.get("content")).lstrip().startswith(COMPACT_SUMMARY_PREFIX):
            # A cleanup mid-turn evicted the request itself: the summary is context, not an
            # instruction (its quoted phrases must not trigger tools).
            return Plan(
                "The context was just compacted and the request is now part of the summary; no new tool calls.",
                "I compacted our conversation to stay within my context window; the summary above keeps what "
                "matters. Tell me how to continue.",
            )
        user = next((text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        recalled = _RECALL.match(user)
        if recalled is not None:  # recall sent with the message (recall_placement "message")
            system, user = f"{system}\n{recalled.group()}", user[recalled.end():].lstrip("\n")
        plan = plan_tool_calls(self.tools, user, offered, core=summary.existing_core(system))
        return plan or self._answer(user, system, messages)

    def _answer(self, user: str, system: str, messages: list[dict[str, Any]]) -> Plan:
        profile = facts.section(system, "user_profile") or ""
        known = facts.section(system, "known_facts") or ""
        rest = html.unescape(facts.without_sections(system, ("your_identity", "user_profile", "known_facts")))
        # Only what the user said counts as evidence about the user (an assistant's "your name
        # is ..." does not); earlier user messages newest first, so a correction wins.
        earlier = [text_of(m.get("content")) for m in reversed(messages[:-1]) if m.get("role") == "user"]
        sources = [("<user_profile>", profile), ("<known_facts>", known), ("the context", rest)]
        sources += [("our conversation", text) for text in earlier]
        question = facts.question_kind(user)
        if question is not None and question[0] == "about":
            return self._about(profile, known, sources[2:])
        if question is not None:
            kind, attr = question
            label = {"name": "your name", "location": "where you live"}.get(kind, f"your {attr}")
            found = facts.find_fact(sources, kind, attr)
            if found is None:
                return Plan(
                    f"Looked for {label} in core memory and the context: not found.", f"I don't know {label} yet."
                )
            value, where = found
            answer = {"name": f"Your name is {value}.", "location": f"You live in {value}."}
            return Plan(f"Found {label} in {where}.", answer.get(kind, f"Your {attr} is {value}."))
        if _GREETING.search(user):
            name = facts.find_fact(sources, "name")
            hello = f"Hello, {name[0]}!" if name else "Hello!"
            return Plan("The user greeted me.", f"{hello} I'm {self.name}, the built-in offline model. How can I help?")
        recalled = _recalled_answer(user, system)
        if recalled is not None:
            return recalled
        said = facts.clean_value(" ".join(user.split())[:200], cut_clauses=False) or "(nothing)"
        count = len(facts.lines_of(profile)) + len(facts.lines_of(known))
        reasoning = (
            f"No tool trigger or question about the user matched. The user wrote {len(user.split())} word(s); "
            f"core memory holds {count} line(s)."
        )
        content = (
            f"I understood: “{said}”. I'm the offline model, so I answer from what is in my context, not from "
            "general knowledge. Try “remember that …”, “search the archive for …”, “todo: …”, or ask "
            "“what do you know about me?”."
        )
        return Plan(reasoning, content)

    @staticmethod
    def _about(profile: str, known: str, others: list[tuple[str, str]]) -> Plan:
        # Core memory's lines first, each once; then facts found elsewhere (newest first), only
        # clean normalised lines, and a single-valued fact (name, home) only if none is known yet.
        lines: list[str] = []
        seen: set[str] = set()
        for line in facts.lines_of(profile) + facts.lines_of(known):
            # One fact said two ways ("My favourite colour is green" in MEMORY.md, "User's
            # favourite colour is green" in USER.md) is listed once.
            keys = {facts.normalize(line)} | {facts.normalize(f.text) for f in facts.extract_facts(line)}
            if not keys & seen:
                seen.update(keys)
                lines.append(line)
        kinds = {f.kind for line in lines for f in facts.extract_facts(line) if f.single_valued}
        for _, text in others:
            # The context's own markup (the pruned catalog's <message> tags, ...) is not part of
            # any fact; a line that still carries a quote or a bracket is a fragment, not a fact.
            for fact in facts.extract_facts(_TAGS.sub("\n", text)):
                if fact.file == facts.SOUL_FILE or facts.normalize(fact.text) in seen:
                    continue
                if _FRAGMENT.search(fact.text):
                    continue
                if fact.single_valued and fact.kind in kinds:
                    continue
                seen.add(facts.normalize(fact.text))
                kinds.update({fact.kind} if fact.single_valued else set())
                lines.append(fact.text)
        if not lines:
            return Plan(
                "Core memory and the context hold nothing about the user.",
                "I don't know anything about you yet. Tell me, and ask me to remember it.",
            )
        body = "\n".join(f"- {line}" for line in lines)
        return Plan(
            f"Answering from core memory and the context: {len(lines)} item(s).",
            f"Here is what I know about you:\n{body}",
        )

    # -- output ------------------------------------------------------------------------------

    def _pieces(self, text: str) -> list[str]:
        words = re.findall(r"\s*\S+\s*", text)
        if not words:
            return []
        n = self.chunk_words
        return ["".join(words[i : i + n]) for i in range(0, len(words), n)]

    @staticmethod
    def _call(messages: list[dict[str, Any]], index: int, name: str, args: dict[str, Any]) -> ToolCall:
        digest = hashlib.sha256(json.dumps([messages, index, name], sort_keys=True, default=str).encode()).hexdigest()
        return ToolCall(id=f"call_{digest[:24]}", name=name, arguments_json=json.dumps(args, ensure_ascii=False))


def _instruction_check(
    messages: list[dict[str, Any]], marker: str, asks: Callable[[str], bool]
) -> Callable[[dict[str, Any]], bool]:
    """Which messages instruct (system messages, the marker's message, a trailing request);
    the others are the material to summarize or consolidate."""
    last = messages[-1] if messages else None

    def check(message: dict[str, Any]) -> bool:
        text = text_of(message.get("content"))
        if message.get("role") == "system" or marker in text:
            return True
        return message is last and message.get("role") == "user" and asks(facts.without_sections(text))

    return check


def _asks_for_summary(instructions: str) -> bool:
    """An instruction, not a summary itself: an imperative about a summary before any markdown
    heading (a summary's own Goal may well say "summarize ..."), and >= 3 section names."""
    preamble = re.split(r"^#{1,6}\s", instructions, maxsplit=1, flags=re.MULTILINE)[0]
    imperative = r"\bsummari[sz]e\b|\b(?:write|produce|create|generate|give|return)\b[^.\n]{0,40}\bsummary\b"
    if not re.search(imperative, preamble, re.IGNORECASE):
        return False
    lowered = instructions.lower()
    return sum(s.lower() in lowered for s in SUMMARY_SECTIONS) >= 3


def _asks_for_consolidation(instructions: str) -> bool:
    """Names the three core memory files and asks for JSON."""
    return all(f in instructions for f in ("SOUL.md", "USER.md", "MEMORY.md")) and "json" in instructions.lower()


def _count_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    total = REPLY_PRIMING
    for message in messages:
        total += MESSAGE_OVERHEAD + count_text(text_of(message.get("content")))
        total += count_text(text_of(message.get("reasoning_content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            total += TOOL_CALL_OVERHEAD + count_text(function.get("name")) + count_text(function.get("arguments"))
    if tools:
        total += count_text(json.dumps(tools, sort_keys=True))
    return total


def _recalled_answer(question: str, system: str) -> Plan | None:
    """A question answered by quoting the message the archive section recalled that shares most
    of its words (the user's own words first: what they said about themselves and their people),
    with the day it was said; None when the question is not one or nothing recalled shares a word."""
    if not question.rstrip().endswith("?"):
        return None
    recall = _RECALL.search(system)
    wanted = set(analysis.terms(question))
    if recall is None or not wanted:
        return None
    best = None
    for conversation in _CONVERSATION.finditer(recall.group("body")):
        opened = dict(facts.ATTRIBUTES.findall(conversation.group("attrs"))).get("date", "")
        for _, speaker, said, text in recall_lines(conversation.group("body")):
            text = html.unescape(text)
            shared = len(wanted & set(analysis.terms(text)))
            rank = (shared, speaker == "user")
            if shared and (best is None or rank > best[0]):
                best = (rank, html.unescape(said or opened), speaker, text)
    if best is None:
        return None
    (shared, _), day, speaker, text = best
    who = "you said" if speaker == "user" else "I said"
    return Plan(
        f"The question shares {shared} word(s) with a message recalled from an earlier conversation.",
        f"From our earlier conversation on {day}, {who}: “{text.strip()}”",
    )
