"""Problems found in a scope declaration, and the exception family that carries them.

Every problem names its category code (``modex.E0NN``, shown by ``manage.py check``), the YAML
path of the offending key (``agents.default.memory.core_enabled``), its 1-based line and
column, and a message a person can act on. Validation collects all problems it can find in
one pass; only a file that cannot be parsed at all stops it early.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ProblemCode(StrEnum):
    """One code per category of problem; the value is the Django system-check id."""

    UNREADABLE = "modex.E001"  # missing, unreadable, or not UTF-8
    TOO_LARGE = "modex.E002"  # over MAX_DECLARATION_BYTES, rejected before parsing
    EMPTY = "modex.E003"  # no document at all (only blank lines or comments)
    SYNTAX = "modex.E004"  # malformed YAML, several documents, nesting too deep
    TAB_INDENT = "modex.E005"  # a tab in indentation (YAML forbids it)
    UNSAFE_TAG = "modex.E006"  # a tag that would construct an object (!!python/...)
    ALIAS = "modex.E007"  # anchors and aliases (&a / *a) are not accepted
    DUPLICATE_KEY = "modex.E008"  # the same key twice in one mapping
    MISSING_KEY = "modex.E009"  # a required key is absent
    UNKNOWN_KEY = "modex.E010"  # a key the declaration does not define
    WRONG_TYPE = "modex.E011"  # bool vs int vs str vs list vs mapping
    INVALID_VALUE = "modex.E012"  # right type, value out of range or not a choice
    UNKNOWN_TOOL = "modex.E013"  # a tool name the runtime does not provide
    UNKNOWN_SUPPLEMENT = "modex.E014"  # a tool supplement the runtime does not provide
    DUPLICATE_AGENT = "modex.E015"  # two nodes anywhere in the tree share a name
    CORE_WITHOUT_ARCHIVE = "modex.E016"  # core_enabled: true while the archive is off
    SUBAGENT_MEMORY = "modex.E017"  # a subagent's memory block sets more than its threshold
    SUBAGENT_SUPPLEMENT = "modex.E018"  # experience (supplement or tool) on a subagent
    MEMORY_CONFIG = "modex.E019"  # values that contradict each other (threshold > window, ...)
    SUBAGENT_LONG_TERM_TOOL = "modex.E020"  # archive_search / core_memory on a subagent: can never run

    @property
    def title(self) -> str:
        return _TITLES[self]


_TITLES = {
    ProblemCode.UNREADABLE: "declaration file cannot be read",
    ProblemCode.TOO_LARGE: "declaration file is too large",
    ProblemCode.EMPTY: "declaration file is empty",
    ProblemCode.SYNTAX: "malformed YAML",
    ProblemCode.TAB_INDENT: "tab used for indentation",
    ProblemCode.UNSAFE_TAG: "YAML tag not allowed",
    ProblemCode.ALIAS: "YAML anchors and aliases are not allowed",
    ProblemCode.DUPLICATE_KEY: "duplicate key",
    ProblemCode.MISSING_KEY: "required key missing",
    ProblemCode.UNKNOWN_KEY: "unknown key",
    ProblemCode.WRONG_TYPE: "wrong type",
    ProblemCode.INVALID_VALUE: "invalid value",
    ProblemCode.UNKNOWN_TOOL: "unknown tool",
    ProblemCode.UNKNOWN_SUPPLEMENT: "unknown tool supplement",
    ProblemCode.DUPLICATE_AGENT: "duplicate agent name",
    ProblemCode.CORE_WITHOUT_ARCHIVE: "core memory requires the archive",
    ProblemCode.SUBAGENT_MEMORY: "memory override not allowed on a subagent",
    ProblemCode.SUBAGENT_SUPPLEMENT: "experience is for main agents only",
    ProblemCode.MEMORY_CONFIG: "inconsistent memory settings",
}


@dataclass(frozen=True, slots=True)
class DeclarationProblem:
    """One thing wrong with a declaration, located in its source file.

    ``path`` is the dotted YAML path (``agents.default.tools[2]``), empty for the document
    itself; ``line`` and ``column`` are 1-based, ``None`` when the problem has no position
    (an unreadable file).
    """

    code: ProblemCode
    path: str
    line: int | None
    message: str
    column: int | None = None
    hint: str | None = None

    @property
    def location(self) -> str:
        if self.line is None:
            return ""
        if self.column is None:
            return f"line {self.line}"
        return f"line {self.line}, column {self.column}"

    def describe(self, source: str = "") -> str:
        """``source:line: path: message`` — the one-line form the checks and the CLI print."""
        where = source
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        head = f"{where}: " if where else ""
        at = f"{self.path}: " if self.path else ""
        return f"{head}{at}{self.message}"


class DeclarationError(Exception):
    """Base of the declaration layer's errors."""


class InvalidDeclaration(DeclarationError):
    """The declaration has problems; ``problems`` lists all of them, in file order."""

    def __init__(self, problems: list[DeclarationProblem], *, source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  [{p.code.value}] {p.describe(source)}" for p in self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
        super().__init__(f"{source or 'declaration'} is invalid ({len(self.problems)} problem(s)):\n{lines}{more}")


def sort_problems(problems: list[DeclarationProblem]) -> list[DeclarationProblem]:
    """File order (line, column), positionless problems first; stable for equal positions."""
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))
