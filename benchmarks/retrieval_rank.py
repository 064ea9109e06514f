"""Where archive search ranks each question's evidence: recall at k, message by message.

    .venv/bin/python -m benchmarks.retrieval_rank --dataset locomo:PATH|longmemeval:PATH|generated

``manage.py memory_eval`` says whether the evidence reached the model's context; on a small
history (the LoCoMo-format sample in tests/ is about as long as the archive section's budget)
nearly everything does, whatever the ranking. Over a real history of hundreds of turns only
the first few hits and the turns around them fit, so how high the evidence ranks is what
decides. This indexes each history of the dataset (every session one archived conversation,
the embedded WordLlama vectors), searches every question the way archive recall does (its
similarity floor, no window) and prints, per category, the share of evidence turns found at
rank 1, 3, 5, 10 and 20 and the mean reciprocal rank, once with the question as it is and once
with the conversation's people's names left out of it (``names=``, as the chat and the
benchmark pass them). Nothing is asked of a model; it runs in seconds.
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict

KS = (1, 3, 5, 10, 20)


def ranks(dataset, *, embedder, names: bool, min_similarity: float) -> dict[str, list[int | None]]:
    """Per category, the rank of each evidence turn among the question's hits (None: not in 20)."""
    from memory.messages import Message
    from memory.retrieval.index import ScopeIndex
    from memory.retrieval.text import without_names
    from memory.stores.base import ArchiveDocument

    found: dict[str, list[int | None]] = defaultdict(list)
    for history in dataset.histories:
        index = ScopeIndex(dimensions=embedder.dimensions)
        where: dict[str, tuple[int, int]] = {}
        for number, session in enumerate(history.sessions, 1):
            messages = []
            for n, turn in enumerate(session.turns):
                messages.append(Message(role=turn.role, content=turn.text, created_at=session.stamp(n)).with_seq(n + 1))
                where[turn.id] = (number, n + 1)
            document = ArchiveDocument(
                id=f"d{number}", seq=number, session=f"session:{session.id}", title=session.id, summary="",
                messages=tuple(messages), created_at=session.date,
            )
            index.add_document(document, embedder.embed([m.content for m in messages]))
        people = (history.user_name, history.assistant_name or "") if names else ()
        for question in history.questions:
            query = without_names(question.text, people)
            hits = index.search(query, vector=embedder.embed([query])[0], limit=max(KS),
                                min_similarity=min_similarity)
            order = [(hit.message.document_seq, hit.message.seq) for hit in hits]
            for evidence in question.evidence:
                spot = where.get(evidence)
                rank = order.index(spot) + 1 if spot in order else None
                found[question.category].append(rank)
                found["all"].append(rank)
    return found


def table(found: dict[str, list[int | None]]) -> list[str]:
    lines = ["| category | evidence | " + " | ".join(f"@{k}" for k in KS) + " | MRR |",
             "|---|---:|" + "---:|" * len(KS) + "---:|"]
    for category in sorted(found, key=lambda c: (c == "all", c)):
        got = found[category]
        share = [sum(1 for r in got if r is not None and r <= k) / len(got) for k in KS]
        mrr = sum(1 / r for r in got if r is not None) / len(got)
        lines.append(f"| {category} | {len(got)} | " + " | ".join(f"{s:.0%}" for s in share) + f" | {mrr:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="generated, locomo:PATH or longmemeval:PATH")
    parser.add_argument("--size", default="full")
    parser.add_argument("--min-similarity", type=float, default=0.25)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    import django

    django.setup()
    from agents.evaluation.datasets import load_dataset
    from memory.retrieval.embeddings import WordLlamaEmbedder

    dataset = load_dataset(args.dataset, size=args.size)
    embedder = WordLlamaEmbedder()
    for names in (False, True):
        print(f"\n{args.dataset}: the question {'without the people' + chr(39) + 's names' if names else 'as asked'}\n")
        print("\n".join(table(ranks(dataset, embedder=embedder, names=names, min_similarity=args.min_similarity))))


if __name__ == "__main__":
    main()
