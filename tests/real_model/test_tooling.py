"""The real-model tooling without a model: the llama-server command line ``scripts/llama_server.py``
builds, and how the real-model benchmark (``benchmarks.real_chat``) reads the server's log and
finds where a turn's request first differs from the turn before. Runs everywhere (no server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from benchmarks.real_chat import first_change, key_in, request_segments, server_tasks  # noqa: E402
from scripts.llama_server import BATCH, command  # noqa: E402


def _argv(**kwargs) -> list[str]:
    return command(binary=Path("/opt/llama-server"), model=Path("/m.gguf"), port=8080, **kwargs)


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_the_server_reads_prompts_in_small_steps_so_a_turn_never_waits_behind_a_long_one():
    # A step in progress cannot be stopped: a turn arriving while background work's prompt is
    # read waits for it. The server's default step is 2048 tokens; ours is small.
    argv = _argv(slots=2, context=16384)
    assert BATCH <= 128
    assert (_flag(argv, "-b"), _flag(argv, "-ub")) == (str(BATCH), str(BATCH))
    assert (_flag(argv, "-np"), _flag(argv, "-c"), _flag(argv, "-t")) == ("2", "16384", "1")
    assert argv[:3] == ["/opt/llama-server", "-m", "/m.gguf"] and "--chat-template-file" not in argv


def test_the_batch_can_be_left_to_the_server():
    argv = _argv(batch=None)
    assert "-b" not in argv and "-ub" not in argv


def test_a_comparison_can_ask_for_greedy_replies():
    assert _flag(_argv(greedy=True), "--temp") == "0"
    assert "--temp" not in _argv()  # the model's own sampling otherwise


# Lines as llama-server 0.6 writes them (one finished call per slot, one cancelled mid-prompt).
LOG = """\
1.13.733.805 I slot get_availabl: id  1 | task -1 | selected slot by id (1)
1.13.734.706 I slot launch_slot_: id  1 | task 511 | processing task, is_child = 0
1.16.263.229 I slot print_timing: id  1 | task 511 | prompt eval time =     826.78 ms /   142 tokens (    5.82 ms per token,   171.75 tokens per second)
1.16.263.234 I slot print_timing: id  1 | task 511 |        eval time =    1694.88 ms /   118 tokens (   14.49 ms per token,    69.03 tokens per second)
1.16.263.234 I slot print_timing: id  1 | task 511 |       total time =    2521.67 ms /   260 tokens
1.16.265.120 I slot      release: id  1 | task 511 | stop processing: n_tokens = 458, truncated = 0
1.25.337.498 I slot launch_slot_: id  1 | task 718 | processing task, is_child = 0
1.28.392.399 W srv          stop: cancel task, id_task = 718
1.28.406.086 I slot      release: id  1 | task 718 | stop processing: n_tokens = 512, truncated = 0
1.28.440.324 I slot launch_slot_: id  0 | task 846 | processing task, is_child = 0
1.32.874.393 I slot print_timing: id  0 | task 846 | prompt eval time =     436.10 ms /    69 tokens (    6.32 ms per token,   158.22 tokens per second)
1.32.874.434 I slot print_timing: id  0 | task 846 |        eval time =    3990.69 ms /   256 tokens (   15.65 ms per token,    63.90 tokens per second)
1.32.874.519 I slot      release: id  0 | task 846 | stop processing: n_tokens = 788, truncated = 0
1.37.936.927 I slot launch_slot_: id  1 | task 1103 | processing task, is_child = 0
"""


def test_server_tasks_reads_what_each_call_processed_and_found_cached(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG + "1.41.229.633 I slot      release: id  1 | task 1103 | stop proce")  # a line being written
    tasks, offset = server_tasks(log, 0)
    assert [(t["slot"], t["task"]) for t in tasks] == [(1, 511), (1, 718), (0, 846)]  # 1103 has not ended
    first, cancelled, chat = tasks
    assert (first["prompt_n"], first["gen_n"], first["n_tokens"], first["cache_n"]) == (142, 118, 458, 198)
    assert "prompt_n" not in cancelled and cancelled["n_tokens"] == 512  # stopped before its prompt was read
    assert (chat["prompt_n"], chat["cache_n"], chat["prompt_ms"]) == (69, 788 - 256 - 69, 436.10)
    assert offset == len(LOG.encode())  # the unfinished last line is read next time
    with log.open("a") as handle:
        handle.write("ssing: n_tokens = 586, truncated = 0\n")
    later, _ = server_tasks(log, offset)
    assert later == [{"slot": 1, "task": 1103, "n_tokens": 586}]


def test_server_tasks_without_a_log():
    assert server_tasks(None, 0) == ([], 0)
    assert server_tasks(Path("/nonexistent/server.log"), 7) == ([], 7)


def _context(instructions: str, sections: dict[str, str], messages: list[dict]):
    sections_ = tuple(SimpleNamespace(name=name, text=text, parts=()) for name, text in sections.items())
    system = "\n\n".join([instructions, *sections.values()])
    return SimpleNamespace(instructions=instructions, sections=sections_,
                           messages=[{"role": "system", "content": system}, *messages])


def _recalled(recall: str, question: str):
    """A context whose archive recall was sent with the latest message (MODEX_RECALL_PLACEMENT=message)."""
    parts = (SimpleNamespace(key="archive_recall", text=recall), SimpleNamespace(key="archive_summaries", text="<s/>"))
    archive = SimpleNamespace(name="archive", text=f"{recall}\n<s/>", parts=parts)
    return SimpleNamespace(instructions="Be brief.", sections=(archive,), messages=[
        {"role": "system", "content": "Be brief.\n\n<s/>"},
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hey"},
        {"role": "user", "content": f"{recall}\n\n{question}"},
    ])


def test_recall_sent_with_the_message_changes_the_message_not_the_system_message():
    before = request_segments(_recalled("<archive_recall>a</archive_recall>", "?"))
    after = request_segments(_recalled("<archive_recall>b</archive_recall>", "?"))
    assert ("archive", "<s/>") in before
    changed, _ = first_change(before, after)
    assert changed == "message 3 (user)"


def test_first_change_names_the_first_part_of_the_request_that_differs():
    hello = [{"role": "user", "content": "hi"}]
    before = request_segments(_context("Be brief.", {"core memory": "<c/>"}, hello))
    grown = request_segments(_context("Be brief.", {"core memory": "<c/>"},
                                      [*hello, {"role": "assistant", "content": "hey"}, {"role": "user", "content": "?"}]))
    assert first_change(None, before) == ("first request", {})
    assert first_change(before, grown) == ("appended only", {})
    lesson = request_segments(_context("Be brief.", {"core memory": "<c/>", "experiences": "<e>new</e>"}, hello))
    assert first_change(before, lesson) == ("experiences (was message 1 (user))",
                                            {"before": before[2][1], "after": "<e>new</e>"})
    edited = request_segments(_context("Be brief.", {"core memory": "<c>x</c>"}, hello))
    assert first_change(before, edited) == ("core memory", {"before": "<c/>", "after": "<c>x</c>"})


def test_key_in_says_where_the_request_gave_the_model_the_answer_and_not_in_the_question():
    question = 'What is "my" cat called?'
    asked = ("message 3 (user)", json.dumps({"role": "user", "content": question}))
    segments = [("instructions", "You are helpful."), ("core_memory", "<user_profile>Has a cat, Pixel</user_profile>"),
                ("archive", "<archive_recall>1.4 user: I am allergic to peanuts</archive_recall>"),
                ("message 1 (user)", json.dumps({"role": "user", "content": "Hi, I am Ilse"})), asked]
    assert key_in(segments, key="pixel", question=question) == ["core_memory"]
    assert key_in(segments, key="peanut", question=question) == ["archive"]
    assert key_in(segments, key="ilse", question=question) == ["message 1 (user)"]
    assert key_in(segments, key="cat", question=question) == ["core_memory"]  # not the question's own "cat"
    assert key_in(segments, key="glassblow", question=question) == []
    # Recall sent at the head of the question (MODEX_RECALL_PLACEMENT=message) counts.
    recall = "<archive_recall>1.2 user: I am a glassblower</archive_recall>\n\n"
    with_recall = ("message 3 (user)", json.dumps({"role": "user", "content": recall + question}))
    assert key_in([*segments[:-1], with_recall], key="glassblow", question=question) == ["message 3 (user)"]
    # A message is read by its text and its tool calls' arguments, not its JSON's names or escapes.
    call = ("message 2 (assistant)", json.dumps({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "core_memory", "arguments": '{"text": "Lives in Åre"}'}}]}))
    assert key_in([*segments[:-1], call, asked], key="åre", question=question) == ["message 2 (assistant)"]
    assert key_in([*segments[:-1], call, asked], key="role", question=question) == []
