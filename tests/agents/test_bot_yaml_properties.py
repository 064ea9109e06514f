"""Properties of write-back: for any valid declaration and any valid edit, writing then loading
gives the intended declaration, and undoing the edit restores the original bytes (unless the
edit deleted a line the user wrote)."""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agents.declarations.writeback import MemoryEdit, apply_memory_edits, write_memory_edits
from agents.declarations import read_declaration, validate_text

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6).map(lambda s: "a" + s)
COMMENT = st.one_of(st.just(""), st.sampled_from(["  # note", "   # why: because", " # x"]))


@st.composite
def declarations(draw) -> str:
    """A valid bot.yml with random shape, styles and comments."""
    step = draw(st.sampled_from([2, 4]))
    window = draw(st.integers(8192, 65536))  # below that, the default budgets with the archive on do not fit
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    n_main = draw(st.integers(1, len(names)))
    children: dict[str, list[str]] = {name: [] for name in names}
    for i in range(n_main, len(names)):
        children[draw(st.sampled_from(names[:i]))].append(names[i])
    out = [draw(st.sampled_from(["# generated declaration", "", "# a\n#  b"]))]
    out += ["model:", f"{' ' * step}context_window: {window}{draw(COMMENT)}", "agents:"]

    def node(name: str, depth: int, main: bool) -> None:
        pad = " " * (step * (depth + 1))
        inner = pad + " " * step
        body: list[str] = []
        if draw(st.booleans()):
            body.append(f"{inner}description: node {name}{draw(COMMENT)}")
        if draw(st.booleans()):
            body.append(f"{inner}tools: [pruned_lookup, todo]{draw(COMMENT)}")
        memory: list[tuple[str, str]] = []
        if main and draw(st.booleans()):
            archive = draw(st.booleans())
            memory.append(("archive_enabled", "true" if archive else "false"))
            if draw(st.booleans()):
                memory.append(("core_enabled", "true" if archive and draw(st.booleans()) else "false"))
        if draw(st.booleans()):
            memory.append(("compression_threshold", str(draw(st.integers(1000, int(window * 0.75))))))
        if main and draw(st.booleans()):
            memory.append(("keep_tokens", str(draw(st.integers(0, 200)))))
        memory = draw(st.permutations(memory))
        if not children[name] and draw(st.integers(0, 3)) == 0:  # a whole flow-style agent
            parts = ["tools: [todo]"] if draw(st.booleans()) else []
            if memory:
                parts.append(f"memory: {{{', '.join(f'{k}: {v}' for k, v in memory)}}}")
            out.append(f"{pad}{name}: {{{', '.join(parts)}}}{draw(COMMENT)}")
            return
        if memory and draw(st.booleans()):
            body.append(f"{inner}memory: {{{', '.join(f'{k}: {v}' for k, v in memory)}}}{draw(COMMENT)}")
        elif memory or draw(st.booleans()):
            body.append(f"{inner}memory:{draw(COMMENT)}")
            body += [f"{inner}{' ' * step}{k}: {v}{draw(COMMENT)}" for k, v in memory]
        out.append(f"{pad}{name}:{draw(COMMENT)}")
        out.extend(body)
        if children[name]:
            out.append(f"{inner}subagents:")
            for child in children[name]:
                node(child, depth + 2, False)
        if draw(st.booleans()):
            out.append("")

    for name in names[:n_main]:
        node(name, 0, True)
    ending = draw(st.sampled_from(["\n", "", "\n# the end\n"]))
    return "\n".join(out) + ending


def edits_for(data, declaration) -> list[MemoryEdit]:
    """Random edits whose combined result is a valid declaration."""
    nodes = list(declaration.walk())
    chosen = data.draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=4, unique_by=lambda n: n.name))
    edits: list[MemoryEdit] = []
    for node in chosen:
        window = node.memory_config.context_window
        if node.is_main:
            archive = data.draw(st.booleans())
            core = archive and data.draw(st.booleans())
            edits += [MemoryEdit(node.name, "archive_enabled", archive), MemoryEdit(node.name, "core_enabled", core)]
        if data.draw(st.booleans()):
            threshold = data.draw(st.one_of(st.none(), st.integers(256, window)))
            edits.append(MemoryEdit(node.name, "compression_threshold", threshold))
    edits = data.draw(st.permutations(edits))
    # Valid includes budgets that fit the window (MemoryConfig.budget_problems, checked at boot).
    assume(not any(config.budget_problems() for config in intended(declaration, edits).values()))
    return edits


def intended(declaration, edits):
    changes: dict[str, dict] = {}
    for edit in edits:
        changes.setdefault(edit.agent, {})[edit.key] = edit.value
    return {n.name: dataclasses.replace(n.memory_config, **changes.get(n.name, {})) for n in declaration.walk()}


def undo(declaration, edits) -> list[MemoryEdit]:
    undone = []
    for edit in edits:
        node = declaration.find(edit.agent)
        original = node.overrides.get(edit.key)
        if original is None and edit.key != "compression_threshold":
            original = getattr(node.memory_config, edit.key)  # absent toggle: the preset's value
        undone.append(MemoryEdit(edit.agent, edit.key, original))
    return undone


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=declarations(), data=st.data())
def test_edit_then_load_gives_the_intended_declaration_and_undo_restores_bytes(text, data):
    declaration, problems = validate_text(text, source="generated")
    assert problems == [], text
    edits = edits_for(data, declaration)
    expected = intended(declaration, edits)

    edited = apply_memory_edits(text, declaration, edits)
    reloaded, problems = validate_text(edited, source="edited")
    assert problems == [], edited
    assert {n.name: n.memory_config for n in reloaded.walk()} == expected
    for before, after in zip(declaration.walk(), reloaded.walk(), strict=True):
        assert (before.name, before.path, before.tools, before.description, before.model) == (
            after.name, after.path, after.tools, after.description, after.model,
        )  # fmt: skip

    undone = apply_memory_edits(edited, reloaded, undo(declaration, edits))
    assert {n.name: n.memory_config for n in validate_text(undone, source="undone")[0].walk()} == {
        n.name: n.memory_config for n in declaration.walk()
    }
    if not removes_user_lines(declaration, edits):
        assert undone == text


def removes_user_lines(declaration, edits) -> bool:
    """Clearing a key the user wrote deletes their line (and its comment): undo re-inserts it
    as an editor line, so bytes come back only when no such reset happened."""
    return any(e.value is None and e.key in declaration.find(e.agent).overrides for e in edits)


@settings(max_examples=40, deadline=None)
@given(text=declarations(), data=st.data(), bom=st.booleans(), crlf=st.booleans())
def test_written_file_reads_back_as_intended(text, data, bom, crlf):
    if crlf:
        text = text.replace("\n", "\r\n")
    raw = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bot.yml"
        path.write_bytes(raw)
        declaration = read_declaration(path).declaration
        edits = edits_for(data, declaration)
        write_memory_edits(path=path, expected_sha256=hashlib.sha256(raw).hexdigest(), edits=edits)
        loaded = read_declaration(path)
        assert loaded.problems == ()
        assert {n.name: n.memory_config for n in loaded.declaration.walk()} == intended(declaration, edits)
        assert loaded.source.has_bom == bom
        write_memory_edits(path=path, expected_sha256=loaded.sha256, edits=undo(declaration, edits))
        if not removes_user_lines(declaration, edits):
            assert path.read_bytes() == raw
