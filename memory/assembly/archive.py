"""ArchiveProvider: what earlier conversations said that bears on the latest message, and the
summaries of the most recent ones: the ``archive`` section.

Only when the agent's ``archive_enabled`` is on. Within ``config.archive_budget_tokens``:

1. ``<archive_recall>``: the archived messages most relevant to the user's latest message
   (``memory.retrieval``: BM25 and vectors fused, within this agent's archive of this user),
   each with the other half of its exchange (the reply to a request or a question, the
   request a reply answered: the answer is often in the turn next to the words that match) and,
   with room left, the turns around it up to ``RECALL_WINDOW`` on each side, nearest first.
   Messages are grouped by conversation (its title and the day it opened said once), a line
   each: a handle that ``archive_read`` opens, the speaker, its own date when said on another
   day, and the text (``RECALL_LINE``).
   Messages still in the live conversation are left out (they are in context already).
   It takes at most ``RECALL_SHARE`` of the budget; what it leaves goes to the summaries. Hits
   are chosen best first and shown oldest first, so a fact and its later correction read in order.
2. ``<archive_summaries>``: the newest documents' summaries that fit, shown oldest to newest,
   each with the dates it spans.

So a model that never calls a tool still sees what was said about the question, and when.
"""

from __future__ import annotations

import re
from datetime import datetime

from memory.assembly.base import AssemblyContext, MemoryProvider, RenderMemo, Section, SectionPart, joined_tokens
from memory.assembly.xml import element, escape_text, wrap
from memory.compression.dates import day
from memory.memo import Memo
from memory.retrieval.messages import ArchivedMessage
from memory.retrieval.service import Retrieval
from memory.stores import textsearch
from memory.stores.base import ArchiveDocument
from memory.tokens import MAX_CHARS_PER_TOKEN, count_text, truncate_text

TAG = "archive_summaries"
RECALL_TAG = "archive_recall"
SECTION_NAME = "archive"
DEFAULT_SEARCH_TOOL = "archive_search"
DEFAULT_READ_TOOL = "archive_read"

#: The share of the archive budget recalled messages may take; what they leave, a fifth at
#: least, is for the newest summaries. What bears on the latest message comes first: at 500
#: tokens for a LoCoMo-format history three times as long, 0.6 carried 66% of the evidence and
#: 0.8 83% (benchmarks/results/recall_before_after.md).
RECALL_SHARE = 0.8
#: At most this many messages match (each brings turns around it), and each is shown whole up
#: to this many characters (longer ones are cut around the words the query matched).
RECALL_LIMIT = 12
#: Turns on each side of a matched message that may come with it, room allowing.
RECALL_WINDOW = 2
RECALL_CHARS = 700
_MIN_RECALL_TOKENS = 48
#: Fewer tokens than any recalled message's line takes ("1.1 user: x" takes six).
_MIN_MESSAGE_TOKENS = 5
#: Conversations whose tags' count the provider remembers across turns (the same conversations
#: come back turn after turn; counting their tags again cost about 0.25 ms a turn).
_TAG_COUNTS_KEPT = 4096
#: What recall leaves to the summaries is rounded down to a multiple of this many tokens.
SUMMARY_BUDGET_STEP = 32

# Documents fetched per store call: summaries are rarely under ~40 tokens, so this covers the
# budget in one read almost always, without listing the whole archive.
_MIN_FETCH = 4
_MAX_FETCH = 256
_TOKENS_PER_DOC_GUESS = 40


def document_dates(document: ArchiveDocument) -> str:
    """The days a document's messages span ("8 May 2023", "8 May 2023 – 9 May 2023"); documents
    from before spans were recorded give the day they were archived."""
    try:
        first = datetime.fromisoformat(document.metadata["first_at"])
        last = datetime.fromisoformat(document.metadata["last_at"])
    except (KeyError, TypeError, ValueError):
        return day(document.created_at)
    return day(first) if first.date() == last.date() else f"{day(first)} – {day(last)}"


