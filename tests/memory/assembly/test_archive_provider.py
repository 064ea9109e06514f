"""ArchiveProvider's summaries: budget, order, attributes, hostile summaries."""

from __future__ import annotations

import pytest

from memory.assembly.archive import ArchiveProvider
from memory.config import MemoryConfig
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import ArchiveDocument

from .helpers import HOSTILE, T0, ctx, parse

ARCHIVE = CompositeScope(AgentScope("default"), UserScope("42"))


def archive(bundle, n, *, summary="Discussed the {i}th topic at length.", title="Topic {i}", scope=ARCHIVE):
    return [
        bundle.archive.put(
            scope,
            ArchiveDocument(
                session="session:s1",
                summary=summary.format(i=i),
                title=title.format(i=i),
                created_at=T0.replace(day=1 + i % 27),
            ),
        )
        for i in range(1, n + 1)
    ]


def test_nothing_when_the_archive_is_off(bundle):
    archive(bundle, 2)
    assert ArchiveProvider().provide(ctx(bundle, config=MemoryConfig())) is None


def test_nothing_when_the_archive_is_empty(bundle):
    assert ArchiveProvider().provide(ctx(bundle)) is None


def test_documents_render_oldest_first_with_seq_date_title(bundle):
    docs = archive(bundle, 3)
    section = ArchiveProvider().provide(ctx(bundle))
    root = parse(section.text).find("archive_summaries")
    shown = root.findall("document")
    assert [d.get("seq") for d in shown] == [str(doc.seq) for doc in docs]
    assert shown[0].get("date") == f"{docs[0].created_at.day} {docs[0].created_at:%b %Y}"  # e.g. "2 Jan 2026"
    assert shown[0].get("title") == "Topic 1"
    assert shown[2].text == "Discussed the 3th topic at length."
    assert section.items == 3 and section.name == "archive"
    assert "archive_search" in root.find("note").text
    assert "Older ones" not in root.find("note").text


def test_only_the_newest_that_fit_the_budget(bundle):
    docs = archive(bundle, 40, summary="A long summary of conversation {i}. " + "More detail here. " * 20)
    config = MemoryConfig(archive_enabled=True, core_enabled=True, archive_budget_tokens=400)
    section = ArchiveProvider().provide(ctx(bundle, config=config))
    assert section.tokens <= 400
    root = parse(section.text).find("archive_summaries")
    seqs = [int(d.get("seq")) for d in root.findall("document")]
    assert seqs == sorted(seqs) and seqs[-1] == docs[-1].seq and len(seqs) == section.items < 40
    assert "Older ones exist" in root.find("note").text


def test_a_summary_larger_than_the_budget_is_shortened(bundle):
    archive(bundle, 1, summary="word " * 3000)
    config = MemoryConfig(archive_enabled=True, core_enabled=True, archive_budget_tokens=200)
    section = ArchiveProvider().provide(ctx(bundle, config=config))
    assert section.items == 1 and section.tokens <= 200
    assert "shortened" in parse(section.text).find("archive_summaries/document").text


def test_other_scopes_are_not_shown(bundle):
    archive(bundle, 2, scope=CompositeScope(AgentScope("default"), UserScope("43")))
    assert ArchiveProvider().provide(ctx(bundle)) is None


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_titles_and_summaries_stay_inside(bundle, hostile):
    archive(bundle, 2, summary=hostile + " {i}", title=hostile)
    root = parse(ArchiveProvider().provide(ctx(bundle)).text)
    assert [c.tag for c in root] == ["archive_summaries"]
    documents = root.find("archive_summaries").findall("document")
    assert len(documents) == 2
    for document in documents:
        assert list(document) == []
        assert "\x00" not in document.text and document.get("title").startswith(hostile[:3].replace("\x00", ""))


def test_the_summaries_are_a_part_of_their_own(bundle):
    archive(bundle, 2)
    section = ArchiveProvider().provide(ctx(bundle))
    [part] = section.parts  # no retrieval here: no recall part
    assert part.key == "archive_summaries" and part.text == section.text and part.items == 2
