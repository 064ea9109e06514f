"""``manage.py memory_eval`` end to end: datasets read into real stores with real cleanups, the
Dream Engine between conversations, every question asked through the runtime, with the offline
model; resuming; repeats and comparisons; an OpenAI-compatible endpoint (the fake server) with
the judge.

The offline figures are recorded, not asserted as quality. What is asserted is what the harness
guarantees: every configuration and category gets its row, dataset turns keep their ids and
dates, a new conversation sees nothing of the earlier ones without long-term memory, evidence
is found where the message itself was sent, an interrupted run loses nothing.
"""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import default_task_backend

from agents.evaluation.configs import CONFIGS
from agents.evaluation.data import message_id, safe_id
from agents.evaluation.generated import CATEGORIES, SIZES
from agents.evaluation.loaders import load_locomo
from memory.compression.summary import SECTIONS
from memory.scopes import SessionScope
from memory.stores.registry import open_bundle
from tests.fakes.openai_server import FAKE_API_KEY, Reply, server_error, start_fake_server

FIXTURES = Path(__file__).parent / "fixtures"
LOCOMO = FIXTURES / "locomo_sample.json"
SMALL = SIZES["small"]
PER_CONFIG = len(CATEGORIES) * SMALL.per_category


def run(tmp_path, *args, name="eval"):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "memory_eval", "--workdir", str(tmp_path / f"run-{name}"), "--out", str(tmp_path / "out" / name), *args,
        stdout=out, stderr=err,
    )
    return out.getvalue(), err.getvalue()


def report(tmp_path, name="eval"):
    return json.loads((tmp_path / "out" / f"{name}.json").read_text())


def rows(data, config, category=None):
    return [r for r in data["answers"] if r["config"] == config and (category is None or r["category"] == category)]


def summary(data, config, category="all"):
    return next(s for s in data["summary"] if s["config"] == config and s["category"] == category)


def log_lines(tmp_path, name="eval"):
    return [json.loads(line) for line in (tmp_path / f"run-{name}" / "answers.jsonl").read_text().splitlines()]


def test_the_default_run_asks_every_question_in_a_new_conversation(tmp_path):
    default_task_backend.clear()
    out, err = run(tmp_path)
    data = report(tmp_path)
    assert data["format"] == "modex-memory-eval/2" and data["setup"]["mapping"] == "per-session"
    assert data["complete"] and data["answered"] == len(CONFIGS) * PER_CONFIG
    markdown = (tmp_path / "out" / "eval.md").read_text()
    for config in CONFIGS:
        assert {s["category"] for s in data["summary"] if s["config"] == config.name} == {*CATEGORIES, "all"}
    for heading in ("## Evidence recall: in context / reachable", "## Where the evidence was (all)", "## Scores: match",
                    "## Cost per answer (all)", "## Differences between configurations (all)"):
        assert heading in markdown
    assert re.search(r"^\| \*\*all\*\* \| 100% / 100% \| 0% / 0% \|", markdown, re.M)
    assert "complete in" in out and f"{4 * PER_CONFIG}/{4 * PER_CONFIG}" in err
    for row in data["answers"]:
        assert row["error"] is None and row["answer"] and row["model_calls"] >= 1 and row["tokens_sent"] > 0
        assert (row["in_context"] is None) == (row["category"] == "abstention")
    # Full context holds every message itself: all evidence found by id, in the session tail.
    for row in rows(data, "full_context"):
        assert all(e["in_context"] and e["tiers"] == ["session tail"] for e in row["evidence"])
    # Without long-term memory, a new conversation sees nothing of the earlier ones.
    assert summary(data, "session_pruned")["in_context"] == 0 and summary(data, "session_pruned")["reachable"] == 0
    ingest = data["ingest"]
    assert ingest["session_pruned"]["conversations"] == SMALL.sessions and ingest["full_context"]["conversations"] == 1
    assert ingest["full_context"]["cleanups"] == 0
    # What runs when a user leaves a conversation: with core memory, the Dream Engine.
    assert ingest["archive_core"]["consolidations"] >= SMALL.sessions
    assert ingest["archive"]["consolidations"] == 0
    assert summary(data, "full_context")["tokens_sent"] > 5 * summary(data, "session_pruned")["tokens_sent"]
    diffs = {(d["metric"], d["a"], d["b"]): d for d in data["differences"]}
    assert diffs[("in_context", "full_context", "session_pruned")]["beyond_noise"]
    assert not (tmp_path / "run-eval" / "r1").exists()  # workspaces go once the run is complete
    assert list(default_task_backend.results) == []  # the run queues nothing for the app's task worker


