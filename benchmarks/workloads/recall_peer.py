"""Workload 8's peer and measurements (``benchmarks.workloads.recall``): ``bm25s`` over the same
messages as Modex's archive search, the check that Modex's BM25 ranks as bm25s does over the same
terms, and the memory a search index holds (the resident set's growth, and what an object keeps
alive)."""

from __future__ import annotations

import gc
import os
import time

from benchmarks.common import check


def rss() -> int:
    """The resident set size of this process, bytes."""
    gc.collect()
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def held(obj: object) -> int:
    """Bytes held by ``obj`` and everything it references (each object once; numpy arrays with
    their data): what the object keeps alive, without the allocator's free space."""
    import sys

    seen: set[int] = set()
    stack = [obj]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        stack.extend(gc.get_referents(item))
    return total



def _quiet_bm25s():
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs each index build at DEBUG
    return bm25s


def bm25s_peer(texts: list[str], qs: list[str], *, limit: int) -> dict:
    """bm25s over ``texts``: index time and memory, and each query's tokenization and top-``limit`` retrieval."""
    import Stemmer

    bm25s = _quiet_bm25s()

    stemmer = Stemmer.Stemmer("english")
    before = rss()
    started = time.perf_counter()
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(tokens, show_progress=False)
    del tokens

    def search(q: str):
        query = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        return retriever.retrieve(query, k=min(limit, len(texts)), show_progress=False, n_threads=0)

    search(qs[0])
    first = time.perf_counter() - started
    memory = rss() - before
    kept = held(retriever)
    for q in qs[1:3]:  # warm-up
        search(q)
    samples = []
    for q in qs[3:]:
        started = time.perf_counter()
        search(q)
        samples.append(time.perf_counter() - started)
    return {"first_s": first, "search": samples, "memory": memory, "held": kept}


def check_bm25(bundle, scope, qs: list[str]) -> int:
    """Modex's BM25 over the scope against bm25s over the same terms: the same top scores."""
    import numpy as np

    from memory.retrieval import text as analysis
    from memory.retrieval.index import K1, ScopeIndex

    index = ScopeIndex(dimensions=None)
    for document in bundle.archive.list(scope):
        index.add_document(document, None)
    corpus = [analysis.terms(row.text) for row in index.rows]
    bm25s = _quiet_bm25s()
    retriever = bm25s.BM25(k1=K1, b=0.75, method="lucene")
    retriever.index(corpus, show_progress=False)
    compared = 0
    for q in qs:
        pairs = analysis.query_terms(q)
        if not pairs or any(term not in index._postings for term, _ in pairs):
            continue  # prefix expansion: Modex searches more terms than bm25s would
        _, scores, _ = index.bm25(q)
        if not len(scores):
            continue
        k = min(10, len(scores))
        _, peer = retriever.retrieve([[t for t, _ in pairs]], k=k, show_progress=False, n_threads=0)
        mine = np.sort(scores)[::-1][:k] / (K1 + 1)
        check(np.allclose(mine, peer[0][:k], rtol=1e-3, atol=1e-4),
              f"BM25 scores differ from bm25s for {q!r}: {mine[:3]} vs {peer[0][:3]}")
        compared += 1
    check(compared >= 5, f"only {compared} queries could be compared with bm25s")
    return compared
