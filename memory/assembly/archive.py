"""ArchiveSummaryProvider: the most recent archive documents' summaries, as ``<archive_summaries>``.

Only when the agent's ``archive_enabled`` is on. Newest documents are chosen first until
``config.archive_budget_tokens`` is used up, then shown oldest-to-newest so the story reads
forward. The full documents stay in the archive; a note tells the model how to search them.
"""

from __future__ import annotations

from memory.assembly.base import AssemblyContext, MemoryProvider, RenderMemo, Section
from memory.assembly.xml import element, wrap
from memory.stores.base import ArchiveDocument
from memory.tokens import count_text, truncate_text

TAG = "archive_summaries"
SECTION_NAME = "archive summaries"
DEFAULT_SEARCH_TOOL = "archive_search"

# Documents fetched per store call: summaries are rarely under ~40 tokens, so this covers the
# budget in one read almost always, without listing the whole archive.
_MIN_FETCH = 4
_MAX_FETCH = 256
_TOKENS_PER_DOC_GUESS = 40


class ArchiveSummaryProvider(MemoryProvider):
    """Recent archive summaries within ``config.archive_budget_tokens``.

    Each document renders as ``<document seq=".." date="YYYY-MM-DD" title="..">summary</document>``.
    If even the newest summary does not fit, it is shortened (marked) rather than left out.
    """

    name = SECTION_NAME

    def __init__(self, *, search_tool: str = DEFAULT_SEARCH_TOOL) -> None:
        self._search_tool = search_tool
        # (scope, budget) -> the section, while the documents listed are the same.
        self._memo = RenderMemo()

    def provide(self, ctx: AssemblyContext) -> Section | None:
        if not ctx.config.archive_enabled:
            return None
        budget = ctx.config.archive_budget_tokens
        scope = ctx.resolved_archive_scope()
        limit = max(_MIN_FETCH, min(_MAX_FETCH, budget // _TOKENS_PER_DOC_GUESS + 1))
        key = (scope.key(), budget)
        while True:
            newest = ctx.stores.archive.list_summaries(scope, limit=limit, newest_first=True)
            memo = self._memo.get(key, (limit, newest))
            if memo is not None:
                return memo
            chosen = self._fit(newest, budget)
            exhausted = len(newest) < limit
            # Everything fetched fitted and more may exist: fetch a bigger page once more.
            if len(chosen) < len(newest) or exhausted or limit >= _MAX_FETCH:
                break
            limit = min(_MAX_FETCH, limit * 4)
        section = None
        if chosen:
            more = not exhausted or len(chosen) < len(newest)
            section = Section.of(name=SECTION_NAME, tag=TAG, text=self._render(chosen, more=more), items=len(chosen))
        self._memo.put(key, (limit, newest), section)
        return section

    # -- rendering ----------------------------------------------------------------------------

    def _note(self, *, more: bool) -> str:
        text = "Summaries of this agent's earlier conversations with this user, oldest first."
        if more:
            text += " Older documents exist and are not shown."
        text += f" The {self._search_tool} tool searches the full archive."
        return element("note", text)

    @staticmethod
    def _document(doc: ArchiveDocument, summary: str) -> str:
        attrs = {"seq": doc.seq, "date": doc.created_at.date().isoformat(), "title": doc.title or None}
        return element("document", summary, attrs=attrs)

    def _render(self, newest_first: list[tuple[ArchiveDocument, str]], *, more: bool) -> str:
        children = [self._note(more=more)]
        children.extend(self._document(doc, summary) for doc, summary in reversed(newest_first))
        return wrap(TAG, children)

    def _fit(self, newest: list[ArchiveDocument], budget: int) -> list[tuple[ArchiveDocument, str]]:
        """The longest run of the newest documents whose render fits ``budget``.

        Fitting assumes the longer note ("older documents exist"), so the final render, whatever
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
