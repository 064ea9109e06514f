"""The archive router: the caller's own archive only; list, read, search."""

from __future__ import annotations

import pytest

from tests.agents.inspection.support import HOSTILE, seed
from tests.agents.inspection.test_api import api_for

pytestmark = pytest.mark.django_db


def test_archive_list_read_search(services, owner, colleague):
    mine = seed(services, owner, marker="owner")
    seed(services, colleague, marker="colleague")
    call = api_for(owner)
    assert call("get", "/memory/archives").json() == [
        {"agent": "default", "scope": mine.archive_scope.key(), "documents": 1}]
    listed = call("get", "/memory/archives/default/documents").json()
    assert [d["title"] for d in listed] == ["owner weather talk"] and listed[0]["message_count"] == 4
    document = call("get", f"/memory/archives/default/documents/{mine.document.id}").json()
    assert document["summary"].endswith(HOSTILE)  # JSON carries the text as stored; pages escape it
    assert [m["role"] for m in document["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert document["messages"][1]["tool_calls"][0]["name"] == "search"
    hits = call("get", "/memory/archives/default/search?q=weather").json()
    assert [h["document"]["id"] for h in hits] == [mine.document.id]
    assert call("get", "/memory/archives/default/search?q=colleague").json() == []
    assert call("get", "/memory/archives/default/search?q=").json() == []
    assert call("get", "/memory/archives/default/search").status_code == 422


@pytest.mark.parametrize("path", ["/memory/archives/bad%20agent/documents", "/memory/archives/default/documents/..",
                                  "/memory/archives/default/documents/bad%20id", "/memory/archives/default/documents/nope"])
def test_bad_or_unknown_ids_are_404(services, owner, path):
    assert api_for(owner)("get", path).status_code == 404


def test_paging_parameters_are_checked(services, owner):
    call = api_for(owner)
    assert call("get", "/memory/archives/default/documents?limit=0").status_code == 422
    assert call("get", "/memory/archives/default/documents?after_seq=-1").status_code == 422
    assert call("get", "/memory/archives/default/documents?newest_first=true&limit=5").status_code == 200
