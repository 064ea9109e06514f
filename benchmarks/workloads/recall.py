"""Archive recall: context assembly with automatic recall, and the archive search, at 1k, 10k and
100k archived messages on the SQLite backend; archiving throughput; the index's memory.

Data (``benchmarks.conversations``, seeded): one user's many short dated conversations of everyday
text with an agent, 2-24 messages each. They are appended to the message store (the first
``APPEND_TIMED`` one message per call, as chat appends them: the store's append rate; the rest a
conversation per call) and archived a conversation at a time with ``archive_conversation`` (the
idle/backfill path: the session's lease, its pending messages read, ``archive_messages``, the
cursor moved), with the embedded WordLlama model storing each message's vector. Before that, the
same conversations, appended again under other sessions, are archived for another user without
embeddings: their rate, and an archive of the very same words that the searched user's hits must
never come from. Archiving throughput is messages archived per second of those calls.

When the archive reaches each size, in the same process:

* first search after a process start: a new ``Retrieval`` over the store with a new WordLlama
  embedder: the model's load, then the first search (reads every document and its stored vectors,
  builds the BM25 postings and the vector matrix, answers), timed apart;
* search: ``Retrieval.search`` (hybrid: BM25 + the query's WordLlama vector, fused), the query
  a user message of a new conversation (a different one each call), limit 12 as recall asks;
* assembly: ``ContextAssembler`` with the default pipeline and that ``Retrieval`` (core, archive
  with recall, pruned) over a live conversation of the same user (a new one of 40 messages at each
  size, so that only the archive grows from one size to the next); before each timed call a new
  user message is appended (untimed), so each turn recalls for another query. Beside it, the
  same assembly without recall (archive summaries only), alternating turn by turn;
* the peer: ``bm25s`` (BM25 over sparse matrices; its English stop words, the Snowball stemmer
  of PyStemmer, k1 1.2, b 0.75) over the same messages' texts: index time, and per query its
  tokenization and top-12 retrieval.

Memory: the resident set's growth over the first search at the largest size (index built, the
documents read for it freed again), per 100,000 messages; bm25s's likewise over its index.

Checks: every conversation archived exactly once (document count and message count); the index
holds every archived message; Modex's BM25 ranking over the scope equals bm25s's over the same
terms (scores equal up to bm25s's constant factor, k1 + 1) for queries without prefix expansion;
hits belong to the searched user's archive, never the other user's copy; recall shows in the assembled archive section.

``BENCH_RECALL_MESSAGES`` sets the largest size (default 100,000; 10,000 with BENCH_QUICK).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from dataclasses import replace

from benchmarks.common import (
    HIGHER_IS_BETTER,
    Row,
    Workload,
    check,
    log,
    setup_django,
    sqlite_pragmas_of_django,
    temp_root,
    workload_main,
)
from benchmarks.conversations import conversations, queries
from benchmarks.workloads.recall_peer import bm25s_peer, check_bm25, held, rss

WORKLOAD = "8. Archive recall"
AGENT = "default"
USER = "42"
PLAIN_USER = "43"
SIZES = (1_000, 10_000, 100_000)
APPEND_TIMED = 10_000
RECALL_LIMIT = 12
LIVE_MESSAGES = 40
TARGET_MS = 5.0
INSTRUCTIONS = "You are a helpful assistant. Use your memory tools to remember what matters to the user."


def _sizes(quick: bool) -> list[int]:
    raw = os.environ.get("BENCH_RECALL_MESSAGES", "").strip()
    largest = int(raw.replace("_", "").replace(",", "")) if raw else (10_000 if quick else 100_000)
    if largest < 100:
        raise SystemExit("BENCH_RECALL_MESSAGES must be at least 100")
    sizes = [s for s in SIZES if s < largest]
    return [*sizes, largest]


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _stats(samples: list[float]) -> dict:
    return {
        "p50_ms": statistics.median(samples) * 1e3,
        "p95_ms": _pct(samples, 0.95) * 1e3,
        "min_ms": min(samples) * 1e3,
        "max_ms": max(samples) * 1e3,
        "n": len(samples),
    }


def _append(bundle, convs, *, timed: int) -> tuple[float, float, int]:
    """Append every conversation to its session: the first ``timed`` messages one per call (the
    chat's way), the rest a conversation per call. Returns (one-per-call rate, batch rate, count)."""
    from memory.scopes import SessionScope

    single_s = batch_s = 0.0
    single_n = batch_n = 0
    for conv in convs:
        scope = SessionScope(conv.key)
        messages = list(conv.messages)
        while messages and single_n < timed:
            started = time.perf_counter()
            bundle.messages.append(scope, [messages.pop(0)])
            single_s += time.perf_counter() - started
            single_n += 1
        if messages:
            started = time.perf_counter()
            bundle.messages.append(scope, messages)
            batch_s += time.perf_counter() - started
            batch_n += len(messages)
    single = single_n / single_s if single_n else 0.0
    return single, (batch_n / batch_s if batch_n else 0.0), single_n + batch_n


class _Archiver:
    """Archives conversations in order, a conversation per call, timing the calls."""

    def __init__(self, bundle, convs, scope, embedder) -> None:
        self.bundle, self.convs, self.scope, self.embedder = bundle, convs, scope, embedder
        self.next = 0
        self.messages = 0
        self.documents = 0
        self.seconds = 0.0

    def until(self, count: int) -> None:
        from memory.archiving import ArchivingStatus, archive_conversation
        from memory.scopes import SessionScope

        while self.messages < count and self.next < len(self.convs):
            conv = self.convs[self.next]
            started = time.perf_counter()
            done = archive_conversation(
                bundle=self.bundle, session=SessionScope(conv.key), archive_scope=self.scope, embedder=self.embedder
            )
            self.seconds += time.perf_counter() - started
            check(done.status is ArchivingStatus.ARCHIVED, f"{conv.key} was not archived: {done.status} {done.reason}")
            check(done.messages == len(conv.messages), f"{conv.key}: {done.messages} of {len(conv.messages)} archived")
            check(len(done.documents) == 1, f"{conv.key}: {len(done.documents)} documents for one idle conversation")
            self.messages += done.messages
            self.documents += len(done.documents)
            self.next += 1

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def _searchable_texts(bundle, scope) -> list[str]:
    from memory.retrieval.messages import message_text, searchable

    return [message_text(m) for d in bundle.archive.list(scope) for m in d.messages if searchable(m) and m.seq is not None]


def _measure(bundle, catalog, scope, size_label: int, qs: list[str], live) -> dict:
    from memory.assembly.assembler import ContextAssembler, default_pipeline
    from memory.config import MemoryConfig
    from memory.messages import Message
    from memory.retrieval.embeddings import WordLlamaEmbedder
    from memory.retrieval.service import Retrieval
    from memory.tokens import _counter as text_cache

    out: dict = {}
    # -- first search after a process start --------------------------------------------------
    embedder = WordLlamaEmbedder()
    started = time.perf_counter()
    embedder.embed(["warm up"])
    out["model_load_s"] = time.perf_counter() - started
    retrieval = Retrieval(archive=bundle.archive, embedder=embedder)
    before = rss()
    started = time.perf_counter()
    first = retrieval.search(scope, qs[0], limit=RECALL_LIMIT)
    out["first_s"] = time.perf_counter() - started
    out["memory"] = rss() - before
    out["indexed"] = retrieval.indexed(scope)
    out["held"] = held(retrieval._entries[scope.key()].index)  # the scope's ScopeIndex
    check(first, f"the first search found nothing for {qs[0]!r}")

    # -- search ----------------------------------------------------------------------------
    for q in qs[1:4]:
        retrieval.search(scope, q, limit=RECALL_LIMIT)
    samples, embed_samples, hits_seen = [], [], 0
    gc.collect()
    for q in qs[4:]:
        started = time.perf_counter()
        hits = retrieval.search(scope, q, limit=RECALL_LIMIT)
        samples.append(time.perf_counter() - started)
        started = time.perf_counter()
        embedder.embed([q])
        embed_samples.append(time.perf_counter() - started)
        hits_seen += bool(hits)
        check(all(h.message.session.startswith("session:archived-") for h in hits), "a hit from outside the scope")
    out["search"], out["embed"], out["found"] = samples, embed_samples, hits_seen

    # -- assembly with recall, and without -------------------------------------------------
    config = MemoryConfig(archive_enabled=True)
    with_recall = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog, retrieval=retrieval))
    without = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog))

    def assemble(assembler):
        text_cache.clear()
        started = time.perf_counter()
        context = assembler.assemble(session=live, config=config, agent=AGENT, user=USER, instructions=INSTRUCTIONS,
                                     archive_scope=scope)
        return time.perf_counter() - started, context

    on, off, warm, recalled = [], [], [], 0
    for i, q in enumerate(qs):
        bundle.messages.append(live, [Message(role="user", content=q)])
        pair = (with_recall, without) if i % 2 == 0 else (without, with_recall)
        for assembler in pair:
            seconds, context = assemble(assembler)
            if i < 4:
                continue  # warm-up
            if assembler is with_recall:
                on.append(seconds)
                archive = next((s for s in context.sections if s.name == "archive"), None)
                recalled += bool(archive and "<archive_recall>" in archive.text)
                check(context.total_tokens <= config.context_window, "the assembled request exceeds the window")
            else:
                off.append(seconds)
        if i >= 4:  # the same turn again with the text cache kept, as between a process's turns
            started = time.perf_counter()
            with_recall.assemble(session=live, config=config, agent=AGENT, user=USER, instructions=INSTRUCTIONS,
                                 archive_scope=scope)
            warm.append(time.perf_counter() - started)
        bundle.messages.append(live, [Message(role="assistant", content="Noted.")])
    out["assembly"], out["assembly_off"], out["assembly_warm"], out["recalled"] = on, off, warm, recalled
    check(recalled >= len(on) // 2, f"recall showed in {recalled} of {len(on)} assembled archive sections")
    log(
        f"recall: N={size_label:,}: first search {out['first_s'] * 1e3:.0f} ms (+ model {out['model_load_s'] * 1e3:.0f} ms), "
        f"search p50 {statistics.median(samples) * 1e3:.2f} ms, assembly p50 {statistics.median(on) * 1e3:.2f} ms "
        f"(without recall {statistics.median(off) * 1e3:.2f} ms)"
    )
    return out


def run(*, quick: bool) -> Workload:
    from memory.compression.pruned import PrunedCatalog
    from memory.messages import Message
    from memory.retrieval.embeddings import WordLlamaEmbedder
    from memory.scopes import AgentScope, CompositeScope, SessionScope, UserScope
    from memory.stores.registry import open_bundle

    sizes = _sizes(quick)
    largest = sizes[-1]
    root = temp_root("recall")
    setup_django(root / "workspace")
    result = Workload("recall")
    result.durability["Modex sqlite"] = "WAL, synchronous={synchronous} (app settings)".format(**sqlite_pragmas_of_django())
    bundle = open_bundle("sqlite", root=root / "memory")
    catalog = PrunedCatalog(root / "pruned")
    scope = CompositeScope(AgentScope(AGENT), UserScope(USER))
    plain_scope = CompositeScope(AgentScope(AGENT), UserScope(PLAIN_USER))

    started = time.perf_counter()
    convs = conversations(messages=largest, seed=83)
    plain = [replace(c, key=c.key.replace("archived-", "plain-"),
                     messages=tuple(Message(role=m.role, content=m.content, created_at=m.created_at) for m in c.messages))
             for c in convs]
    qs = queries(count=30 if quick else 64, seed=89)
    log(f"recall: {len(convs):,} conversations, {largest:,} messages generated in {time.perf_counter() - started:.1f} s")

    single_rate, batch_rate, appended = _append(bundle, convs, timed=min(APPEND_TIMED, largest // 2))
    _append(bundle, plain, timed=0)
    check(appended == largest, f"{appended} messages appended, {largest} generated")
    opening = queries(count=LIVE_MESSAGES, seed=97)
    log(f"recall: appended: {single_rate:,.0f} messages/s one per call, {batch_rate:,.0f}/s a conversation per call")

    # The same conversations archived first for another user, without embeddings: their rate, and
    # an archive of the very same words that the searched user's hits must never come from.
    plain_archiver = _Archiver(bundle, plain, plain_scope, None)
    plain_archiver.until(largest)
    check(plain_archiver.messages == largest, f"{plain_archiver.messages} of {largest} archived without embeddings")
    check(bundle.archive.archive_state(plain_scope).count == len(plain), "not one document per conversation")
    log(f"recall: archiving without embeddings: {plain_archiver.rate:,.0f} messages/s")

    archiver = _Archiver(bundle, convs, scope, WordLlamaEmbedder())
    measured: dict[int, dict] = {}
    for size in sizes:
        archiver.until(size)
        # A live conversation of its own at each size, opened the same way: the turns measured
        # add to it, and the size's rows must not include a longer conversation than the last's.
        live = SessionScope(f"live-{size}")
        bundle.messages.append(live, [Message(role="user" if i % 2 == 0 else "assistant", content=q)
                                      for i, q in enumerate(opening)])
        data = _measure(bundle, catalog, scope, archiver.messages, qs, live)
        check(data["indexed"] == archiver.messages, f"{data['indexed']} messages indexed, {archiver.messages} archived")
        data["archived"] = archiver.messages
        texts = _searchable_texts(bundle, scope)
        check(len(texts) == archiver.messages, f"{len(texts)} searchable texts, {archiver.messages} archived")
        data["peer"] = bm25s_peer(texts, qs, limit=RECALL_LIMIT)
        data["bm25_compared"] = check_bm25(bundle, scope, qs)
        measured[size] = data
        log(f"recall: N={archiver.messages:,}: bm25s search p50 {statistics.median(data['peer']['search']) * 1e3:.2f} ms, "
            f"index {data['peer']['first_s'] * 1e3:.0f} ms; BM25 equal to bm25s on {data['bm25_compared']} queries")
    check(bundle.archive.archive_state(scope).count == len(convs), "not one document per conversation")
    log(f"recall: archiving with embeddings: {archiver.rate:,.0f} messages/s")

    # -- rows ---------------------------------------------------------------------------------
    for size, d in measured.items():
        n = d["archived"]
        mx, peer, asm, off = _stats(d["search"]), _stats(d["peer"]["search"]), _stats(d["assembly"]), _stats(d["assembly_off"])
        warm = _stats(d["assembly_warm"])
        met = "met" if asm["p50_ms"] <= TARGET_MS else "missed"
        result.rows.append(Row(
            WORKLOAD, f"assemble one turn with recall, archive of {n:,} messages · Modex sqlite", "ms", asm["p50_ms"],
            "the same assembly without recall (archive summaries only)", off["p50_ms"],
            notes=f"p50; p95 {asm['p95_ms']:.2f} ms (without recall {off['p95_ms']:.2f} ms); target ≤ {TARGET_MS:g} ms p50: "
            f"{met}; text cache cleared before each call (as in 4.x); the same turn assembled again with it kept: "
            f"p50 {warm['p50_ms']:.2f} ms, p95 {warm['p95_ms']:.2f} ms; recall shown in {d['recalled']} of {asm['n']} turns",
            detail={"modex": asm, "peer": off, "modex_text_cache_kept": warm}))
        result.rows.append(Row(
            WORKLOAD, f"archive search (recall's query, top {RECALL_LIMIT}), {n:,} messages · Modex sqlite", "ms",
            mx["p50_ms"], "bm25s (tokenize + retrieve, words only)", peer["p50_ms"],
            notes=f"p50; p95 {mx['p95_ms']:.2f} ms (bm25s {peer['p95_ms']:.2f} ms); Modex is hybrid: BM25 + the query's "
            f"WordLlama vector (embedding it: {statistics.median(d['embed']) * 1e3:.3f} ms p50) over {n:,} vectors, fused; "
            f"{d['found']} of {mx['n']} queries found something; {mx['n']} queries",
            detail={"modex": mx, "peer": peer}))
        result.rows.append(Row(
            WORKLOAD, f"first search after a process start, {n:,} messages · Modex sqlite", "ms",
            d["first_s"] * 1e3, "bm25s: tokenize + index + first query", d["peer"]["first_s"] * 1e3,
            notes=f"Modex reads every document and its stored vectors and builds its index; the WordLlama model's load "
            f"before it ({d['model_load_s'] * 1e3:.0f} ms) is not included",
            detail={"model_load_ms": d["model_load_s"] * 1e3}))
    first, last = sizes[0], sizes[-1]
    if first != last:
        a, b = measured[first], measured[last]
        def growth(data_a, data_b) -> float:
            return statistics.median(data_b) / statistics.median(data_a)

        result.rows.append(Row(
            WORKLOAD, f"growth of the archive search: p50 at {b['archived']:,} ÷ p50 at {a['archived']:,} · Modex", "×",
            growth(a["search"], b["search"]), "bm25s (same sizes)", growth(a["peer"]["search"], b["peer"]["search"]),
            notes="flat is 1× (the goal); both search every message of the archive"))
        result.rows.append(Row(
            WORKLOAD, f"growth of assembly with recall: p50 at {b['archived']:,} ÷ p50 at {a['archived']:,} · Modex", "×",
            growth(a["assembly"], b["assembly"]), "the same assembly without recall (same sizes)",
            growth(a["assembly_off"], b["assembly_off"]),
            notes="flat is 1× (the goal); without recall the turn's cost does not depend on the archive's size"))
    for label, archiver_ in (("with embeddings (WordLlama, stored vectors)", archiver),
                             ("without embeddings", plain_archiver)):
        result.rows.append(Row(
            WORKLOAD, f"archive {archiver_.messages:,} messages, a conversation per call, {label} · Modex sqlite",
            "messages/s", archiver_.rate, "the message store's append rate, one message per call", single_rate,
            better=HIGHER_IS_BETTER,
            notes=f"{archiver_.documents:,} conversations archived with archive_conversation in {archiver_.seconds:.1f} s; "
            f"appending a conversation per call: {batch_rate:,.0f} messages/s",
            detail={"seconds": archiver_.seconds, "documents": archiver_.documents, "append_batch_rate": batch_rate}))
    big = measured[last]
    per = 100_000 / big["archived"]
    result.rows.append(Row(
        WORKLOAD, f"in-memory index per 100,000 messages (resident, measured at {big['archived']:,}) · Modex", "MB",
        big["memory"] * per / 1e6, "bm25s index (resident)", big["peer"]["memory"] * per / 1e6,
        notes="growth of the process's resident set over the first search (index built; documents read for it freed "
        f"again), scaled to 100,000 messages. Held by the objects themselves: Modex {big['held'] * per / 1e6:.0f} MB "
        f"(the messages' text and metadata for showing hits, BM25 postings, 64-dim float32 vectors), bm25s "
        f"{big['peer']['held'] * per / 1e6:.0f} MB (its sparse matrix and vocabulary only)",
        detail={"modex_bytes": big["memory"], "peer_bytes": big["peer"]["memory"], "messages": big["archived"],
                "modex_held_bytes": big["held"], "peer_held_bytes": big["peer"]["held"]}))
    result.notes.append(
        f"recall data: {len(convs):,} dated conversations ({largest:,} messages, 2-24 each) of everyday text "
        "(benchmarks/conversations.py, seed 83); queries: user messages of new conversations (seed 89); "
        f"the store's append rate over the first {min(APPEND_TIMED, largest // 2):,} messages, one per call"
    )
    return result


if __name__ == "__main__":
    workload_main(run)