def test_turns_keep_their_dataset_ids_and_dates(tmp_path):
    run(tmp_path, "--dataset", f"locomo:{LOCOMO}", "--histories", "1", "--configs", "session_pruned",
        "--keep-workdir", "--limit", "2")
    nadia = load_locomo(LOCOMO).histories[0]
    store = open_bundle("file", root=tmp_path / "run-eval" / "r1" / "ingested" / nadia.id / "session_pruned" / "memory")
    for session in nadia.sessions:
        stored = store.messages.read(SessionScope(safe_id(f"{nadia.id}.{session.id}")))
        assert [m.id for m in stored] == [message_id(t.id) for t in session.turns]
        assert [m.role for m in stored] == [t.role for t in session.turns]
        assert [m.created_at for m in stored] == [session.date + timedelta(seconds=n) for n in range(len(session.turns))]
        assert [m.content for m in stored] == [t.text for t in session.turns]
    data = report(tmp_path)
    assert data["answered"] == 2 and not data["complete"]
    assert "In these conversations the user is Nadia and you are Felix" not in json.dumps(data)  # not stored as data


def test_with_one_conversation_cleanups_evict_evidence_and_the_tiers_say_where_it_went(tmp_path):
    run(tmp_path, "--mapping", "single", "--configs", "session_pruned,archive,archive_core")
    data = report(tmp_path)
    assert data["ingest"]["session_pruned"]["conversations"] == 1 and data["ingest"]["session_pruned"]["cleanups"] >= 2
    found = summary(data, "session_pruned")
    assert 0 < found["in_context"] < 1
    assert set(found["tiers"]) <= {"session tail", "pruned catalog", "compact summary"} and "session tail" in found["tiers"]
    assert any("pruned catalog" in e["tiers"] for r in data["answers"] for e in r["evidence"])
    # The archive's cleanups feed the Dream Engine, and core memory is in every answer's request.
    core = data["ingest"]["archive_core"]
    assert core["consolidations"] == core["cleanups"] and core["core_edits"] >= 1
    sizes = {(r["config"], r["question"]): r["context_tokens"] for r in data["answers"]}
    assert all(sizes[("archive_core", q)] > sizes[("archive", q)] > sizes[("session_pruned", q)]
               for _, q in sizes)


def test_an_interrupted_run_resumes_without_redoing_anything(tmp_path):
    run(tmp_path, "--configs", "session_pruned", "--limit", "4")
    first = report(tmp_path)
    assert not first["complete"] and first["answered"] == 4
    assert f"**incomplete**: 4 of {PER_CONFIG} answers" in (tmp_path / "out" / "eval.md").read_text()
    done = [line["row"]["question"] for line in log_lines(tmp_path) if line["type"] == "answer"]
    with (tmp_path / "run-eval" / "answers.jsonl").open("a") as f:
        f.write('{"type": "answer", "row": {"conf')  # a line cut off by the interruption

    run(tmp_path, "--configs", "session_pruned")
    data = report(tmp_path)
    assert data["complete"] and data["answered"] == PER_CONFIG
    assert sorted(r["question"] for r in data["answers"]) == sorted({r["question"] for r in data["answers"]})
    assert [r["question"] for r in data["answers"]][:4] == done  # kept, not asked again
    assert [line["type"] for line in log_lines(tmp_path)].count("ingest") == 1  # the history was read in once
    assert [line["type"] for line in log_lines(tmp_path)].count("wall") == 2 and data["wall_s"] > 0

    with pytest.raises(CommandError, match="another setup.*--fresh"):
        run(tmp_path, "--configs", "session_pruned", "--threshold", "1400")
    run(tmp_path, "--configs", "session_pruned", "--threshold", "1400", "--fresh", "--limit", "1")
    assert report(tmp_path)["answered"] == 1


def test_repeats_give_intervals_and_a_comparison_says_what_is_beyond_noise(tmp_path):
    run(tmp_path, "--configs", "session_pruned,archive", "--repeats", "2", name="a")
    a = report(tmp_path, "a")
    assert a["complete"] and a["repeats"] == 2 and a["answered"] == 2 * 2 * PER_CONFIG
    assert {r["repeat"] for r in a["answers"]} == {1, 2}
    entry = summary(a, "session_pruned")
    assert entry["score_ci"] == [entry["score"], entry["score"]]  # the offline model: the same every time
    run(tmp_path, "--configs", "session_pruned,archive", "--mapping", "single", name="b")
    out, _ = run(tmp_path, "--compare", str(tmp_path / "out" / "a.json"), str(tmp_path / "out" / "b.json"))
    line = next(
        line for line in out.splitlines()
        if line.startswith("| in_context | session + pruned | session + pruned | all |")
    )
    assert line.endswith("| **yes** |"), line  # 0% in a new conversation, some in the same one
    assert "| score | session + pruned | session + pruned | all |" in out
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(CommandError, match="not a memory_eval results file"):
        run(tmp_path, "--compare", str(tmp_path / "junk.json"), str(tmp_path / "out" / "b.json"))


def test_new_runs_go_to_the_results_folder_by_default(tmp_path, settings):
    settings.MODEX_EVAL_RESULTS = tmp_path / "results"
    settings.MODEX_WORKSPACE = tmp_path / "workspace"
    out = io.StringIO()
    call_command("memory_eval", "--configs", "session_pruned", "--limit", "1", stdout=out, stderr=io.StringIO())
    [written] = (tmp_path / "results" / "runs").glob("memory_eval-generated-small-per-session-modex-offline-*.json")
    assert written.with_suffix(".md").exists() and str(written.with_suffix(".md")) in out.getvalue()


