"""The results page (``/evaluation/``): staff only, every run on disk drawn, unreadable files
named, other tools' results ignored."""

from __future__ import annotations

import json
import re

import pytest

from agents.evaluation.report import FORMAT



def report(*, label: str, model: str = "modex-offline", generated_at: str = "2026-12-05 10:00 UTC",
           in_context: float = 0.25, reachable: float = 0.5) -> dict:
    """A small, complete report of the current format (what report.build_report writes)."""
    entry = {
        "config": "session_pruned", "label": "session + pruned", "questions": 2, "answered": 2, "skipped": 0,
        "skip_reason": None, "evidence_questions": 2, "in_context": in_context, "in_context_ci": None,
        "reachable": reachable, "reachable_ci": None, "tiers": {"session tail": in_context, "pruned catalog": 0.5},
        "score": 0.5, "score_ci": None, "judge": None, "judge_ci": None, "judged": 0, "errors": 0,
        "tokens_sent": 1234.0, "context_tokens": 1200.0, "model_calls": 1.0, "wall_s_p50": 0.01, "wall_s_p95": 0.02,
    }
    return {
        "format": FORMAT,
        "setup": {
            "dataset": {"kind": "generated", "label": label, "source": "x", "fingerprint": "abc", "histories": 1,
                        "sessions": 3, "turns": 30, "questions": 2, "categories": ["user_fact"],
                        "headline": ["user_fact"], "notes": []},
            "model": model, "offline": True, "configs": ["session_pruned"],
            "budget": {"context_window": 32768, "threshold": 1500, "keep": 500}, "mapping": "per-session",
        },
        "repeats": 1, "generated_at": generated_at, "wall_s": 3.0, "complete": True, "answered": 2, "expected": 2,
        "score_name": "match",
        "summary": [{**entry, "category": "user_fact"}, {**entry, "category": "all"}],
        "differences": [], "ingest": {}, "answers": [],
    }


@pytest.fixture
def results(tmp_path, settings):
    root = tmp_path / "results"
    (root / "runs").mkdir(parents=True)
    settings.MODEX_EVAL_RESULTS = root
    return root


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(username="staff", password="staff-pw-1", is_staff=True)


@pytest.mark.django_db
def test_only_staff_see_the_page(client, django_user_model, results):
    response = client.get("/evaluation/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    user = django_user_model.objects.create_user(username="ada", password="ada-pw-1")
    client.force_login(user)
    assert client.get("/evaluation/").status_code == 403


@pytest.mark.django_db
def test_every_run_on_disk_is_drawn_newest_first(client, staff, results):
    (results / "memory_eval-committed.json").write_text(json.dumps(report(label="committed run", generated_at="2026-12-01 09:00 UTC")))
    (results / "runs" / "memory_eval-new.json").write_text(json.dumps(report(label="a new run", model="qwen2.5-7b")))
    # a run kept on purpose and still in runs/: drawn once
    (results / "runs" / "memory_eval-committed.json").write_text(json.dumps(report(label="committed run", generated_at="2026-12-01 09:00 UTC")))
    (results / "latest.json").write_text(json.dumps({"workloads": []}))  # make bench's: not ours, ignored
    (results / "runs" / "memory_eval-broken.json").write_text('{"format": ')
    (results / "memory_eval-old.json").write_text(json.dumps({"setup": {}, "summary": []}))
    client.force_login(staff)
    page = client.get("/evaluation/").content.decode()
    titles = re.findall(r'<h2 id="run-\d+" class="eval-title">([^<]+)</h2>', page)
    assert titles == ["a new run · per-session", "committed run · per-session"]
    assert page.count("<svg") == 2 * 4  # recall, in context per category, score, tokens
    assert "qwen2.5-7b" in page and "window 32,768 · cleanup at 1,500 · keeps 500" in page
    assert 'aria-label="Evidence recall, headline categories: in context and reachable"' in page
    assert "25%" in page and "50%" in page and "1,234" in page  # the bars' values
    skipped = page[page.index("Not drawn"):]
    assert "runs/memory_eval-broken.json</code>: not valid JSON" in skipped
    assert "memory_eval-old.json</code>: format of an earlier version" in skipped
    assert "latest.json" not in page


@pytest.mark.django_db
def test_text_from_a_results_file_is_escaped_in_the_charts(client, staff, results):
    hostile = report(label="<script>alert(1)</script>")
    hostile["summary"][0]["category"] = "<img src=x onerror=alert(1)>"
    hostile["setup"]["dataset"]["categories"] = ["<img src=x onerror=alert(1)>"]
    (results / "runs" / "memory_eval-hostile.json").write_text(json.dumps(hostile))
    client.force_login(staff)
    page = client.get("/evaluation/").content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.django_db
def test_no_runs_says_how_to_make_one(client, staff, results):
    client.force_login(staff)
    page = client.get("/evaluation/").content.decode()
    assert "No runs yet" in page and "make eval" in page
