"""Every validation rule, driven by a corpus of bot.yml files with their exact expected problems.

Each file in ``declarations/invalid/`` states what validation must report, one line per problem:
``# expect: <code> <yaml path or -> <line or ->``. Files in ``declarations/valid/`` must load
without any problem. Cases that cannot be committed (a 10 MB file, bytes that are not UTF-8)
are generated here.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from agents.declarations import source as declaration_source
from agents.declarations import MAX_DECLARATION_BYTES, ProblemCode, read_declaration, validate_text
from tests.agents.conftest import CORPUS

EXPECT = re.compile(r"^# expect: (\S+) (.+) (\S+)$", re.MULTILINE)
# The one corpus file that cannot hold its own expectation: it is empty.
EXPECT_OVERRIDES = {"empty.yml": [("modex.E003", "-", "-")]}
INVALID = sorted((CORPUS / "invalid").glob("*.yml"))
VALID = sorted((CORPUS / "valid").glob("*.yml"))


def expected_problems(path: Path) -> list[tuple[str, str, str]]:
    if path.name in EXPECT_OVERRIDES:
        return sorted(EXPECT_OVERRIDES[path.name])
    found = [m.groups() for m in EXPECT.finditer(path.read_bytes().decode("utf-8", "replace"))]
    assert found, f"{path.name} states no expected problems"
    return sorted(found)


def actual_problems(path: Path) -> list[tuple[str, str, str]]:
    loaded = read_declaration(path)
    assert loaded.declaration is None
    return sorted((p.code.value, p.path or "-", str(p.line) if p.line else "-") for p in loaded.problems)


@pytest.mark.parametrize("path", INVALID, ids=[p.name for p in INVALID])
def test_invalid_corpus_reports_exactly_the_expected_problems(path):
    assert actual_problems(path) == expected_problems(path)


@pytest.mark.parametrize("path", VALID, ids=[p.name for p in VALID])
def test_valid_corpus_loads_cleanly(path):
    loaded = read_declaration(path)
    assert loaded.problems == ()
    assert loaded.declaration is not None and loaded.declaration.agents


def test_every_problem_category_is_exercised():
    """Together with the generated cases below, the corpus covers every code."""
    codes = {code for path in INVALID for code, _, _ in expected_problems(path)}
    generated = {ProblemCode.UNREADABLE.value, ProblemCode.TOO_LARGE.value}
    assert codes | generated == {code.value for code in ProblemCode}


def test_problems_carry_line_column_and_a_useful_message():
    loaded = read_declaration(CORPUS / "invalid" / "unknown_tools.yml")
    first = loaded.problems[0]
    assert (first.line, first.column) == (6, 19)
    assert first.message == "unknown tool 'archiv_search'. Did you mean 'archive_search'?"
    assert "Known tools: core_memory" in first.hint
    keys = read_declaration(CORPUS / "invalid" / "unknown_keys.yml").problems
    assert [p.message for p in keys][:2] == [
        "unknown key 'persistance' in the declaration. Did you mean 'persistence'?",
        "unknown key 'descripton' in agent 'default'. Did you mean 'description'?",
    ]
    assert "model: {context_window" in keys[3].hint


def test_yaml_11_booleans_are_rejected_with_a_hint():
    problems = read_declaration(CORPUS / "invalid" / "wrong_types.yml").problems
    by_path = {p.path: p for p in problems}
    assert "write true or false" in by_path["agents.default.memory.archive_enabled"].message
    assert by_path["agents.default.memory.compression_threshold"].hint == "Remove the quotes: numbers are written bare."
    assert "the boolean 'true'" in by_path["agents.default.memory.keep_tokens"].message


def test_python_tags_are_never_constructed(tmp_path, monkeypatch):
    marker = Path("/tmp/modex-pwned")
    marker.unlink(missing_ok=True)
    import os
    import subprocess

    def boom(*args, **kwargs):
        raise AssertionError("a YAML tag constructed an object")

    monkeypatch.setattr(os, "system", boom)
    monkeypatch.setattr(subprocess, "Popen", boom)
    loaded = read_declaration(CORPUS / "invalid" / "python_object.yml")
    assert {p.code for p in loaded.problems} == {ProblemCode.UNSAFE_TAG}
    assert not marker.exists()


def test_alias_bomb_is_rejected_without_expansion():
    # 9**6 (half a million) strings if expanded; rejection must be immediate.
    levels = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 7)]
    text = "\n".join(levels) + "\nagents:\n  default:\n    tools: *a6\n"
    started = time.perf_counter()
    declaration, problems = validate_text(text, source="bomb")
    assert time.perf_counter() - started < 1.0
    assert declaration is None
    assert sum(p.code is ProblemCode.ALIAS for p in problems) == 8  # 7 anchor lines + the use


def test_ten_megabyte_file_is_rejected_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "huge.yml"
    with open(path, "wb") as handle:
        handle.write(b"agents:\n  default:\n    description: |\n")
        line = b"      " + b"x" * 1017 + b"\n"
        for _ in range(10 * 1024):
            handle.write(line)
    assert path.stat().st_size > 10 * 1024 * 1024

    def never(*args, **kwargs):
        raise AssertionError("an oversized file was parsed")

    monkeypatch.setattr(declaration_source, "compose_text", never)
    loaded = read_declaration(path)
    assert [p.code for p in loaded.problems] == [ProblemCode.TOO_LARGE]
    assert f"at most {MAX_DECLARATION_BYTES:,} bytes" in loaded.problems[0].message
    assert f"{path.stat().st_size:,} bytes" in loaded.problems[0].message


def test_a_file_just_under_the_limit_is_parsed(tmp_path):
    head = b"agents:\n  default:\n    description: |\n"
    body = (b"      " + b"y" * 90 + b"\n") * ((MAX_DECLARATION_BYTES - len(head)) // 97)
    path = tmp_path / "big.yml"
    path.write_bytes(head + body)
    assert path.stat().st_size <= MAX_DECLARATION_BYTES
    assert read_declaration(path).problems == ()


def test_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / "latin1.yml"
    path.write_bytes("agents:\n  default:\n    description: café\n".encode("latin-1"))
    (problem,) = read_declaration(path).problems
    assert problem.code is ProblemCode.UNREADABLE and (problem.line, problem.column) == (3, 21)
    assert "not valid UTF-8" in problem.message and problem.hint == "Save the file as UTF-8."


def test_missing_file_and_directory(tmp_path):
    (missing,) = read_declaration(tmp_path / "nope.yml").problems
    assert missing.code is ProblemCode.UNREADABLE and "does not exist" in missing.message
    assert "MODEX_SCOPES_FILE" in missing.hint
    (directory,) = read_declaration(tmp_path).problems
    assert directory.code is ProblemCode.UNREADABLE and "is a directory" in directory.message


def test_bom_does_not_shift_lines(tmp_path):
    path = tmp_path / "bom.yml"
    path.write_bytes(b"\xef\xbb\xbfagents:\n  default:\n    tools: [nope]\n")
    (problem,) = read_declaration(path).problems
    assert (problem.code, problem.line, problem.column) == (ProblemCode.UNKNOWN_TOOL, 3, 13)
    assert read_declaration(CORPUS / "valid" / "bom.yml").source.has_bom


def test_crlf_line_endings_are_accepted():
    text = (CORPUS / "valid" / "rich.yml").read_text().replace("\n", "\r\n")
    declaration, problems = validate_text(text, source="crlf")
    assert problems == [] and declaration.find("fetcher") is not None
    _, problems = validate_text("agents:\r\n  a:\r\n    tools: [x]\r\n", source="crlf")
    assert [(p.code, p.line) for p in problems] == [(ProblemCode.UNKNOWN_TOOL, 3)]


def test_tabs_inside_block_text_are_fine():
    text = "agents:\n  a:\n    instructions: |\n      step one:\n      \tindented with a tab\n"
    declaration, problems = validate_text(text, source="t")
    assert problems == [] and "\tindented" in declaration.agents[0].instructions


def test_malformed_yaml_message_has_line_and_column():
    (problem,) = read_declaration(CORPUS / "invalid" / "malformed.yml").problems
    assert problem.code is ProblemCode.SYNTAX and (problem.line, problem.column) == (6, 11)
    assert problem.message.startswith("malformed YAML: ")


@pytest.mark.parametrize(
    ("text", "code", "line"),
    [
        ("agents: " + "[" * 200 + "]" * 200 + "\n", ProblemCode.SYNTAX, 1),
        ('agents:\n  a: {description: "x\x07"}\n', ProblemCode.SYNTAX, 2),
        ("agents:\n  a:\n    <<: {tools: [todo]}\n", ProblemCode.ALIAS, 3),
        ("agents:\n  a:\n    description: 2024-05-01\n", ProblemCode.WRONG_TYPE, 3),
        ("agents:\n  a: !custom {}\n", ProblemCode.UNSAFE_TAG, 2),
        ("agents:\n  1: {}\n", ProblemCode.WRONG_TYPE, 2),
        ("agents: {}\n", ProblemCode.INVALID_VALUE, 1),
        ("agents:\n  a:\n    model: {name: ''}\n", ProblemCode.INVALID_VALUE, 3),
    ],
    ids=["too-deep", "control-char", "merge-key", "timestamp", "local-tag", "int-key", "no-agents", "empty-name"],
)
def test_more_edge_cases(text, code, line):
    declaration, problems = validate_text(text, source="t")
    assert declaration is None
    assert [(p.code, p.line) for p in problems] == [(code, line)]
