"""Trim/boundary: cut a 10k-message history with tool chains to a token-budgeted tail.

Modex: ``memory.compression.boundary.choose_boundary`` (whole chain units from the end).
Peer: ``langchain_core.messages.trim_messages(strategy="last")``, with and without
``start_on="human"``. Both use the same counter: ``memory.tokens`` (tiktoken cl100k), per message.

* time per cut at an 8,192-token budget, two ways: counts cached (Modex reads ``Message.tokens``
  as stored; the peer's counter looks the same numbers up by message id), and counting from
  scratch (both call ``compute_message_tokens``; the text cache is cleared before every call);
* broken tool chains over 300 random budgets (8k ± 4k): ``validate_transcript`` on each kept
  tail, mapped back to the original messages; Modex must have none;
* budget used: kept tokens ÷ budget (median over the same budgets).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

from benchmarks.common import HIGHER_IS_BETTER, Row, Workload, check, log, measure, workload_main
from benchmarks.histories import chat_history, numbered, to_langchain
from memory.compression.boundary import choose_boundary
from memory.messages import Message
from memory.tokens import _counter as text_cache
from memory.tokens import compute_message_tokens
from memory.transcript import is_legal, validate_transcript

BUDGET = 8192
WORKLOAD = "1. Trim/boundary"


def _lc_counters(history: list[Message]):
    tokens = {m.id: m.tokens for m in history}
    cold = {m.id: replace(m, tokens=None) for m in history}

    # List counters (what trim_messages calls); a per-message counter is wrapped into this same sum.
    def cached(messages: list) -> int:
        return sum(tokens[m.id] for m in messages)

    def scratch(messages: list) -> int:
        return sum(compute_message_tokens(cold[m.id]) for m in messages)

    return cached, scratch


def run(*, quick: bool) -> Workload:
    from langchain_core.messages import trim_messages

    size = 10_000
    budgets_n = 100 if quick else 300
    repeat = 9 if quick else 21
    cold_repeat = 3 if quick else 7
    result = Workload("trim")
    result.durability["all contenders"] = "in memory (no storage)"

    history = numbered(chat_history(count=size, seed=11, profile="large"))
    validate_transcript(history)  # the input itself must be legal
    cold_history = [replace(m, tokens=None) for m in history]
    total = sum(m.tokens for m in history)
    chains = sum(1 for m in history if m.tool_calls)
    parallel = sum(1 for m in history if len(m.tool_calls) > 1)
    by_id = {m.id: m for m in history}
    lc = to_langchain(history)
    cached_counter, scratch_counter = _lc_counters(history)
    shape = (
        f"{size:,} messages, {total:,} tokens, {chains:,} tool chains ({parallel:,} with parallel calls); "
        f"median message {statistics.median(m.tokens for m in history):.0f} tokens"
    )
    result.notes.append(f"trim history: {shape}")
    log(f"trim: {shape}")

    def lc_trim(budget: int, counter, start_on: str | None) -> list[Message]:
        kept = trim_messages(lc, max_tokens=budget, token_counter=counter, strategy="last", start_on=start_on)
        ids = [m.id for m in kept]
        check(ids == [m.id for m in history[len(history) - len(ids) :]], "trim_messages did not return a suffix")
        return [by_id[i] for i in ids]

    # -- time at 8k -----------------------------------------------------------------------------
    modex_t, boundary = measure(lambda: choose_boundary(messages=history, keep_tokens=BUDGET), repeat=repeat, warmup=3)
    check(is_legal(boundary.kept), "Modex kept tail is not legal at 8k")
    check(boundary.kept_tokens <= BUDGET, "Modex kept tail exceeds the budget")
    lc_human_t, kept_h = measure(lambda: lc_trim(BUDGET, cached_counter, "human"), repeat=repeat, warmup=3)
    lc_plain_t, kept_p = measure(lambda: lc_trim(BUDGET, cached_counter, None), repeat=repeat, warmup=3)
    for kept in (kept_h, kept_p):
        check(sum(m.tokens for m in kept) <= BUDGET, "trim_messages kept more than the budget")

    def clear() -> None:
        text_cache.clear()

    modex_cold_t, cold_boundary = measure(
        lambda: choose_boundary(messages=cold_history, keep_tokens=BUDGET), repeat=cold_repeat, warmup=1, before=clear
    )
    check(cold_boundary.cut == boundary.cut, "counting from scratch gave another cut than cached counts")
    lc_cold_t, kept_cold = measure(
        lambda: lc_trim(BUDGET, scratch_counter, "human"), repeat=cold_repeat, warmup=1, before=clear
    )
    check([m.id for m in kept_cold] == [m.id for m in kept_h], "scratch and cached counters disagree for trim_messages")

    # -- 300 random budgets -------------------------------------------------------------------
    rng = random.Random(42)
    budgets = [rng.randint(BUDGET // 2, BUDGET + BUDGET // 2) for _ in range(budgets_n)]
    broken = {"modex": 0, "human": 0, "plain": 0}
    used: dict[str, list[float]] = {"modex": [], "human": [], "plain": []}
    empty = {"modex": 0, "human": 0, "plain": 0}
    for budget in budgets:
        b = choose_boundary(messages=history, keep_tokens=budget)
        tails = {
            "modex": list(b.kept),
            "human": lc_trim(budget, cached_counter, "human"),
            "plain": lc_trim(budget, cached_counter, None),
        }
        check(b.kept_tokens == sum(m.tokens for m in b.kept), "Modex kept_tokens is not the sum of the kept counts")
        if b.cut > 0:  # the largest tail: one more unit would not have fitted
            start = b.cut - 1
            while start > 0 and history[start].role == "tool":
                start -= 1
            check(b.kept_tokens + sum(m.tokens for m in history[start : b.cut]) > budget, "Modex left room for a unit")
        for name, tail in tails.items():
            tokens = sum(m.tokens for m in tail)
            check(tokens <= budget, f"{name} kept {tokens} tokens for a budget of {budget}")
            used[name].append(tokens / budget)
            empty[name] += not tail
            if not is_legal(tail):
                broken[name] += 1
    check(broken["modex"] == 0, f"Modex broke tool chains in {broken['modex']} of {budgets_n} budgets")

    peer_h = 'langchain_core trim_messages(start_on="human")'
    peer_p = "langchain_core trim_messages (no start_on)"
    rows = [
        Row(WORKLOAD, "time per cut at 8k, counts cached", "ms", modex_t.median * 1e3, peer_h, lc_human_t.median * 1e3,
            notes=f"median of {repeat}; Modex reads stored Message.tokens, the peer's counter looks up the same counts",
            detail={"modex": modex_t.summary(), "peer": lc_human_t.summary()}),
        Row(WORKLOAD, "time per cut at 8k, counts cached", "ms", modex_t.median * 1e3, peer_p, lc_plain_t.median * 1e3,
            notes=f"median of {repeat}", detail={"modex": modex_t.summary(), "peer": lc_plain_t.summary()}),
        Row(WORKLOAD, "time per cut at 8k, counting from scratch", "ms", modex_cold_t.median * 1e3, peer_h,
            lc_cold_t.median * 1e3,
            notes=f"median of {cold_repeat}; both count with memory.tokens.compute_message_tokens, text cache cleared "
            "before each call (Modex counts every message once; the peer's binary search recounts prefixes)",
            detail={"modex": modex_cold_t.summary(), "peer": lc_cold_t.summary()}),
        Row(WORKLOAD, f"broken tool chains in {budgets_n} random budgets (4k-12k)", "tails", broken["modex"], peer_h,
            broken["human"], notes="validate_transcript on each kept tail; ratio not meaningful",
            detail={"empty_tails": empty}),
        Row(WORKLOAD, f"broken tool chains in {budgets_n} random budgets (4k-12k)", "tails", broken["modex"], peer_p,
            broken["plain"], notes="an orphan tool result at the head of the tail (its call was cut off)"),
        Row(WORKLOAD, "budget used (kept tokens ÷ budget), median", "%", statistics.median(used["modex"]) * 100, peer_h,
            statistics.median(used["human"]) * 100, better=HIGHER_IS_BETTER,
            notes=f"min Modex {min(used['modex']):.1%}, peer {min(used['human']):.1%}"),
        Row(WORKLOAD, "budget used (kept tokens ÷ budget), median", "%", statistics.median(used["modex"]) * 100, peer_p,
            statistics.median(used["plain"]) * 100, better=HIGHER_IS_BETTER,
            notes=f"min Modex {min(used['modex']):.1%}, peer {min(used['plain']):.1%} "
            "(without start_on the peer may cut inside a chain: the broken tails above)"),
    ]
    for row in rows:
        row.show_ratio = row.unit != "tails"  # counts of broken tails: a quotient means nothing
    result.rows.extend(rows)
    return result


if __name__ == "__main__":
    workload_main(run)
