"""PrunedProvider: the session's pruned catalog as ``<pruned_messages>``, for every agent.

Cleanup moves messages out of the session into the pruned catalog; without this section the
model would not know they ever existed (a silent hole). Main agents and subagents alike get
it whenever the catalog is non-empty. Newest entries come first, each with its number (the
seq ``pruned_lookup`` takes), role, tools called and a short excerpt, and the day (``8 May 2023``,
UTC) on each entry whose day differs from the entry listed above it (messages of one day mostly
come together: a date on every entry would cost the tokens of several entries), within
``config.pruned_budget_tokens``; the section ends by saying how many older entries are not
listed. Entries whose seq is still live in the session are skipped: they are in the context
already (a cleanup that wrote the catalog but did not commit leaves such entries behind).
"""

from __future__ import annotations

from memory.assembly.base import AssemblyContext, MemoryProvider, RenderMemo, Section
from memory.assembly.xml import element, excerpt, wrap
from memory.compression.dates import day
from memory.compression.pruned import PrunedCatalog, PrunedEntry
from memory.text import storable
from memory.tokens import count_text

TAG = "pruned_messages"
SECTION_NAME = "pruned catalog"
LOOKUP_TOOL = "pruned_lookup"
DEFAULT_EXCERPT_CHARS = 160

# The exact count of the joined section is checked at the end; summing per-entry counts is
# only the fast estimate, off by at most about a token per join.
_JOIN_SLACK = 1


class PrunedProvider(MemoryProvider):
    """The pruned catalog of ``ctx.session`` within ``config.pruned_budget_tokens``.

    If the budget cannot hold a single entry, the section shrinks to a compact form that still
    says how many messages were removed and how to look them up: the count is what prevents a
    silent hole. That form fits any budget of at least ``PRUNED_MIN_BUDGET`` (which boot
    validation requires), so the section never exceeds a validated budget.
    """

    name = SECTION_NAME

    def __init__(self, *, catalog: PrunedCatalog, excerpt_chars: int = DEFAULT_EXCERPT_CHARS) -> None:
        if excerpt_chars < 16:
            raise ValueError("excerpt_chars must be at least 16")
        self._catalog = catalog
        self._excerpt_chars = excerpt_chars
        # (session, budget) -> the section, while the entries shown are the same.
        self._memo = RenderMemo()

    def provide(self, ctx: AssemblyContext) -> Section | None:
        by_seq: dict[int, PrunedEntry] = {}
        for entry in self._catalog.entries(ctx.session, before_seq=ctx.first_live_seq):
            if entry.seq not in ctx.live_seqs:
                by_seq[entry.seq] = entry  # a seq written twice (a retried cleanup): keep the last
        if not by_seq:
            return None
        newest_first = [by_seq[seq] for seq in sorted(by_seq, reverse=True)]
        budget = ctx.config.pruned_budget_tokens
        key = (ctx.session.key(), budget)
        section = self._memo.get(key, newest_first)
        if section is None:
            section = self._section(newest_first, budget)
            self._memo.put(key, newest_first, section)
        return section

    def _section(self, newest_first: list[PrunedEntry], budget: int) -> Section:
        total = len(newest_first)

        # Entries are rendered only until the budget is reached: a long catalog costs its
        # reading, not its rendering.
        rendered: list[str] = []
        used = count_text(self._render([], total=total, omitted=total, newest_omitted=newest_first[0].seq))
        above: str | None = None
        for entry in newest_first:
            when = day(entry.created_at)
            text = self._entry(entry, date=when if when != above else None)
            above = when
            cost = count_text(text) + _JOIN_SLACK
            if used + cost > budget:
                break
            used += cost
            rendered.append(text)
        shown = len(rendered)
        while True:
            omitted = total - shown
            newest = newest_first[shown].seq if omitted else None
            text = self._render(rendered[:shown], total=total, omitted=omitted, newest_omitted=newest)
            if count_text(text) <= budget:
                break
            if shown == 0:
                text = self._compact(total=total, newest=newest_first[0].seq)
                break
            shown -= 1
        return Section.of(name=SECTION_NAME, tag=TAG, text=text, items=shown)

    @staticmethod
    def _compact(*, total: int, newest: int) -> str:
        more = element(
            "more",
            f"{total} earlier message(s), numbers {newest} and below, were removed by cleanup; "
            f"{LOOKUP_TOOL} returns any of them in full.",
            attrs={"count": total},
        )
        return wrap(TAG, [more], attrs={"total": total, "shown": 0})

    # -- rendering ----------------------------------------------------------------------------

    def _entry(self, entry: PrunedEntry, *, date: str | None) -> str:
        message = entry.message
        text = message.content or ""
        if not text.strip() and message.tool_calls:
            text = "; ".join(f"called {call.name}({call.arguments_json})" for call in message.tool_calls)
        # Messages stored before text was made storable may hold lone surrogates; the section
        # goes to the model over HTTP, which cannot carry them.
        text = storable(text)
        attrs = {
            "seq": entry.seq,
            "role": entry.role,
            "date": date,
            "tools": storable(",".join(entry.tool_names)) or None,
            "kind": message.kind if message.is_compact_summary else None,
        }
        return element("message", excerpt(text, max_chars=self._excerpt_chars), attrs=attrs)

    @staticmethod
    def _render(entries: list[str], *, total: int, omitted: int, newest_omitted: int | None) -> str:
        note = (
            f"{total} earlier message(s) of this conversation were removed from the context by cleanup. "
            "The newest are listed first, by number, with a short excerpt; an entry without a date "
            "is from the same day (UTC) as the entry above it. "
            f"Call {LOOKUP_TOOL} with a number to read that message in full."
        )
        children = [element("note", note), *entries]
        if omitted:
            children.append(
                element(
                    "more",
                    f"{omitted} older removed message(s), numbers {newest_omitted} and below, are not listed; "
                    f"{LOOKUP_TOOL} returns any of them in full.",
                    attrs={"count": omitted},
                )
            )
        return wrap(TAG, children, attrs={"total": total, "shown": total - omitted})
