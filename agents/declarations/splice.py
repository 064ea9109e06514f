"""Text splices on a YAML document, guided by its composed nodes' positions.

The low-level half of ``agents.declarations.writeback``: replace a scalar in place, insert lines with the
document's own indentation and line endings, remove a mapping entry's lines. Nothing here
re-serialises YAML, so every byte outside the spliced span stays as it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agents.declarations.problems import DeclarationError
from agents.declarations.source import NULL_TAG

EDITOR_MARK = "# added by the scope editor"
_FLOW_MARK = re.compile(re.escape(EDITOR_MARK) + r": ([A-Za-z0-9_, ]+?)\s*$")


class WriteBackError(DeclarationError):
    """An edit could not be applied to the file's text (or did not produce the intended result)."""


def is_mapping(node: Node) -> bool:
    return isinstance(node, MappingNode)


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL_TAG


def cut_lines(text: str, start: int, end: int) -> str:
    """Remove the whole lines ``text[start:end]``. Lines that run to the end of a text without
    a final newline take the newline before them along, so the text keeps its ending."""
    end = min(end, len(text))
    if end == len(text) and not text.endswith("\n") and start > 0:
        start -= 2 if text[max(start - 2, 0) : start] == "\r\n" else 1
    return text[:start] + text[end:]


