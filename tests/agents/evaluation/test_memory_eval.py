"""``manage.py memory_eval`` end to end: the small dataset through real stores, real cleanups,
the Dream Engine and the runtime, with the offline model; resuming; an OpenAI-compatible
endpoint (the fake server) with the judge.

The offline figures are recorded, not asserted as quality. What is asserted is what the
pipeline guarantees: every configuration and kind gets its row, core memory reaches the
answer, a session never sees another session's messages, an interrupted run loses nothing.
"""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import default_task_backend

from agents.evaluation.configs import CONFIGS
from agents.evaluation.dataset import KINDS, SIZES
from memory.compression.summary import SECTIONS
from tests.fakes.openai_server import FAKE_API_KEY, Reply, server_error, start_fake_server


def run(tmp_path, *args):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "memory_eval", "--workdir", str(tmp_path / "run"), "--out", str(tmp_path / "out" / "eval"), *args,
        stdout=out, stderr=err,
    )
    return out.getvalue(), err.getvalue()


def report(tmp_path):
    return json.loads((tmp_path / "out" / "eval.json").read_text())


def rows(data, config, kind=None):
    return [r for r in data["answers"] if r["config"] == config and (kind is None or r["kind"] == kind)]


def log_lines(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "answers.jsonl").read_text().splitlines()]


def test_the_small_size_runs_end_to_end_with_the_offline_model(tmp_path):
    default_task_backend.clear()
    out, err = run(tmp_path)
    data = report(tmp_path)
    size = SIZES["small"]
    assert data["complete"] and data["answered"] == len(CONFIGS) * len(KINDS) * size.per_kind
    markdown = (tmp_path / "out" / "eval.md").read_text()
    for config in CONFIGS:
        for kind in KINDS:
            assert re.search(rf"^\| {re.escape(config.label)} \| {kind} \| {size.per_kind} \| \d+% \|", markdown, re.M)
        summary = {s["kind"]: s for s in data["summary"] if s["config"] == config.name}
        assert set(summary) == {*KINDS, "all"} and summary["all"]["answered"] == len(KINDS) * size.per_kind
    assert "## Accuracy by kind" in markdown and "complete:" in out and "40/40" in err

    for row in data["answers"]:
        assert row["error"] is None and row["answer"] and row["model_calls"] >= 1 and row["tokens_sent"] > 0
    # Core memory is injected and answered from: every planted fact the Dream Engine kept.
    for kind in ("single_fact", "updated_fact", "multi_session"):
        for row in rows(data, "archive_core", kind):
            assert row["correct"] and "<user_profile>" in row["reasoning"], row
    # Session + pruned answers what was said in this session, after cleanups took it out.
    assert all(r["correct"] for r in rows(data, "session_pruned", "single_fact"))
    # ...and never sees another session: a fact told only there is not found.
    assert not any(r["correct"] for r in rows(data, "session_pruned", "multi_session"))
    assert all(r["correct"] for config in CONFIGS for r in rows(data, config.name, "not_told"))

    ingest = data["ingest"]
    assert ingest["session_pruned"]["cleanups"] >= size.sessions  # several cleanups per history
    assert ingest["full_context"]["cleanups"] == 0
    assert ingest["archive_core"]["consolidations"] == size.sessions and ingest["archive_core"]["core_edits"] > 0
    mean = {s["config"]: s["tokens_sent"] for s in data["summary"] if s["kind"] == "all"}
    assert mean["full_context"] > mean["session_pruned"]  # the whole history costs more per answer
    assert not (tmp_path / "run" / "ingested").exists()  # workspaces go once the run is complete
    assert list(default_task_backend.results) == []  # the run queues nothing for the app's task worker


def test_an_interrupted_run_resumes_without_redoing_anything(tmp_path):
    run(tmp_path, "--configs", "session_pruned", "--limit", "4")
    first = report(tmp_path)
    assert not first["complete"] and first["answered"] == 4
    assert "**incomplete**: 4 of 10 answers" in (tmp_path / "out" / "eval.md").read_text()
    done = [line["row"]["question"] for line in log_lines(tmp_path) if line["type"] == "answer"]
    with (tmp_path / "run" / "answers.jsonl").open("a") as f:
        f.write('{"type": "answer", "row": {"conf')  # a line cut off by the interruption

    out, _ = run(tmp_path, "--configs", "session_pruned")
    data = report(tmp_path)
    assert data["complete"] and data["answered"] == 10
    assert sorted(r["question"] for r in data["answers"]) == sorted({r["question"] for r in data["answers"]})
    assert [r["question"] for r in data["answers"]][:4] == done  # kept, not asked again
    assert [line["type"] for line in log_lines(tmp_path)[:-1]].count("ingest") == 1  # the history was read in once

    with pytest.raises(CommandError, match="another setup.*--fresh"):
        run(tmp_path, "--configs", "session_pruned", "--threshold", "1400")
    run(tmp_path, "--configs", "session_pruned", "--threshold", "1400", "--fresh", "--limit", "1")
    assert report(tmp_path)["answered"] == 1


