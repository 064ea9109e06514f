"""Write-back of memory: blocks: byte-exact round trips, only edited lines change, safe writes."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat

import pytest

from agents.declarations import writeback as bot_yaml
from agents.declarations.writeback import (
    EDITOR_MARK,
    InvalidEdit,
    MemoryEdit,
    ScopeFileConflict,
    WriteBackError,
    apply_memory_edits,
    write_memory_edits,
)
from agents.declarations import InvalidDeclaration, ProblemCode, read_declaration, validate_text
from tests.agents.conftest import CORPUS

RICH = (CORPUS / "valid" / "rich.yml").read_text()


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(path, *edits: MemoryEdit):
    return write_memory_edits(path=path, expected_sha256=sha(path), edits=list(edits))


def edit_text(text: str, *edits: MemoryEdit) -> str:
    declaration, problems = validate_text(text, source="t")
    assert problems == []
    return apply_memory_edits(text, declaration, list(edits))


def changed_line_numbers(old: str, new: str) -> set[int]:
    """1-based numbers of old lines that differ (same line count expected)."""
    a, b = old.splitlines(), new.splitlines()
    assert len(a) == len(b)
    return {i + 1 for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y}


def main_agents(text: str) -> list[str]:
    declaration, _ = validate_text(text, source="t")
    return [a.name for a in declaration.agents]


@pytest.mark.parametrize("agent", main_agents(RICH))
def test_each_switch_on_and_off_restores_the_original_bytes(rich_file, agent):
    original = rich_file.read_bytes()
    for key in ("archive_enabled", "core_enabled"):
        on = [MemoryEdit(agent, "archive_enabled", True)] + (
            [MemoryEdit(agent, key, True)] if key != "archive_enabled" else []
        )
        write(rich_file, *on)
        assert read_declaration(rich_file).declaration.find(agent).memory_config.archive_enabled
        off = [MemoryEdit(agent, k, False) for k in ("core_enabled", "archive_enabled")]
        write(rich_file, *off)
        assert rich_file.read_bytes() == original


def test_all_switches_on_then_off_restores_the_original_bytes(rich_file):
    original = rich_file.read_bytes()
    agents = main_agents(RICH)
    write(rich_file, *[MemoryEdit(a, k, True) for a in agents for k in ("archive_enabled", "core_enabled")])
    declaration = read_declaration(rich_file).declaration
    assert all(a.memory_config.archive_enabled and a.memory_config.core_enabled for a in declaration.agents)
    write(rich_file, *[MemoryEdit(a, k, False) for a in agents for k in ("core_enabled", "archive_enabled")])
    assert rich_file.read_bytes() == original


def test_in_place_edit_changes_only_that_line_and_keeps_its_comment():
    new = edit_text(RICH, MemoryEdit("default", "archive_enabled", True))
    line = RICH.splitlines().index("      archive_enabled: false     # archive of evicted history") + 1
    assert changed_line_numbers(RICH, new) == {line}
    assert new.splitlines()[line - 1] == "      archive_enabled: true     # archive of evicted history"
    both = edit_text(new, MemoryEdit("default", "core_enabled", True))
    assert changed_line_numbers(new, both) == {line + 1}
    assert both.splitlines()[line] == "      core_enabled: true        # needs the archive"


def test_inserted_lines_use_the_files_indentation_and_are_marked():
    new = edit_text(RICH, MemoryEdit("reviewer", "archive_enabled", True))
    old_lines, new_lines = RICH.splitlines(), new.splitlines()
    at = old_lines.index("    tool_supplements: [experience]", old_lines.index("  reviewer:")) + 1
    assert new_lines[:at] == old_lines[:at] and new_lines[at + 2 :] == old_lines[at:]
    assert new_lines[at : at + 2] == [f"    memory:  {EDITOR_MARK}", f"      archive_enabled: true  {EDITOR_MARK}"]


def test_four_space_files_get_four_space_insertions():
    text = "agents:\n    solo:\n        tools: [todo]\n"
    new = edit_text(text, MemoryEdit("solo", "archive_enabled", True))
    assert new == text + f"        memory:  {EDITOR_MARK}\n            archive_enabled: true  {EDITOR_MARK}\n"
    assert validate_text(new, source="t")[0].find("solo").memory_config.archive_enabled


def test_memory_block_goes_before_subagents_and_after_block_text():
    text = "agents:\n  a:\n    instructions: |\n      Be brief.\n\n    subagents:\n      b:\n"
    new = edit_text(text, MemoryEdit("a", "archive_enabled", True))
    assert new.splitlines()[4:6] == [f"    memory:  {EDITOR_MARK}", f"      archive_enabled: true  {EDITOR_MARK}"]
    declaration, _ = validate_text(new, source="t")
    assert declaration.find("a").instructions == "Be brief.\n"
    assert edit_text(new, MemoryEdit("a", "archive_enabled", False)) == text


def test_subagent_threshold_round_trip(rich_file):
    original = rich_file.read_bytes()
    result = write(rich_file, MemoryEdit("researcher", "compression_threshold", 5000))
    assert [(d.kind, d.text.strip()) for d in result.diff if d.kind in ("add", "del")] == [
        ("del", "compression_threshold: 6000   # the only override a subagent accepts"),
        ("add", "compression_threshold: 5000   # the only override a subagent accepts"),
    ]
    write(rich_file, MemoryEdit("researcher", "compression_threshold", 6000))
    assert rich_file.read_bytes() == original
    write(rich_file, MemoryEdit("fetcher", "compression_threshold", 3000))  # no memory block yet
    assert read_declaration(rich_file).declaration.find("fetcher").memory_config.threshold == 3000
    write(rich_file, MemoryEdit("fetcher", "compression_threshold", None))
    assert rich_file.read_bytes() == original


def test_clearing_a_threshold_removes_the_key():
    new = edit_text(RICH, MemoryEdit("default", "compression_threshold", None))
    assert "compression_threshold: 12000" not in new
    assert validate_text(new, source="t")[0].find("default").memory_config.compression_threshold is None


def test_user_written_false_stays_explicit():
    text = "agents:\n  a:\n    memory:\n      archive_enabled: false\n"
    on = edit_text(text, MemoryEdit("a", "archive_enabled", True))
    assert on == text.replace("false", "true")
    assert edit_text(on, MemoryEdit("a", "archive_enabled", False)) == text


def test_flow_style_mappings_round_trip():
    text = "agents:\n  p: {tools: [todo], memory: {archive_enabled: false}}  # planner\n  q: {tools: [todo]}\n"
    new = edit_text(
        text,
        MemoryEdit("p", "archive_enabled", True),
        MemoryEdit("p", "core_enabled", True),
        MemoryEdit("q", "compression_threshold", 900),
    )
    # Flow entries cannot carry their own comment: the line's trailing mark names them.
    assert new == (
        "agents:\n"
        f"  p: {{tools: [todo], memory: {{archive_enabled: true, core_enabled: true}}}}  # planner  {EDITOR_MARK}: "
        "core_enabled\n"
        f"  q: {{tools: [todo], memory: {{compression_threshold: 900}}}}  {EDITOR_MARK}: "
        "memory, compression_threshold\n"
    )
    declaration, problems = validate_text(new, source="t")
    assert problems == [] and declaration.find("p").memory_config.core_enabled
    back = edit_text(
        new,
        MemoryEdit("p", "core_enabled", False),
        MemoryEdit("p", "archive_enabled", False),
        MemoryEdit("q", "compression_threshold", None),
    )
    assert back == text


@pytest.mark.parametrize(
    "text",
    ["agents:\n  solo:\n", "agents:\n  solo:", "agents:\n  solo:\n    memory:   # nothing yet\n    tools: [todo]\n"],
    ids=["null-agent", "no-final-newline", "null-memory"],
)
def test_empty_nodes_round_trip(text):
    on = edit_text(text, MemoryEdit("solo", "archive_enabled", True), MemoryEdit("solo", "core_enabled", True))
    config = validate_text(on, source="t")[0].find("solo").memory_config
    assert config.archive_enabled and config.core_enabled
    off = edit_text(on, MemoryEdit("solo", "core_enabled", False), MemoryEdit("solo", "archive_enabled", False))
    assert off == text


def test_null_token_memory_is_filled():
    text = "agents:\n  solo:\n    memory: ~\n"
    on = edit_text(text, MemoryEdit("solo", "archive_enabled", True))
    assert on == f"agents:\n  solo:\n    memory:\n      archive_enabled: true  {EDITOR_MARK}\n"


def test_crlf_and_bom_are_preserved(tmp_path):
    path = tmp_path / "bot.yml"
    original = b"\xef\xbb\xbf" + RICH.replace("\n", "\r\n").encode()
    path.write_bytes(original)
    write(path, MemoryEdit("reviewer", "archive_enabled", True), MemoryEdit("default", "core_enabled", False))
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert b"\n" not in data.replace(b"\r\n", b"")
    write(path, MemoryEdit("reviewer", "archive_enabled", False))
    assert path.read_bytes() == original


def test_refuses_a_file_changed_since_it_was_loaded(bot_file):
    loaded_sha = sha(bot_file)
    bot_file.write_text(bot_file.read_text().replace("12000", "11000"))
    changed = bot_file.read_bytes()
    with pytest.raises(ScopeFileConflict, match="changed on disk"):
        write_memory_edits(
            path=bot_file, expected_sha256=loaded_sha, edits=[MemoryEdit("default", "archive_enabled", True)]
        )
    assert bot_file.read_bytes() == changed


def test_second_of_two_concurrent_editors_gets_a_conflict(bot_file):
    both_loaded = sha(bot_file)
    write_memory_edits(
        path=bot_file, expected_sha256=both_loaded, edits=[MemoryEdit("reviewer", "archive_enabled", True)]
    )
    after_first = bot_file.read_bytes()
    with pytest.raises(ScopeFileConflict):
        write_memory_edits(
            path=bot_file, expected_sha256=both_loaded, edits=[MemoryEdit("default", "compression_threshold", 11000)]
        )
    assert bot_file.read_bytes() == after_first


def test_refuses_to_write_an_invalid_result(bot_file):
    original = bot_file.read_bytes()
    with pytest.raises(InvalidEdit) as info:
        write(bot_file, MemoryEdit("reviewer", "core_enabled", True))
    assert [(p.code, p.path) for p in info.value.problems] == [
        (ProblemCode.CORE_WITHOUT_ARCHIVE, "agents.reviewer.memory.core_enabled")
    ]
    with pytest.raises(InvalidEdit) as info:
        write(bot_file, MemoryEdit("researcher", "compression_threshold", 50000))
    assert info.value.problems[0].code is ProblemCode.MEMORY_CONFIG
    assert bot_file.read_bytes() == original


def test_refuses_edits_that_do_not_fit_the_node(bot_file):
    with pytest.raises(WriteBackError, match="no agent named 'ghost'"):
        write(bot_file, MemoryEdit("ghost", "archive_enabled", True))
    with pytest.raises(WriteBackError, match="cannot be set on a subagent"):
        write(bot_file, MemoryEdit("researcher", "archive_enabled", True))


def test_refuses_to_edit_an_invalid_file(bot_file):
    bot_file.write_text("agents:\n  default:\n    tools: [nope]\n")
    with pytest.raises(InvalidDeclaration):
        write(bot_file, MemoryEdit("default", "archive_enabled", True))


def test_unchanged_edit_does_not_write(bot_file):
    before = os.stat(bot_file).st_mtime_ns
    result = write(bot_file, MemoryEdit("default", "archive_enabled", True))  # as shipped
    assert not result.changed and result.diff == ()
    assert os.stat(bot_file).st_mtime_ns == before


def test_keeps_file_mode_and_leaves_no_temp_files(bot_file):
    os.chmod(bot_file, 0o640)
    result = write(bot_file, MemoryEdit("reviewer", "archive_enabled", True))
    assert stat.S_IMODE(os.stat(bot_file).st_mode) == 0o640
    assert result.new_sha256 == sha(bot_file) != result.old_sha256
    assert sorted(p.name for p in bot_file.parent.iterdir()) == ["bot.yml"]


def test_a_failed_replace_leaves_the_file_untouched(bot_file, monkeypatch):
    original = bot_file.read_bytes()

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bot_yaml.os, "replace", fail)
    with pytest.raises(OSError):
        write(bot_file, MemoryEdit("reviewer", "archive_enabled", True))
    assert bot_file.read_bytes() == original
    assert sorted(p.name for p in bot_file.parent.iterdir()) == ["bot.yml"]


def test_writes_through_a_symlink(tmp_path, bot_file):
    link = tmp_path / "link.yml"
    link.symlink_to(bot_file)
    write(link, MemoryEdit("default", "compression_threshold", 11000))
    assert link.is_symlink()
    assert "compression_threshold: 11000" in bot_file.read_text()


def test_the_shipped_file_round_trips(tmp_path):
    path = tmp_path / "bot.yml"
    shutil.copyfile(CORPUS.parents[2] / "config" / "scopes" / "bot.yml", path)
    original = path.read_bytes()
    # The shipped default has both layers on, the reviewer both off: flip each, then back.
    write(path, MemoryEdit("default", "core_enabled", False), MemoryEdit("default", "archive_enabled", False))
    write(path, MemoryEdit("reviewer", "archive_enabled", True), MemoryEdit("reviewer", "core_enabled", True))
    write(path, MemoryEdit("default", "archive_enabled", True), MemoryEdit("default", "core_enabled", True))
    write(path, MemoryEdit("reviewer", "core_enabled", False), MemoryEdit("reviewer", "archive_enabled", False))
    assert path.read_bytes() == original
