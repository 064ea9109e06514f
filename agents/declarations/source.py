"""Safe reading of a declaration file: bytes -> text -> a composed YAML node tree.

Nothing here constructs Python objects from YAML. The file is *composed* (PyYAML's node
graph, which keeps every node's position) with a guarded ``SafeLoader`` subclass, so that:

* files over ``MAX_DECLARATION_BYTES`` are refused before any parsing;
* a UTF-8 BOM is accepted (stripped here; ``SourceText.has_bom`` lets write-back restore it);
* tab indentation gets its own message with the line, instead of PyYAML's cryptic one;
* anchors and aliases are rejected outright, so an alias bomb ("billion laughs") is never
  expanded: each alias is replaced by an inert placeholder node;
* tags that would construct objects (``!!python/object:...``, local ``!foo`` tags) are
  rejected and replaced by placeholders, never constructed;
* duplicate keys, which PyYAML silently collapses, are reported;
* nesting is bounded, so a pathological file cannot exhaust the recursion limit.

The composer is PyYAML's pure-Python one (``CSafeLoader`` cannot be hooked per node and keeps
no usable marks for this); declarations are small, so speed does not matter here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agents.declarations.problems import DeclarationProblem, ProblemCode

MAX_DECLARATION_BYTES = 256 * 1024
MAX_NESTING = 40
BOM = "\ufeff"

YAML_TAG = "tag:yaml.org,2002:"
STR_TAG = YAML_TAG + "str"
INT_TAG = YAML_TAG + "int"
BOOL_TAG = YAML_TAG + "bool"
NULL_TAG = YAML_TAG + "null"
FLOAT_TAG = YAML_TAG + "float"

PathPart = str | int
Path = tuple[PathPart, ...]


def format_path(path: Path) -> str:
    """``("agents", "default", "tools", 2)`` -> ``agents.default.tools[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True, slots=True)
class SourceText:
    """Decoded declaration text. ``text`` never starts with a BOM; ``has_bom`` says if the
    file did. ``newline`` is the file's line ending (``"\\n"`` or ``"\\r\\n"``)."""

    text: str
    has_bom: bool
    newline: str

    def encode(self, text: str | None = None) -> bytes:
        """Bytes for ``text`` (default: this text), restoring the BOM if the file had one."""
        body = self.text if text is None else text
        return ((BOM if self.has_bom else "") + body).encode("utf-8")


class RejectedNode(ScalarNode):
    """Stands in for an alias or a node with a forbidden tag, already reported.

    Schema validation skips it silently, so one bad construct gives one problem, not a
    cascade of type errors."""

    def __init__(self, start_mark, end_mark) -> None:
        super().__init__(NULL_TAG, "", start_mark, end_mark)


def decode_declaration(data: bytes) -> tuple[SourceText | None, list[DeclarationProblem]]:
    """Check size and encoding; strip a BOM. Returns the text, or ``None`` with problems."""
    if len(data) > MAX_DECLARATION_BYTES:
        return None, [
            DeclarationProblem(
                ProblemCode.TOO_LARGE,
                "",
                None,
                f"the file is {len(data):,} bytes; a declaration may be at most {MAX_DECLARATION_BYTES:,} bytes "
                f"({MAX_DECLARATION_BYTES // 1024} KiB). It was not parsed.",
                hint="A declaration lists agents and switches; move long instructions out of it.",
            )
        ]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, [
            DeclarationProblem(
                ProblemCode.UNREADABLE,
                "",
                line,
                f"the file is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}).",
                column=column,
                hint="Save the file as UTF-8.",
            )
        ]
    has_bom = text.startswith(BOM)
    if has_bom:
        text = text[1:]
    newline = "\r\n" if "\r\n" in text else "\n"
    return SourceText(text=text, has_bom=has_bom, newline=newline), []


class _NestingTooDeep(Exception):
    def __init__(self, mark) -> None:
        self.mark = mark


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader whose composer rejects aliases, anchors and object tags as it goes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.problems: list[tuple[DeclarationProblem, Node | None]] = []  # path filled in later
        self._depth = 0
        self._alias_lines: set[int] = set()

    def _alias_problem(self, event, what: str) -> list | None:
        line = event.start_mark.line + 1
        if line in self._alias_lines:  # one problem per line, however many aliases it holds
            return None
        self._alias_lines.add(line)
        entry = [
            DeclarationProblem(
                ProblemCode.ALIAS,
                "",
                line,
                f"{what}: YAML anchors and aliases are not accepted in a declaration.",
                column=event.start_mark.column + 1,
                hint="Write the value out in full where it is used.",
            ),
            None,
        ]
        self.problems.append(entry)
        return entry

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.get_event()
            node = RejectedNode(event.start_mark, event.end_mark)
            entry = self._alias_problem(event, f"alias *{event.anchor}")
            if entry is not None:
                entry[1] = node
            return node
        event = self.peek_event()
        anchor_entry = None
        if event.anchor is not None:
            anchor_entry = self._alias_problem(event, f"anchor &{event.anchor}")
            event.anchor = None  # never registered, so no alias can reach it
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise _NestingTooDeep(event.start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if anchor_entry is not None:
            anchor_entry[1] = node
        if not _tag_is_safe(node.tag):
            rejected = RejectedNode(node.start_mark, node.end_mark)
            self.problems.append(
                (
                    DeclarationProblem(
                        ProblemCode.UNSAFE_TAG,
                        "",
                        node.start_mark.line + 1,
                        f"tag {_short_tag(node.tag)} is not allowed: declarations are loaded safely and never "
                        "construct objects.",
                        column=node.start_mark.column + 1,
                        hint="Remove the tag and write a plain value (string, number, true/false, list, mapping).",
                    ),
                    rejected,
                )
            )
            return rejected
        return node


def _tag_is_safe(tag: str) -> bool:
    # Standard YAML types pass here (a timestamp or !!binary then fails the schema's type
    # check with a clear message); python/* tags and local/unknown tags never do.
    return tag.startswith(YAML_TAG) and not tag.startswith(YAML_TAG + "python/")


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(YAML_TAG) :] if tag.startswith(YAML_TAG) else tag