def test_full_context_is_skipped_when_the_history_does_not_fit_the_window(tmp_path):
    run(tmp_path, "--configs", "full_context,session_pruned", "--context-window", "4096", "--limit", "1")
    data = report(tmp_path)
    skipped = rows(data, "full_context")
    assert len(skipped) == 10 and all("does not fit the 4096-token window" in r["skipped"] for r in skipped)
    markdown = (tmp_path / "out" / "eval.md").read_text()
    assert "| **all** | does not fit |" in markdown
    assert re.search(r"^\| full context \(no cleanup\) \| single_fact \| 2 \| skipped: the history", markdown, re.M)
    assert len(rows(data, "session_pruned")) == 1  # skipped rows do not count against --limit


def test_bad_options_are_refused_with_a_clear_message(tmp_path):
    with pytest.raises(CommandError, match="unknown configuration.*nope"):
        run(tmp_path, "--configs", "nope")
    with pytest.raises(CommandError, match="keep_tokens .* must be below the threshold"):
        run(tmp_path, "--keep", "2000", "--threshold", "1500")
    with pytest.raises(CommandError, match="--judge needs an OpenAI-compatible endpoint"):
        run(tmp_path, "--judge")


def use_endpoint(monkeypatch, server):
    for name, value in {
        "OPENAI_BASE_URL": server.url, "OPENAI_MODEL": "fake-model", "OPENAI_API_KEY": FAKE_API_KEY,
        "OPENAI_MAX_RETRIES": "0", "OPENAI_TIMEOUT": "5",
    }.items():
        monkeypatch.setenv(name, value)


def summary_reply():
    return Reply(content="\n".join(f"## {name}\n- (nothing kept)" for name in SECTIONS))


def test_an_endpoint_outage_stops_the_run_and_the_next_run_resumes(tmp_path, monkeypatch):
    server = start_fake_server()
    state = {"down": False, "answers": 0}

    def respond(request):
        if not request.json.get("tools"):
            return summary_reply()
        if state["down"]:
            return server_error(503)
        state["answers"] += 1
        state["down"] = state["answers"] == 3  # the server goes away after three answers
        return Reply(content="I do not know.")

    server.responder = respond
    use_endpoint(monkeypatch, server)
    try:
        with pytest.raises(CommandError, match="endpoint failed while answering .* run the same command again"):
            run(tmp_path, "--size", "small", "--configs", "session_pruned")
        assert report(tmp_path)["answered"] == 3  # the failed answer is not recorded as a wrong one
        state["down"] = False
        run(tmp_path, "--size", "small", "--configs", "session_pruned")
    finally:
        server.stop()
    data = report(tmp_path)
    assert data["complete"] and data["answered"] == 10 and all(r["error"] is None for r in data["answers"])
    assert state["answers"] == 10  # every question answered once


def test_with_an_endpoint_it_asks_that_model_and_the_judge(tmp_path, monkeypatch):
    server = start_fake_server()

    def respond(request):
        last = request.json["messages"][-1]["content"] or ""
        if "CORRECT or WRONG?" in last:
            return Reply(content="CORRECT" if "never told" in last else "WRONG")
        if not request.json.get("tools"):  # a cleanup's compact summary
            return summary_reply()
        return Reply(content="I do not know.")

    server.responder = respond
    use_endpoint(monkeypatch, server)
    try:
        out, _ = run(tmp_path, "--size", "small", "--configs", "session_pruned,archive", "--judge", "--parallel", "2")
    finally:
        server.stop()
    data = report(tmp_path)
    assert data["setup"]["model"] == "fake-model" and not data["setup"]["offline"] and data["complete"]
    assert sorted((r["config"], r["question"]) for r in data["answers"]) == sorted(
        {(r["config"], r["question"]) for r in data["answers"]}
    ) and data["answered"] == 20  # both pairs at once, every question once per configuration
    for row in data["answers"]:
        assert row["answer"] == "I do not know." and row["correct"] == (row["kind"] == "not_told")
        assert row["judge_correct"] == (row["kind"] == "not_told")
        assert row["tokens_sent"] == 11 * row["model_calls"]  # the usage the endpoint reported
    assert "| judge |" in (tmp_path / "out" / "eval.md").read_text()
    questions = [r.json for r in server.chat_requests if r.json["messages"][-1]["content"].startswith("What is my")]
    assert len(questions) == 20
    for ingest in data["ingest"].values():
        assert ingest["cleanups"] >= 3 and ingest["fallback_summaries"] == 0
    system = questions[0]["messages"][0]["content"]
    assert "<pruned_messages" in system and "do not know" in system
    offered = [{t["function"]["name"] for t in q["tools"]} for q in questions]
    assert {"pruned_lookup"} in offered and {"pruned_lookup", "archive_search", "archive_read"} in offered  # only the layers on
    assert all("core_memory" not in names for names in offered)
