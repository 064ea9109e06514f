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
