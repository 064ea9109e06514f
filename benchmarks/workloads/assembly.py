"""Per-turn assembly: build one turn's context for sessions of 1k, 10k and 100k live messages.

Set-up per backend (``sqlite``, ``file``), for an agent with archive and core memory on:
SOUL.md, USER.md and MEMORY.md written through ``CoreMemory``; 30 archive documents; and per
session a real cleanup first (2,000 messages appended, ``run_cleanup`` with an instant
summarizer: pruned catalog + archive document + ``[compact_summary]``), then N messages
appended in batches. So the context has all three memory sections, tool schemas and the tail.

Modex: ``ContextAssembler(default_pipeline).assemble(...)`` (what the runtime calls each turn).
Baseline: the same token accounting done naively: read the whole session and recount every
message with ``memory.tokens.compute_message_tokens``. It does less than the assembler (no
sections, no selection), so it is a lower bound of the naive way. The text cache is cleared
before every timed call of both.

Assembly keeps what it rendered and decoded between turns (sections, governed copies, decoded
rows), as it does between a conversation's turns; the text cache is still cleared.

Checks: a fresh assembler with every memo emptied builds the same request byte for byte and the
same token account; the request fits the window; the messages sent are a legal transcript and their cached
counts equal a recount; all three memory sections are present; the naive recount of the whole
session equals the store's own cached token total.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import (
    Row,
    Workload,
    check,
    log,
    measure,
    setup_django,
    sqlite_pragmas_of_django,
    temp_root,
    workload_main,
)
from benchmarks.histories import chat_history

WORKLOAD = "4. Per-turn assembly"
AGENT = "default"
USER = "42"
PRUNED_PART = 2_000
BATCH = 5_000
INSTRUCTIONS = "You are a helpful assistant. Use your memory tools to remember what matters to the user."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool: {description}",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
    for name, description in [
        ("core_memory", "read or edit SOUL.md, USER.md, MEMORY.md"),
        ("archive_search", "search the long-term archive"),
        ("pruned_lookup", "return a removed message in full"),
        ("todo", "keep a todo list"),
        ("subagent", "hand a task to a subagent"),
    ]
]


def _summarizer(messages):  # instant: this measures the pipeline, not a model
    from memory.compression.summary_input import SECTIONS

    return "\n".join(f"## {name}\n- noted" for name in SECTIONS)


def _populate_long_term(bundle, config) -> object:
    from memory.core_memory import MEMORY, SOUL, USER as USER_FILE, CoreMemory
    from memory.scopes import AgentScope, CompositeScope, UserScope
    from memory.stores.base import ArchiveDocument

    words = chat_history(count=400, seed=41, profile="small", counted=False)
    text = [m.content for m in words if m.content]
    core = CoreMemory(kv=bundle.kv, config=config, agent=AGENT, user=USER)
    core.append(file=SOUL, text="# Identity\n" + " ".join(text[:12]), source="system")
    core.append(file=USER_FILE, text="# The user\n" + " ".join(text[12:24]), source="agent")
    for i in range(10):
        core.append(file=MEMORY, text=f"- fact {i}: " + " ".join(text[24 + 4 * i : 28 + 4 * i]), source="agent")
    scope = CompositeScope(AgentScope(AGENT), UserScope(USER))
    for i in range(30):
        bundle.archive.put(
            scope,
            ArchiveDocument(
                session=f"session:old{i}", summary=" ".join(text[100 + 3 * i : 103 + 3 * i]), title=f"Earlier chat {i}"
            ),
        )
    return scope


def _build_session(bundle, catalog, config, archive_scope, size: int, pool, offset: int) -> tuple[object, int]:
    from memory.compression.cleanup import CleanupStatus, run_cleanup
    from memory.hooks import MemoryHookDispatcher
    from memory.scopes import SessionScope

    session = SessionScope(f"assembly-{size}")
    bundle.messages.append(session, pool[offset : offset + PRUNED_PART])
    offset += PRUNED_PART
    cleaned = run_cleanup(
        bundle=bundle, session=session, config=config, summarizer=_summarizer, catalog=catalog,
        hooks=MemoryHookDispatcher(), archive_scope=archive_scope, force=True,
    )
    check(cleaned.status == CleanupStatus.COMMITTED, f"set-up cleanup did not commit: {cleaned.reason}")
    appended = 0
    while appended < size:
        n = min(BATCH, size - appended)
        bundle.messages.append(session, pool[offset : offset + n])
        offset += n
        appended += n
    return session, offset


def _measure_backend(backend: str, root: Path, sizes: list[int], quick: bool, pool) -> dict:
    from memory.assembly.assembler import ContextAssembler, default_pipeline
    from memory.assembly.governance import _memo as governance_memo
    from memory.compression.pruned import PrunedCatalog
    from memory.config import MemoryConfig
    from memory.stores.codec import MESSAGE_TEXTS, SUMMARY_HEADS
    from memory.stores.file_session import LINES
    from memory.stores.registry import open_bundle
    from memory.tokens import _counter as text_cache
    from memory.tokens import compute_message_tokens
    from memory.transcript import is_legal

    bundle = open_bundle(backend, root=root / f"memory-{backend}")
    catalog = PrunedCatalog(root / f"pruned-{backend}")
    config = MemoryConfig(archive_enabled=True, core_enabled=True)
    archive_scope = _populate_long_term(bundle, config)
    assembler = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog))
    out = {}
    offset = 0
    sessions = {}
    # Every session is built before any is measured, so each size sees the same archive (each
    # set-up cleanup adds one archive document) and the sizes differ only in the session.
    for size in sizes:
        sessions[size], offset = _build_session(bundle, catalog, config, archive_scope, size, pool, offset)
    for size in sizes:
        session = sessions[size]
        head = bundle.messages.head(session)

        def assemble():
            return assembler.assemble(
                session=session, config=config, agent=AGENT, user=USER, instructions=INSTRUCTIONS, tools=TOOLS,
                archive_scope=archive_scope,
            )

        def naive():
            messages = bundle.messages.read(session)
            return len(messages), sum(compute_message_tokens(m) for m in messages)

        timing, context = measure(assemble, repeat=3 if quick else 25, warmup=2, before=text_cache.clear)
        # What assembly keeps between turns (rendered sections, governed copies, decoded rows) must
        # not change a byte: a fresh assembler with every memo emptied builds the same request.
        governance_memo.clear()
        MESSAGE_TEXTS.clear()
        SUMMARY_HEADS.clear()
        LINES.clear()
        fresh = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog)).assemble(
            session=session, config=config, agent=AGENT, user=USER, instructions=INSTRUCTIONS, tools=TOOLS,
            archive_scope=archive_scope,
        )
        check(fresh.messages == context.messages and fresh.tools == context.tools, "a memo changed the request")
        check((fresh.account, fresh.total_tokens) == (context.account, context.total_tokens),
              "a memo changed the token account")
        check(context.total_tokens <= config.context_window, "the assembled request exceeds the window")
        check(is_legal(context.session_messages), "the assembled messages are not a legal transcript")
        check(all(m.tokens == compute_message_tokens(m) for m in context.session_messages), "a cached count is wrong")
        sections = {s.name: s.items for s in context.sections}
        for name in ("core memory", "archive", "pruned catalog"):
            check(sections.get(name, 0) > 0, f"the {name} section is missing or empty")
        naive_repeat = 1 if size >= 100_000 and quick else 3
        naive_t, (count, tokens) = measure(naive, repeat=naive_repeat, warmup=1, before=text_cache.clear)
        check(count == head.count, f"naive read {count} messages, the head says {head.count}")
        check(tokens == head.tokens, f"naive recount {tokens} tokens ≠ the store's cached total {head.tokens}")
        out[size] = {
            "modex": timing,
            "naive": naive_t,
            "read": context.messages_read,
            "live": head.count,
            "sent": len(context.session_messages),
            "sections": sections,
            "total_tokens": context.total_tokens,
        }
        log(
            f"assembly: {backend} N={size}: {timing.median * 1e3:.1f} ms (read {context.messages_read} of {head.count}), "
            f"naive {naive_t.median * 1e3:.0f} ms"
        )
    return out


def run(*, quick: bool) -> Workload:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    root = temp_root("assembly")
    setup_django(root / "workspace")
    result = Workload("assembly")
    pool = chat_history(count=sum(sizes) + PRUNED_PART * len(sizes), seed=43, profile="small")
    result.durability["Modex sqlite"] = "WAL, synchronous={synchronous} (app settings)".format(**sqlite_pragmas_of_django())
    result.durability["Modex file"] = "fsync per write (reads only are timed here)"
    result.notes.append(
        f"assembly set-up: core memory (SOUL/USER/MEMORY), 30 small archive documents plus one per set-up cleanup "
        f"({len(sizes)} documents of {PRUNED_PART:,} messages each), pruned catalog of {PRUNED_PART:,} entries per session; "
        "all sessions exist before any is measured"
    )
    for backend in ("sqlite", "file"):
        data = _measure_backend(backend, root, sizes, quick, pool)
        for size, d in data.items():
            result.rows.append(
                Row(WORKLOAD, f"assemble one turn, session of {size:,} · Modex {backend}", "ms", d["modex"].median * 1e3,
                    "naive: read whole session + recount every message", d["naive"].median * 1e3,
                    notes=f"Modex read {d['read']:,} of {d['live']:,} live messages, sent {d['sent']}; "
                    f"request {d['total_tokens']:,} tokens; median of {len(d['modex'].samples)} / {len(d['naive'].samples)}",
                    detail={"modex": d["modex"].summary(), "peer": d["naive"].summary(), "sections": d["sections"]}))
        first, last = sizes[0], sizes[-1]
        result.rows.append(
            Row(WORKLOAD, f"growth: cost at {last:,} ÷ cost at {first:,} · Modex {backend}", "×",
                data[last]["modex"].median / data[first]["modex"].median,
                "naive (same sizes)", data[last]["naive"].median / data[first]["naive"].median,
                notes="flat is 1×; the naive way grows with the session"))
    return result


if __name__ == "__main__":
    workload_main(run)
