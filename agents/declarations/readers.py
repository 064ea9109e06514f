"""Typed readers over composed YAML nodes, used by the declaration schema.

Strict typing is decided here rather than by YAML 1.1 resolution:

* toggles accept only ``true`` / ``false`` (any case). ``yes``/``no``/``on``/``off`` are
  booleans to PyYAML (YAML 1.1) but strings to YAML 1.2 tools such as ruamel.yaml, so they
  are rejected with a hint instead of being guessed;
* numbers accept plain decimal integers only (``12000``, ``12_000``); quoted numbers, floats,
  hex, octal and sexagesimal forms are rejected;
* text fields accept strings (or nothing); an unquoted ``yes`` or ``42`` there is an error.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agents.declarations.problems import DeclarationProblem, ProblemCode
from agents.declarations.source import BOOL_TAG, INT_TAG, NULL_TAG, STR_TAG, YAML_TAG, Path, RejectedNode, format_path

MERGE_TAG = YAML_TAG + "merge"
SKIP = object()  # a value that failed validation (already reported)
_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9_]*)")
_UNKNOWN_KEY_HINTS = {
    "experience_enabled": "Experience is switched on with `tool_supplements: [experience]` on a main agent.",
    "experience": "Experience is switched on with `tool_supplements: [experience]` on a main agent.",
    "context_window": "The context window belongs to the model: set `model: {context_window: ...}`.",
    "supplements": "The key is `tool_supplements`.",
}


def _describe(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    kind = node.tag[len(YAML_TAG) :] if node.tag.startswith(YAML_TAG) else node.tag
    if node.tag == NULL_TAG:
        return "nothing (null)"
    names = {"str": "the string", "int": "the number", "float": "the number", "bool": "the boolean"}
    return f"{names.get(kind, 'a ' + kind + ' value')} {node.value!r}"


class NodeReader:
    """Typed readers over composed nodes: each returns the value, or ``SKIP`` after recording
    a problem. Subclasses walk a structure with them."""

    def __init__(self) -> None:
        self.problems: list[DeclarationProblem] = []

    def add(self, code: ProblemCode, path: Path, node: Node, message: str, hint: str | None = None) -> None:
        mark = node.start_mark
        self.problems.append(
            DeclarationProblem(code, format_path(path), mark.line + 1, message, column=mark.column + 1, hint=hint)
        )

    def mapping(self, node: Node, path: Path, *, allowed: Sequence[str] | None, what: str) -> dict | object:
        if isinstance(node, RejectedNode):
            return SKIP
        if isinstance(node, ScalarNode) and node.tag == NULL_TAG:
            return {}
        if not isinstance(node, MappingNode):
            self.add(ProblemCode.WRONG_TYPE, path, node, f"{what} must be a mapping of keys, not {_describe(node)}.")
            return SKIP
        entries: dict[str, tuple[ScalarNode, Node]] = {}
        for key, value in node.value:
            if isinstance(key, RejectedNode):
                continue
            if isinstance(key, ScalarNode) and key.tag == MERGE_TAG:
                self.add(
                    ProblemCode.ALIAS,
                    (*path, key.value),
                    key,
                    "merge keys (<<) are not accepted: they exist to reuse anchored values, and anchors are not "
                    "accepted either.",
                    hint="Write the keys out in full.",
                )
                continue
            if not isinstance(key, ScalarNode) or key.tag != STR_TAG:
                shown = key.value if isinstance(key, ScalarNode) else "?"
                self.add(
                    ProblemCode.WRONG_TYPE,
                    (*path, str(shown)),
                    key,
                    f"keys must be plain strings; {_describe(key)} is not one.",
                    hint="Quote the key if it is meant as a name.",
                )
                continue
            if key.value in entries:
                continue  # duplicate key: reported by the source layer; the first one counts
            if allowed is not None and key.value not in allowed:
                self.unknown_key(path, key, allowed, what)
                continue
            entries[key.value] = (key, value)
        return entries

    def unknown_key(self, path: Path, key: ScalarNode, allowed: Sequence[str], what: str) -> None:
        close = difflib.get_close_matches(key.value, allowed, n=1, cutoff=0.6)
        hint = _UNKNOWN_KEY_HINTS.get(key.value)
        message = f"unknown key {key.value!r} in {what}."
        if close:
            message += f" Did you mean {close[0]!r}?"
        if hint is None:
            hint = "Allowed here: " + ", ".join(allowed) + "."
        self.add(ProblemCode.UNKNOWN_KEY, (*path, key.value), key, message, hint)

    def boolean(self, node: Node, path: Path) -> bool | object:
        if isinstance(node, RejectedNode):
            return SKIP
        if isinstance(node, ScalarNode) and node.tag == BOOL_TAG:
            if node.value.lower() in ("true", "false"):
                return node.value.lower() == "true"
            self.add(
                ProblemCode.WRONG_TYPE,
                path,
                node,
                f"{node.value!r} is a YAML 1.1 boolean that other YAML tools read as a string; write true or false.",
            )
            return SKIP
        self.add(ProblemCode.WRONG_TYPE, path, node, f"expected true or false, got {_describe(node)}.")
        return SKIP

    def integer(self, node: Node, path: Path, *, minimum: int) -> int | object:
        if isinstance(node, RejectedNode):
            return SKIP
        if isinstance(node, ScalarNode) and node.tag == INT_TAG and _DECIMAL.fullmatch(node.value):
            value = int(node.value.replace("_", ""))
            if value < minimum:
                self.add(ProblemCode.INVALID_VALUE, path, node, f"must be at least {minimum}, got {value}.")
                return SKIP
            return value
        hint = None
        if isinstance(node, ScalarNode) and node.tag == STR_TAG and _DECIMAL.fullmatch(node.value.strip()):
            hint = "Remove the quotes: numbers are written bare."
        elif isinstance(node, ScalarNode) and node.tag == INT_TAG:
            hint = "Write a plain decimal number (no hex, octal or 1:30 forms)."
        self.add(ProblemCode.WRONG_TYPE, path, node, f"expected a whole number, got {_describe(node)}.", hint)
        return SKIP

    def string(self, node: Node, path: Path, *, required: bool = False) -> str | object:
        if isinstance(node, RejectedNode):
            return SKIP
        if isinstance(node, ScalarNode) and node.tag == NULL_TAG and not required:
            return ""
        if isinstance(node, ScalarNode) and node.tag == STR_TAG:
            if required and not node.value.strip():
                self.add(ProblemCode.INVALID_VALUE, path, node, "must not be empty.")
                return SKIP
            return node.value
        self.add(
            ProblemCode.WRONG_TYPE,
            path,
            node,
            f"expected text, got {_describe(node)}.",
            hint="Quote the value to keep it as text." if isinstance(node, ScalarNode) else None,
        )
        return SKIP

    def choice(self, node: Node, path: Path, choices: Sequence[str]) -> str | object:
        value = self.string(node, path, required=True)
        if value is SKIP:
            return SKIP
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
            suggestion = f" Did you mean {close[0]!r}?" if close else ""
            self.add(
                ProblemCode.INVALID_VALUE, path, node, f"{value!r} is not one of: {', '.join(choices)}.{suggestion}"
            )
            return SKIP
        return value

    def name_list(
        self, node: Node, path: Path, *, known: Sequence[str], code: ProblemCode, what: str
    ) -> tuple | object:
        """A list of names from ``known``; returns ``((name, node), ...)`` of the valid ones."""
        if isinstance(node, RejectedNode):
            return SKIP
        if isinstance(node, ScalarNode) and node.tag == NULL_TAG:
            return ()
        if not isinstance(node, SequenceNode):
            self.add(ProblemCode.WRONG_TYPE, path, node, f"expected a list of {what}s, got {_describe(node)}.")
            return SKIP
        items: list[tuple[str, Node]] = []
        ok = True
        for index, item in enumerate(node.value):
            name = self.string(item, (*path, index), required=True)
            if name is SKIP:
                ok = False
                continue
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                suggestion = f" Did you mean {close[0]!r}?" if close else ""
                self.add(
                    code,
                    (*path, index),
                    item,
                    f"unknown {what} {name!r}.{suggestion}",
                    hint=f"Known {what}s: {', '.join(known)}.",
                )
                ok = False
            elif any(name == seen for seen, _ in items):
                self.add(ProblemCode.INVALID_VALUE, (*path, index), item, f"{what} {name!r} is listed twice.")
                ok = False
            else:
                items.append((name, item))
        return tuple(items) if ok else SKIP

    # -- the declaration's structure --------------------------------------------------------