class Splicer:
    """Position arithmetic over one text and its composed tree."""

    def __init__(self, text: str, root: Node) -> None:
        self.text = text
        self.root = root
        self.newline = "\r\n" if "\r\n" in text else "\n"
        self.step = self._indent_step()

    # -- finding things --

    def locate(self, path: Sequence[str]) -> tuple[ScalarNode, Node]:
        node: Node = self.root
        key: ScalarNode | None = None
        for part in path:
            found = self.entry(node, part)
            if found is None:
                raise WriteBackError(f"{'.'.join(path)} was not found in the file.")
            key, node = found
        return key, node

    @staticmethod
    def entry(mapping: Node, name: str) -> tuple[ScalarNode, Node] | None:
        if not isinstance(mapping, MappingNode):
            return None
        return next(((k, v) for k, v in mapping.value if isinstance(k, ScalarNode) and k.value == name), None)

    def _indent_step(self) -> int:
        for _node, parent_col, child_col in self._block_levels(self.root, None):
            if child_col > parent_col:
                return child_col - parent_col
        return 2

    def _block_levels(self, node: Node, parent_col: int | None):
        if isinstance(node, MappingNode) and not node.flow_style and node.value:
            col = node.value[0][0].start_mark.column
            if parent_col is not None:
                yield node, parent_col, col
            for _key, value in node.value:
                yield from self._block_levels(value, col)

    def line_start(self, index: int) -> int:
        return self.text.rfind("\n", 0, index) + 1

    def line_end(self, index: int) -> int:
        """Index just past the newline of the line holding ``index`` (or the end of text)."""
        end = self.text.find("\n", index)
        return len(self.text) if end < 0 else end + 1

    def content_end(self, node: Node, key: ScalarNode | None = None) -> int:
        """Index just past the last character that belongs to ``node``'s content."""
        if isinstance(node, MappingNode) and not node.flow_style and node.value:
            return self.content_end(node.value[-1][1], node.value[-1][0])
        if isinstance(node, SequenceNode) and not node.flow_style and node.value:
            return self.content_end(node.value[-1])
        if is_null(node) and node.start_mark.index == node.end_mark.index and key is not None:
            return key.end_mark.index
        end = node.end_mark.index
        if isinstance(node, ScalarNode) and node.style in ("|", ">"):
            while end > node.start_mark.index and self.text[end - 1] in " \t\r\n":
                end -= 1
        return end

    def is_marked(self, key: ScalarNode) -> bool:
        """Was this key inserted by the editor? Block lines end with ``EDITOR_MARK``; flow
        entries are named in a ``EDITOR_MARK: name, ...`` comment at the end of their line."""
        line = self._line(key.start_mark.index).rstrip()
        if line.endswith(EDITOR_MARK):
            return True
        match = _FLOW_MARK.search(line)
        return bool(match) and key.value in _names(match.group(1))

    def _line(self, index: int) -> str:
        start = self.line_start(index)
        end = self.text.find("\n", start)
        return self.text[start : len(self.text) if end < 0 else end]

    # -- changing things --

    def splice(self, start: int, end: int, new: str) -> str:
        return self.text[:start] + new + self.text[end:]

    def replace(self, node: Node, rendered: str) -> str:
        """Rewrite a scalar in place; the rest of the line (spacing, comment) stays as it is.

        A comment after the value may move by the difference in length (``false`` -> ``true``
        moves it one column left). Re-aligning it would look tidier but cannot be undone
        exactly in every case, and toggling back must restore the original bytes."""
        return self.splice(node.start_mark.index, node.end_mark.index, rendered)

    def _lines(self, indent: int, lines: Sequence[str]) -> str:
        return "".join(" " * indent + line + f"  {EDITOR_MARK}" + self.newline for line in lines)

    def _insert_lines_after(self, index: int, block: str) -> str:
        at = self.line_end(index)
        if at == len(self.text) and self.text and not self.text.endswith("\n"):
            # The last line has no newline: keep it that way (cut_lines undoes this exactly).
            return self.text + self.newline + block[: -len(self.newline)]
        return self.splice(at, at, block)

    def insert_into(self, mapping: MappingNode, line: str, name: str) -> str:
        """Add ``line`` (``key: value``) as the last entry of a memory mapping."""
        if mapping.flow_style:
            return self._insert_flow(mapping, line, [name])
        indent = mapping.value[0][0].start_mark.column
        last_key, last_value = mapping.value[-1]
        return self._insert_lines_after(self.content_end(last_value, last_key), self._lines(indent, [line]))

    def _insert_flow(self, mapping: MappingNode, entry: str, names: Sequence[str]) -> str:
        close = mapping.end_mark.index - 1
        if self.text[close] != "}":
            raise WriteBackError("cannot find the closing brace of a flow mapping.")
        at, new = (close, entry) if not mapping.value else (mapping.value[-1][1].end_mark.index, f", {entry}")
        return _with_flow_marks(self.splice(at, at, new), self.line_start(at), add=names)

    def fill_null(self, key: ScalarNode, value: Node, lines: Sequence[str]) -> str:
        """Turn ``key:`` (no value, ``~`` or ``null``) into a block mapping holding ``lines``."""
        block = self._lines(key.start_mark.column + self.step, lines)
        if value.start_mark.index != value.end_mark.index:  # an explicit ~ / null token
            start = value.start_mark.index
            while start > key.end_mark.index and self.text[start - 1] == " ":
                start -= 1
            spliced = Splicer(self.splice(start, value.end_mark.index, ""), self.root)
            return spliced._insert_lines_after(key.start_mark.index, block)
        return self._insert_lines_after(key.start_mark.index, block)

    def insert_memory_block(self, agent_key: ScalarNode, agent: Node, line: str, name: str) -> str:
        """Add a ``memory:`` block holding ``line`` to an agent that has none."""
        if is_null(agent):
            return self.fill_null(agent_key, agent, ["memory:", " " * self.step + line])
        if not isinstance(agent, MappingNode):
            raise WriteBackError(f"agent {agent_key.value!r} is not a mapping.")
        if agent.flow_style:
            return self._insert_flow(agent, f"memory: {{{line}}}", ["memory", name])
        indent = agent.value[0][0].start_mark.column
        keys = [k.value for k, _ in agent.value]
        position = keys.index("subagents") if "subagents" in keys else len(keys)
        if position == 0:
            anchor = agent_key.start_mark.index
        else:
            prev_key, prev_value = agent.value[position - 1]
            anchor = self.content_end(prev_value, prev_key)
        return self._insert_lines_after(
            anchor, self._lines(indent, ["memory:"]) + self._lines(indent + self.step, [line])
        )

    def remove_entry(self, mapping: MappingNode, key: ScalarNode) -> str:
        """Remove one entry: its whole lines in a block mapping, its ``key: value`` (and the
        separating comma) in a flow mapping, where its flow mark is dropped too."""
        index = next(i for i, (k, _v) in enumerate(mapping.value) if k is key)
        value = mapping.value[index][1]
        if not mapping.flow_style:
            return cut_lines(
                self.text, self.line_start(key.start_mark.index), self.line_end(self.content_end(value, key))
            )
        if index > 0:
            start, end = mapping.value[index - 1][1].end_mark.index, value.end_mark.index
        elif len(mapping.value) > 1:
            start, end = key.start_mark.index, mapping.value[1][0].start_mark.index
        else:
            start, end = key.start_mark.index, value.end_mark.index
        return _with_flow_marks(self.splice(start, end, ""), self.line_start(start), remove=[key.value])


def _names(group: str) -> list[str]:
    return [name.strip() for name in group.split(",") if name.strip()]


def _with_flow_marks(text: str, line_start: int, *, add: Sequence[str] = (), remove: Sequence[str] = ()) -> str:
    """Update the ``EDITOR_MARK: names`` comment at the end of the line starting at
    ``line_start``. Adding to a line and removing again restores it exactly."""
    end = text.find("\n", line_start)
    end = len(text) if end < 0 else end
    line = text[line_start:end]
    cr = "\r" if line.endswith("\r") else ""
    line = line[: len(line) - len(cr)]
    match = _FLOW_MARK.search(line)
    names = _names(match.group(1)) if match else []
    base = line[: match.start()] if match else line
    if match and base.endswith("  "):
        base = base[:-2]
    names = [n for n in names if n not in remove] + [n for n in add if n not in names]
    marked = base + (f"  {EDITOR_MARK}: {', '.join(names)}" if names else "")
    return text[:line_start] + marked + cr + text[end:]