def compose_text(text: str) -> tuple[Node | None, list[DeclarationProblem]]:
    """Compose ``text`` (no BOM) into a node tree; problems found on the way.

    The tree is ``None`` when the text is empty or cannot be parsed (then the problems say
    why). Otherwise it is a true tree (aliases were replaced by ``RejectedNode``s), and the
    problems cover aliases, anchors, forbidden tags and duplicate keys."""
    loader = None
    try:
        loader = _GuardedLoader(text)  # the reader checks for non-printable characters here
        node = loader.get_single_node()
    except _NestingTooDeep as exc:
        return None, [
            DeclarationProblem(
                ProblemCode.SYNTAX,
                "",
                exc.mark.line + 1,
                f"the document is nested more than {MAX_NESTING} levels deep.",
                column=exc.mark.column + 1,
            )
        ]
    except yaml.YAMLError as exc:
        return None, _syntax_problems(text, exc)
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        return None, [
            DeclarationProblem(
                ProblemCode.EMPTY,
                "",
                None,
                "the file holds no declaration (it is empty or only comments).",
                hint="Start from the shipped config/scopes/bot.yml: it needs at least an `agents:` mapping.",
            )
        ]
    paths = {id(n): p for n, p in walk_nodes(node)}
    problems = [
        replace(problem, path=format_path(paths[id(at)])) if at is not None and id(at) in paths else problem
        for problem, at in loader.problems
    ]
    problems.extend(_duplicate_keys(node))
    return node, problems


def _syntax_problems(text: str, exc: yaml.YAMLError) -> list[DeclarationProblem]:
    tabs = list(_tab_indented_lines(text))
    if tabs:
        return [
            DeclarationProblem(
                ProblemCode.TAB_INDENT,
                "",
                line,
                "a tab is used for indentation; YAML allows only spaces there.",
                column=column,
                hint="Replace the tab with spaces (this file indents with spaces).",
            )
            for line, column in tabs
        ]
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return [
            DeclarationProblem(
                ProblemCode.SYNTAX,
                "",
                line,
                f"malformed YAML: control character U+{exc.character:04X} is not allowed in YAML text.",
                column=column,
                hint="Remove the character, or write it as an escape inside a double-quoted string.",
            )
        ]
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context == "expected a single document in the stream":
        message = "the file holds more than one YAML document; a declaration is a single document."
        hint = "Remove the second `---` and what follows, or merge the documents."
    else:
        message = f"malformed YAML: {problem}"
        if context and context_mark is not None and mark is not None and context_mark.line != mark.line:
            message += f" ({context} that starts at line {context_mark.line + 1})"
        elif context:
            message += f" ({context})"
        message += "."
        hint = "Check the indentation and the brackets/quotes around this line."
    return [
        DeclarationProblem(
            ProblemCode.SYNTAX,
            "",
            mark.line + 1 if mark is not None else None,
            message,
            column=mark.column + 1 if mark is not None else None,
            hint=hint,
        )
    ]


def _tab_indented_lines(text: str) -> Iterator[tuple[int, int]]:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)]
        if "\t" in indent and stripped:
            yield number, indent.index("\t") + 1


def walk_nodes(node: Node, path: Path = ()) -> Iterator[tuple[Node, Path]]:
    """Every node of a composed tree with its path (mapping keys as plain strings)."""
    yield node, path
    if isinstance(node, MappingNode):
        for key, value in node.value:
            part = key.value if isinstance(key, ScalarNode) else "?"
            yield from walk_nodes(value, (*path, part))
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield from walk_nodes(item, (*path, index))


def _duplicate_keys(root: Node) -> list[DeclarationProblem]:
    """Duplicate keys anywhere in the tree (PyYAML would silently keep the last one)."""
    problems: list[DeclarationProblem] = []
    for node, path in walk_nodes(root):
        if not isinstance(node, MappingNode):
            continue
        seen: dict[str, Node] = {}
        for key, _value in node.value:
            if not isinstance(key, ScalarNode) or isinstance(key, RejectedNode):
                continue
            if key.value in seen:
                first = seen[key.value].start_mark.line + 1
                problems.append(
                    DeclarationProblem(
                        ProblemCode.DUPLICATE_KEY,
                        format_path((*path, key.value)),
                        key.start_mark.line + 1,
                        f"key {key.value!r} appears again (first at line {first}); YAML would silently keep "
                        "only the last one.",
                        column=key.start_mark.column + 1,
                        hint="Remove one of the two, or merge them.",
                    )
                )
            else:
                seen[key.value] = key
    return problems