def excerpt(message: ArchivedMessage, words: tuple[str, ...], *, width: int = RECALL_CHARS) -> str:
    """The message whole when short enough, else ``width`` characters around its first matched word."""
    return textsearch.snippet(message.text, words, width=width)


#: One recalled message's line: handle, speaker, the day it was said when another than the day
#: its conversation opened, then the text: "12.37 user: I sold my first painting!",
#: "12.41 assistant, 9 May 2023: Congratulations!". A tag per message took 15 tokens, as many as
#: a short turn's own text (LoCoMo-style chats average about 25), so lines fit a third more turns.
RECALL_LINE = re.compile(r"^(?P<handle>\d+\.\d+) (?P<speaker>[^\s,:]+)(?:, (?P<date>[^:\n]+))?: ", re.MULTILINE)
_SPEAKER_UNSAFE = re.compile(r"[\s,:]+")
_ESCAPED = re.compile(r"[&<>]")


def recall_lines(body: str) -> list[tuple[str, str, str | None, str]]:
    """Each message line of a rendered ``<conversation>``'s body: (handle, speaker, the day it was
    said or None for the conversation's, the text as rendered, XML-escaped)."""
    starts = list(RECALL_LINE.finditer(body))
    ends = [m.start() for m in starts[1:]] + [len(body)]
    return [(m["handle"], m["speaker"], m["date"], body[m.end():end].rstrip("\n")) for m, end in zip(starts, ends)]


def _speaker(message: ArchivedMessage) -> str:
    return _SPEAKER_UNSAFE.sub("_", escape_text(message.speaker)) or "unknown"


def _line(message: ArchivedMessage, matched: tuple[str, ...], date: str | None = None) -> str:
    """One recalled message's line (``date``: when it was said on another day than its
    conversation opened). The excerpt is one line (its whitespace collapsed), so no text of a
    message can start a line and pass for another message or another speaker."""
    text = escape_text(excerpt(message, matched))
    said = f", {date}" if date else ""
    return f"{message.handle} {_speaker(message)}{said}: {text}"


#: Tokens of " speaker:" by speaker: a handful of speakers recur in every recall.
_SPEAKER_TOKENS = Memo(1024)