def test_full_context_is_skipped_when_the_history_does_not_fit_the_window(tmp_path):
    run(tmp_path, "--configs", "full_context,session_pruned", "--context-window", "4096", "--limit", "1")
    data = report(tmp_path)
    skipped = rows(data, "full_context")
    assert len(skipped) == PER_CONFIG and all("does not fit the 4096-token window" in r["skipped"] for r in skipped)
    assert "| full context (no cleanup) | skipped: the history" in (tmp_path / "out" / "eval.md").read_text()
    assert len(rows(data, "session_pruned")) == 1  # skipped rows do not count against --limit


def test_the_archive_budget_is_an_option_and_is_recorded(tmp_path):
    """--archive-budget sets the archive section's tokens (a history long for its budget, as real
    ones are, on a small dataset); the results say which budget they were measured with."""
    run(tmp_path, "--configs", "archive", "--archive-budget", "200", name="small")
    run(tmp_path, "--configs", "archive", name="shipped")
    small, shipped = report(tmp_path, "small"), report(tmp_path, "shipped")
    assert small["setup"]["budget"]["archive"] == 200 and shipped["setup"]["budget"]["archive"] == 1500
    assert "archive section 200 tokens" in (tmp_path / "out" / "small.md").read_text()
    assert summary(small, "archive")["tokens_sent"] < summary(shipped, "archive")["tokens_sent"]
    with pytest.raises(CommandError, match="--archive-budget must be at least 0"):
        run(tmp_path, "--configs", "archive", "--archive-budget", "-1", name="bad")


def test_bad_options_are_refused_with_a_clear_message(tmp_path):
    with pytest.raises(CommandError, match="unknown configuration.*nope"):
        run(tmp_path, "--configs", "nope")
    with pytest.raises(CommandError, match="keep_tokens .* must be below the threshold"):
        run(tmp_path, "--keep", "2000", "--threshold", "1500")
    with pytest.raises(CommandError, match="--judge needs an OpenAI-compatible endpoint"):
        run(tmp_path, "--judge")
    with pytest.raises(CommandError, match="--repeats must be at least 1"):
        run(tmp_path, "--repeats", "0")
    with pytest.raises(CommandError, match="no such file"):
        run(tmp_path, "--dataset", f"locomo:{tmp_path / 'nope.json'}")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"sample_id": "s", "conversation": {"speaker_a": "A"}, "qa": []}]))
    with pytest.raises(CommandError, match=r"broken.json: sample 0 \(s\): conversation: 'speaker_b' is missing"):
        run(tmp_path, "--dataset", f"locomo:{broken}")


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
    assert data["complete"] and data["answered"] == PER_CONFIG and all(r["error"] is None for r in data["answers"])
    assert state["answers"] == PER_CONFIG  # every question answered once


def test_with_an_endpoint_it_asks_that_model_and_the_judge(tmp_path, monkeypatch):
    server = start_fake_server()

    def respond(request):
        last = request.json["messages"][-1]["content"] or ""
        if "CORRECT or WRONG?" in last:
            return Reply(content="CORRECT" if "never said" in last else "WRONG")
        if not request.json.get("tools"):  # a cleanup's compact summary
            return summary_reply()
        return Reply(content="I do not know.")

    server.responder = respond
    use_endpoint(monkeypatch, server)
    try:
        run(tmp_path, "--size", "small", "--mapping", "single", "--configs", "session_pruned,archive", "--judge",
            "--parallel", "2")
    finally:
        server.stop()
    data = report(tmp_path)
    assert data["setup"]["model"] == "fake-model" and not data["setup"]["offline"] and data["complete"]
    assert data["answered"] == 2 * PER_CONFIG
    for row in data["answers"]:
        abstention = row["category"] == "abstention"
        assert row["answer"] == "I do not know." and row["score"] == float(abstention) and row["judge"] is abstention
    assert "## Judge: share judged correct" in (tmp_path / "out" / "eval.md").read_text()
    judged = [r.json for r in server.chat_requests if "CORRECT or WRONG?" in (r.json["messages"][-1]["content"] or "")]
    assert len(judged) == 2 * PER_CONFIG and all(j["temperature"] == 0 for j in judged)
    questions = [r.json for r in server.chat_requests if r.json.get("tools")]
    assert len(questions) == 2 * PER_CONFIG
    system = questions[0]["messages"][0]["content"]
    assert "<pruned_messages" in system and "Today is " in system
    offered = [{t["function"]["name"] for t in q["tools"]} for q in questions]
    assert {"pruned_lookup"} in offered and {"pruned_lookup", "archive_search", "archive_read"} in offered  # only the layers on
    for ingest in data["ingest"].values():
        assert ingest["cleanups"] >= 2 and ingest["fallback_summaries"] == 0
