"""Boot validation of memory budgets against the window: each problem with its YAML path."""

from __future__ import annotations

from agents.declarations import ProblemCode, validate_text
from tests.agents.test_checks import manage

TIGHT = """\
model:
  context_window: 2048
agents:
  small:
    memory:
      archive_enabled: false
      pruned_budget_tokens: 1200
  tiny:
    memory:
      pruned_budget_tokens: 10
  defaults: {}
"""


def test_budgets_that_do_not_fit_the_window_are_problems_at_their_key():
    declaration, problems = validate_text(TIGHT, source="bot.yml")
    assert declaration is None
    by_path = {p.path: p for p in problems}
    small = by_path["agents.small.memory.pruned_budget_tokens"]
    assert small.code is ProblemCode.MEMORY_CONFIG and small.line == 7
    assert "context window (2048 tokens)" in small.message and "pruned_budget_tokens" in (small.hint or "")
    tiny = [p for p in problems if p.path == "agents.tiny.memory.pruned_budget_tokens"]
    assert any("below 64 tokens" in p.message for p in tiny) and tiny[0].line == 10
    # An agent with only defaults that do not fit its window is pointed at itself.
    assert "agents.defaults" in by_path and by_path["agents.defaults"].line == 11


def test_manage_check_lists_the_budget_problem(tmp_path):
    scopes = tmp_path / "bot.yml"
    scopes.write_text(TIGHT)
    result = manage("check", scopes_file=scopes, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "(modex.E019) agents.small.memory.pruned_budget_tokens (line 7): the context window (2048 tokens)" in (
        result.stderr
    ), result.stderr


def test_a_threshold_too_small_for_a_cleanup_says_to_raise_it():
    declaration, problems = validate_text(
        "agents:\n  default:\n    memory:\n      compression_threshold: 10\n", source="bot.yml"
    )
    assert declaration is None
    [problem] = [p for p in problems if p.path == "agents.default.memory.compression_threshold"]
    assert problem.code is ProblemCode.MEMORY_CONFIG and problem.line == 4
    assert "cannot bring the session under the threshold (10)" in problem.message
    assert (problem.hint or "").startswith("Raise compression_threshold above")


WINDOW_BOT = """\
model:
  context_window: 16384
agents:
  default:
    memory:
      compression_threshold: {threshold}
"""


def _threshold_problems(threshold: int):
    declaration, problems = validate_text(WINDOW_BOT.format(threshold=threshold), source="bot.yml")
    return declaration, [p for p in problems if p.path == "agents.default.memory.compression_threshold"]


def test_a_threshold_equal_to_the_window_is_a_boot_problem_naming_the_usable_window():
    """The session would outgrow what is sent (the window less the reply's room) before a cleanup."""
    declaration, [problem] = _threshold_problems(16384)
    assert declaration is None
    assert problem.code is ProblemCode.MEMORY_CONFIG and problem.line == 6
    assert "compression_threshold (16384) is not below the usable window (15360 tokens" in problem.message
    assert "1024 kept for the reply" in problem.message
    assert (problem.hint or "").startswith("Lower compression_threshold below 15360")


def test_the_threshold_bound_is_the_usable_window_exactly():
    assert _threshold_problems(15360)[1], "equal to the usable window: refused"
    declaration, problems = _threshold_problems(15359)
    assert declaration is not None and problems == []


def test_keep_tokens_at_or_above_the_threshold_is_a_boot_problem_at_keep_tokens():
    text = "agents:\n  default:\n    memory:\n      compression_threshold: 5000\n      keep_tokens: 5000\n"
    declaration, problems = validate_text(text, source="bot.yml")
    assert declaration is None
    [problem] = [p for p in problems if p.path == "agents.default.memory.keep_tokens"]
    assert problem.code is ProblemCode.MEMORY_CONFIG and problem.line == 5
    assert "keep_tokens (5000) must be below the threshold (5000)" in problem.message


def test_manage_check_refuses_a_threshold_equal_to_the_window(tmp_path):
    scopes = tmp_path / "bot.yml"
    scopes.write_text(WINDOW_BOT.format(threshold=16384))
    result = manage("check", scopes_file=scopes, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "agents.default.memory.compression_threshold (line 6): compression_threshold (16384) is not below" in (
        result.stderr
    ), result.stderr