def _handle_tokens(handle: str) -> int:
    """Tokens of a handle ("12.37"): the tokenizer reads digits three at a time, and the dot."""
    return sum(-(-len(part) // 3) for part in handle.split(".")) + 1


def _line_tokens(message: ArchivedMessage, matched: tuple[str, ...]) -> int:
    """The tokens of ``_line(message, matched)`` and its joining newline, about. A message shown
    whole with nothing to escape takes its stored count (``ArchivedMessage.text_tokens``) plus its
    handle and speaker's, so the dozens of messages weighed each turn are not all tokenized again
    (most are weighed and left out); others are rendered and counted. Tokens do not add up exactly
    across the join (a token or so either way): the render as a whole is counted exactly."""
    known = message.text_tokens
    if known is None or len(message.text) > RECALL_CHARS or _ESCAPED.search(message.text):
        return count_text(_line(message, matched)) + 1  # not known, cut, or escaped
    speaker = _speaker(message)
    tokens = _SPEAKER_TOKENS.get(speaker)
    if tokens is None:
        tokens = count_text(f" {speaker}:")
        _SPEAKER_TOKENS.put(speaker, tokens)
    return _handle_tokens(message.handle) + tokens + known + 1


def _least_tokens(message: ArchivedMessage) -> int:
    """Fewer tokens than its shown text takes, for anything people write (a token per 2-8
    characters). Only long runs of one character (a line of dashes) pack more per token: such a
    message is at worst left out when little room is left, never let over the budget."""
    return min(len(message.text), RECALL_CHARS) // MAX_CHARS_PER_TOKEN


class _Recall:
    """The messages recall has chosen so far, best first, each rendered without a date of its own,
    and the tokens they take."""

    def __init__(self, budget: int, *, used: int, tag_counts: Memo) -> None:
        self.budget, self.used = budget, used
        self._tag_counts = tag_counts  # (title, day) -> tokens of a conversation's tags, across turns
        self.chosen: list[tuple[ArchivedMessage, tuple[str, ...], str]] = []
        self.costs: list[int] = []  # each chosen line's tokens (``_line_tokens``)
        self.shown: set[str] = set()
        self._opened: set[str] = set()  # sessions whose conversation element is counted
        self._tag_tokens: dict[str, int] = {}  # session -> tokens of its conversation's tags

    def take(self, group: list[tuple[ArchivedMessage, tuple[str, ...]]]) -> None:
        """Add ``group`` (a message and what comes with it), dropping its last turns until it fits."""
        room = self.budget - self.used
        if room < _MIN_MESSAGE_TOKENS:
            return  # full: nothing more is rendered or counted
        group = [(m, matched) for m, matched in group if m.handle not in self.shown]
        # What cannot fit by a lower bound of its size is not rendered and counted at all (the
        # exact count below decides what does).
        while group and sum(_MIN_MESSAGE_TOKENS + _least_tokens(m) for m, _ in group) > room:
            group.pop()
        costs = [_line_tokens(m, matched) for m, matched in group]
        while group:
            opening = {m.session: self._tags(m) for m, _ in group if m.session not in self._opened}
            cost = sum(costs) + sum(opening.values())
            if self.used + cost <= self.budget:
                break
            group.pop()  # the last of the group goes first
            costs.pop()
        for (message, matched), tokens in zip(group, costs, strict=True):
            self.chosen.append((message, matched, _line(message, matched)))
            self.costs.append(tokens)
            self.shown.add(message.handle)
        if group:
            self._opened.update(opening)
            self.used += cost

    def _tags(self, message: ArchivedMessage) -> int:
        known = self._tag_tokens.get(message.session)
        if known is None:
            key = (message.document_title or None, day(message.created_at))
            known = self._tag_counts.get(key)
            if known is None:
                known = count_text(wrap("conversation", ["x"], attrs={"title": key[0], "date": key[1]})) + 1
                self._tag_counts.put(key, known)
            self._tag_tokens[message.session] = known
        return known


class ArchiveProvider(MemoryProvider):
    """The ``archive`` section (see the module docstring). Without ``retrieval`` it shows the
    summaries alone."""

    name = SECTION_NAME

    def __init__(
        self,
        *,
        retrieval: Retrieval | None = None,
        search_tool: str = DEFAULT_SEARCH_TOOL,
        read_tool: str = DEFAULT_READ_TOOL,
        recall_share: float = RECALL_SHARE,
        recall_limit: int = RECALL_LIMIT,
    ) -> None:
        self._retrieval = retrieval
        self._search_tool = search_tool
        self._read_tool = read_tool
        self._recall_share = recall_share
        self._recall_limit = recall_limit
        # (scope, budget) -> the summaries' part, while the documents listed are the same.
        self._memo = RenderMemo()
        self._tag_counts = Memo(_TAG_COUNTS_KEPT)  # (title, day) -> tokens of a conversation's tags
        self._frame_tokens: int | None = None  # tokens of the recall element with no message in it

    def provide(self, ctx: AssemblyContext) -> Section | None:
        if not ctx.config.archive_enabled:
            return None
        budget = ctx.config.archive_budget_tokens
        scope = ctx.resolved_archive_scope()
        recall, recalled, recall_tokens = "", 0, 0
        if self._retrieval is not None and ctx.query:
            recall, recalled, recall_tokens = self._recall(ctx, int(budget * self._recall_share))
        left = budget - (recall_tokens + 1 if recall else 0)
        if ctx.recall_in_message:
            # The summaries stay in the system message while recall goes with the message: their
            # room is what recall may take at most, whatever it took, so the system message stays
            # the same from one user message to the next.
            left = budget - int(budget * self._recall_share) - 1
        elif recall:
            # The summaries' fit is remembered per budget; what recall leaves changes every turn,
            # so it is rounded down to a step: a fit is reused across turns for a few tokens.
            left -= left % SUMMARY_BUDGET_STEP
        summaries, documents, summary_tokens = self._summaries(scope.key(), ctx, left)
        parts = tuple(
            SectionPart(key=tag, text=part, tokens=tokens, items=items)
            for tag, part, items, tokens in (
                (RECALL_TAG, recall, recalled, recall_tokens),
                (TAG, summaries, documents, summary_tokens),
            )
            if part
        )
        text = "\n".join(part.text for part in parts)
        if not text:
            return None
        return Section(
            name=SECTION_NAME, tag=TAG, text=text, tokens=joined_tokens(parts), items=recalled + documents, parts=parts
        )

    # -- recall -------------------------------------------------------------------------------

    def _recall(self, ctx: AssemblyContext, budget: int) -> tuple[str, int, int]:
        """The ``<archive_recall>`` element within ``budget``, how many messages it shows, and its
        tokens (("", 0, 0) when nothing is recalled)."""
        if budget < _MIN_RECALL_TOKENS:
            return "", 0, 0
        current, live = ctx.session.key(), ctx.live_seqs

        def in_context(message: ArchivedMessage) -> bool:
            return message.session == current and message.seq in live

        hits = self._retrieval.search(
            ctx.resolved_archive_scope(), ctx.query, limit=self._recall_limit, exclude=in_context,
            window=RECALL_WINDOW, names=ctx.participants,
        )
        if not hits:
            return "", 0, 0
        if self._frame_tokens is None:
            self._frame_tokens = count_text(self._render_recall([]))
        recall = _Recall(budget, used=self._frame_tokens, tag_counts=self._tag_counts)
        # Best first, while they fit: each hit with the other half of its exchange; then, round
        # by round with the room left, the turns around each hit, nearest first.
        for hit in hits:
            recall.take([(hit.message, hit.matched), *([(hit.partner, ())] if hit.partner is not None else [])])
        around = [[m for m in hit.nearby() if m is not hit.partner] for hit in hits if hit.message.handle in recall.shown]
        for step in range(2 * RECALL_WINDOW):
            for turns in around:
                if step < len(turns):
                    recall.take([(turns[step], ())])
        chosen, costs = recall.chosen, recall.costs
        if not chosen:
            return "", 0, 0
        text = self._render_recall(chosen)
        tokens = count_text(text)
        # Joins, dates and estimated lines may come to more than was counted: the last chosen
        # (the least relevant) go until the exact count fits, as many at once as the excess says,
        # by each line's exact count (an estimate that was short would let too many go).
        exact = False
        while chosen and tokens > budget:
            if not exact:
                costs[:] = [count_text(line) + 1 for _, _, line in chosen]
                exact = True
            over = tokens - budget
            while chosen and over > 0:
                chosen.pop()
                over -= costs.pop()
            text = self._render_recall(chosen)
            tokens = count_text(text)
        return (text, len(chosen), tokens) if chosen else ("", 0, 0)

    def _render_recall(self, chosen: list[tuple[ArchivedMessage, tuple[str, ...], str]]) -> str:
        note = (
            "What earlier conversations with this user said about their latest message, oldest "
            "first. A line each: handle speaker[, day if not the conversation's]: text. Later lines "
            f"may correct earlier ones. {self._read_tool} reads around a handle; {self._search_tool} "
            "finds more."
        )
        by_session: dict[str, list[tuple[ArchivedMessage, tuple[str, ...], str]]] = {}
        for entry in sorted(chosen, key=lambda entry: (entry[0].created_at, entry[0].seq)):
            by_session.setdefault(entry[0].session, []).append(entry)
        groups = []
        for entries in by_session.values():
            entries.sort(key=lambda entry: entry[0].seq)
            opened = day(entries[0][0].created_at)
            children = []
            for message, matched, text in entries:
                said = day(message.created_at)
                children.append(text if said == opened else _line(message, matched, said))
            attrs = {"title": entries[0][0].document_title or None, "date": opened}
            groups.append(wrap("conversation", children, attrs=attrs))
        return wrap(RECALL_TAG, [element("note", note), *groups])

    # -- summaries ----------------------------------------------------------------------------

    def _summaries(self, key: str, ctx: AssemblyContext, budget: int) -> tuple[str, int, int]:
        """The ``<archive_summaries>`` element within ``budget``, how many documents it shows, and
        its tokens; remembered per budget while the newest documents are the same."""
        scope = ctx.resolved_archive_scope()
        limit = max(_MIN_FETCH, min(_MAX_FETCH, budget // _TOKENS_PER_DOC_GUESS + 1))
        memo_key = (key, budget)
        while True:
            newest = ctx.stores.archive.list_summaries(scope, limit=limit, newest_first=True)
            memo = self._memo.get(memo_key, (limit, newest))
            if memo is not None:
                return memo
            chosen = self._fit(newest, budget)
            exhausted = len(newest) < limit
            # Everything fetched fitted and more may exist: fetch a bigger page once more.
            if len(chosen) < len(newest) or exhausted or limit >= _MAX_FETCH:
                break
            limit = min(_MAX_FETCH, limit * 4)
        result = ("", 0, 0)
        if chosen:
            more = not exhausted or len(chosen) < len(newest)
            text = self._render(chosen, more=more)
            result = (text, len(chosen), count_text(text))
        self._memo.put(memo_key, (limit, newest), result)
        return result

    def _note(self, *, more: bool) -> str:
        text = "Summaries of this agent's most recent earlier conversations with this user, oldest first."
        if more:
            text += " Older ones exist and are not shown."
        text += f" The {self._search_tool} tool searches everything that was said."
        return element("note", text)

    @staticmethod
    def _document(doc: ArchiveDocument, summary: str) -> str:
        attrs = {"seq": doc.seq, "date": document_dates(doc), "title": doc.title or None}
        return element("document", summary, attrs=attrs)

    def _render(self, newest_first: list[tuple[ArchiveDocument, str]], *, more: bool) -> str:
        children = [self._note(more=more)]
        children.extend(self._document(doc, summary) for doc, summary in reversed(newest_first))
        return wrap(TAG, children)

    def _fit(self, newest: list[ArchiveDocument], budget: int) -> list[tuple[ArchiveDocument, str]]:
        """The longest run of the newest documents whose render fits ``budget``.

        Fitting assumes the longer note ("older ones exist"), so the final render, whatever
        its note, stays within the budget. Each document's element is counted once to estimate
        how many fit; the exact count of the whole render then settles it, a document at a time
        (a render grows with every document, so the longest fitting run is found exactly).
        """
        if not newest:
            return []
        docs = [(doc, doc.summary) for doc in newest]

        def fits(k: int) -> bool:
            return count_text(self._render(docs[:k], more=True)) <= budget

        used = count_text(self._render([], more=True))
        k = 0
        for doc, summary in docs:
            used += count_text(self._document(doc, summary)) + 1  # + the joining newline, about
            if used > budget:
                break
            k += 1
        while k > 0 and not fits(k):
            k -= 1
        while k < len(docs) and fits(k + 1):
            k += 1
        if k:
            return docs[:k]
        shortened = self._shorten(newest[0], budget)
        return [(newest[0], shortened)] if shortened is not None else []

    def _shorten(self, doc: ArchiveDocument, budget: int) -> str | None:
        frame = count_text(self._render([(doc, "")], more=True))
        room = budget - frame - 2  # slack: tokens do not add up exactly across the join
        if room < 16:
            return None
        marker = f" [… shortened; {self._search_tool} has the full text]"
        summary = truncate_text(doc.summary, room, marker=marker)
        # Escaping can add tokens (& < > become entities): shrink until the render fits.
        while room >= 16 and count_text(self._render([(doc, summary)], more=True)) > budget:
            room -= 8
            summary = truncate_text(doc.summary, room, marker=marker)
        return summary if room >= 16 else None
