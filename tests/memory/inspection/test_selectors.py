"""Inspection selectors: scope discovery per backend, the catalog's table of contents = grep."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from memory import inspection
from memory.compression.pruned import PrunedCatalog
from memory.inspection_catalog import (
    catalog_page,
    catalog_sessions,
    search_catalogs,
    session_ids,
    session_rows,
    table_of_contents,
)
from memory.messages import Message, ToolCall
from memory.scopes import AgentScope, ChatScope, CompositeScope, GlobalScope, SessionScope, TenantScope, UserScope
from memory.stores.base import ArchiveDocument


def test_scopes_are_discovered_in_every_store(bundle):
    long_composite = CompositeScope(*(AgentScope(f"agent-{'x' * 60}-{i}") for i in range(4)))  # digested on disk
    bundle.messages.append(SessionScope("s1"), [Message(role="user", content="hi")])
    bundle.kv.put(UserScope("42"), "USER.md", "x")
    bundle.kv.put(CompositeScope(AgentScope("a.b"), UserScope("42")), "MEMORY.md", "y")
    bundle.kv.put(GlobalScope(), "note", "z")
    bundle.kv.put(long_composite, "note", "hidden")
    bundle.cursors.set(TenantScope("t"), "dream", 2)
    bundle.archive.put(ChatScope("room"), ArchiveDocument(session="session:s1", summary="s"))
    found = {info.key: info.stores for info in inspection.scopes(bundle)}
    # A composite too long for a directory name is stored under a digest on disk and cannot be
    # named back; a backend may list it or leave it out, never show something else.
    found.pop(long_composite.key(), None)
    assert found == {
        "session:s1": {"messages"},
        "user:42": {"kv"},
        "composite:agent:a.b+user:42": {"kv"},
        "global": {"kv"},
        "tenant:t": {"cursors"},
        "chat:room": {"archive"},
    }
    composites = [i for i in inspection.scopes(bundle, store="kv", kind="composite") if i.scope != long_composite]
    assert [i.key for i in composites] == ["composite:agent:a.b+user:42"]
    info = composites[0]
    assert info.part("agent") == "a.b" and info.part("user") == "42" and info.part("session") is None


def test_an_empty_bundle_has_no_scopes(bundle):
    assert inspection.scopes(bundle) == []


def test_transcript_pairs_results_with_their_calls():
    call = ToolCall(id="c1", name="search", arguments_json='{"q":"x","n":1}')
    items = inspection.transcript([
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content="r", tool_call_id="c1"),
        Message(role="tool", content="r", tool_call_id="unknown"),
    ], deleted_ids=["nothing"])
    assert items[0].calls[0].arguments == '{\n  "q": "x",\n  "n": 1\n}'
    assert items[1].answers == "search" and items[2].answers == "unknown"
    assert inspection.pretty_json("not json {") == "not json {"


@pytest.fixture
def catalog_with_two_files(tmp_path):
    catalog = PrunedCatalog(tmp_path / "pruned")
    session = SessionScope("abc")
    tricky = "line one\n---\n## [99] fake heading\nend"
    first = [Message(role="user", content=tricky, seq=1), Message(role="assistant", content="ok", seq=2)]
    call = ToolCall(id="c", name="lookup", arguments_json="{}")
    second = [Message(role="assistant", tool_calls=(call,), seq=5), Message(role="tool", content="found it",
                                                                          tool_call_id="c", name="lookup", seq=6)]
    catalog.write(session, first)
    catalog.write(session, second)
    return catalog, session


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
def test_table_of_contents_is_exactly_what_grep_prints(catalog_with_two_files):
    catalog, session = catalog_with_two_files
    toc = table_of_contents(catalog, session)
    result = subprocess.run(f'grep -n "^## \\[" pruned/{session.id}/*.md', shell=True, cwd=catalog.root.parent,
                            capture_output=True, text=True, check=True)
    assert [str(line) for line in toc] == result.stdout.splitlines()
    assert [line.seq for line in toc] == [1, 2, 5, 6]


def test_catalog_listing_paging_and_search(bundle, catalog_with_two_files):
    catalog, session = catalog_with_two_files
    assert [(s.session.id, s.files, s.entries) for s in catalog_sessions(catalog)] == [("abc", 2, 4)]
    assert catalog_sessions(catalog, contains="zz") == []
    page = catalog_page(catalog, bundle.messages, session, page=2, per_page=3)
    assert page.pages == 2 and [b.entry.seq for b in page.blocks] == [6]
    assert [line.page for line in page.toc] == [1, 1, 1, 2]
    assert all(block.committed for block in page.blocks)
    hits = search_catalogs(catalog, "FAKE heading")
    assert [h.entry.seq for h in hits] == [1] and "fake heading" in hits[0].snippet
    assert [h.entry.seq for h in search_catalogs(catalog, "lookup")] == [5, 6]
    assert search_catalogs(catalog, "   ") == []
    assert session_ids(bundle, catalog) == ["abc"] and session_ids(bundle, catalog, contains="x") == []
    rows = session_rows(bundle, catalog, ["abc"])
    assert [(r.session.id, r.head, r.catalogued) for r in rows] == [("abc", None, 4)]


def test_blocks_of_an_uncommitted_cleanup_are_flagged(bundle, tmp_path):
    catalog = PrunedCatalog(tmp_path / "pruned")
    session = SessionScope("live")
    stored = bundle.messages.append(session, [Message(role="user", content=f"m{i}") for i in range(3)])
    catalog.write(session, stored[:2])  # the catalog is written, the prune never committed
    page = catalog_page(catalog, bundle.messages, session)
    assert [b.committed for b in page.blocks] == [False, False]
