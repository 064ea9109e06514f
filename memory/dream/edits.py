"""Dream Engine edits: parsing the model's answer, validating it, applying it to a file's text.

The model proposes edits as JSON::

    {"edits": [
      {"file": "USER.md", "action": "add", "text": "Name: Sam", "source": "<document id>"},
      {"file": "USER.md", "action": "update", "old": "Lives in Lyon", "text": "Lives in Paris", "source": "..."},
      {"file": "MEMORY.md", "action": "remove", "old": "The deploy is on Friday", "source": "..."}
    ]}

``append``/``replace``/``delete`` are accepted as synonyms of ``add``/``update``/``remove``.

Validation (``validate_edits``) keeps an edit only if it names a core file, a known action, the
text it needs, and the archive document it came from (one of the documents shown; with a single
document shown, a missing source means that one). A SOUL.md edit must be about the agent's own
identity (``"about": "identity"``) and must not talk about the user. Identical proposals are
merged. Each edit is dated: when the message it names (``"seq"``) was said, else the newest
message of its document shown. Edits are ordered by that date (then document), so applying
them in order lets the newer fact win.

Application (``apply_edits``) works on lines, not positions, so it can be re-run on a file that
changed meanwhile (an agent edit made during the model call survives):

* ``add`` skips a line the file already holds (compared without bullets, case or spacing);
  in USER.md and SOUL.md a single-valued attribute (``Key: value``, ``Lives in ...``,
  ``User's <thing> is ...``) replaces the line holding the same attribute: newer wins;
* ``update`` replaces the line matching ``old`` (keeping its bullet); if that line is gone it
  adds the new text as ``add`` would; if the new text is already there it does nothing;
* ``remove`` drops the line matching ``old``; nothing if it is gone;
* an edit that would take the file over its token cap is skipped (shrinking edits always apply).

With the file's line ledger (``memory.core_lines``), nothing learned goes back: an edit is
skipped when the line it would replace or remove states something newer than the edit's date
(an agent edit made after that message, a later consolidation), and when a person removed that
line or attribute (or everything) after the message was said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory.core_lines import LineLedger, attribute_key, clean_text, normalize_line
from memory.core_memory import CORE_FILES, SOUL
from memory.tokens import count_text

ADD = "add"
UPDATE = "update"
REMOVE = "remove"
ACTION_SYNONYMS: Mapping[str, str] = {
    "add": ADD,
    "append": ADD,
    "update": UPDATE,
    "replace": UPDATE,
    "remove": REMOVE,
    "delete": REMOVE,
}
IDENTITY_LABELS = frozenset({"identity", "agent", "self", "soul"})
MAX_EDIT_CHARS = 500
MAX_EDITS = 200

_BULLET = re.compile(r"^(?P<prefix>\s*(?:[-*+]|\d+[.)])\s+)")
_USER_WORDS = re.compile(r"\b(?:the user|user's|user)\b", re.IGNORECASE)
_FENCE = re.compile(r"^```[\w-]*\s*$|^```\s*$", re.MULTILINE)


class InvalidAnswer(ValueError):
    """The model's answer is not the JSON the Dream Engine asked for."""


@dataclass(frozen=True, slots=True)
class CoreEdit:
    """One validated change to a core memory file, from archive document ``source``."""

    file: str
    action: str  # "add" | "update" | "remove"
    text: str = ""  # the new line (add, update)
    old: str = ""  # the line to replace or remove (update, remove)
    source: str = ""  # the archive document id it came from
    source_seq: int = 0
    about: str = ""
    seq: int | None = None  # the message it rests on (its seq in the conversation), when named
    said_at: datetime | None = None  # when that message (else the newest one shown) was said

    def describe(self) -> str:
        if self.action == ADD:
            return f"{self.file}: + {self.text}"
        if self.action == UPDATE:
            return f"{self.file}: {self.old} → {self.text}"
        return f"{self.file}: - {self.old}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.file, "action": self.action, "source": self.source}
        if self.seq is not None:
            data["seq"] = self.seq
        if self.old:
            data["old"] = self.old
        if self.text:
            data["text"] = self.text
        return data


@dataclass(frozen=True, slots=True)
class RejectedEdit:
    """A proposal or edit that was not applied, and why."""

    proposal: Mapping[str, Any]
    reason: str


@dataclass(frozen=True, slots=True)
class ShownDocument:
    """What the model was shown of one archive document: its seq, and when each message shown
    (by seq) was said."""

    seq: int
    said: Mapping[int, datetime] = field(default_factory=dict)
    latest: datetime | None = None  # the newest message shown (with or without a seq)

    @property
    def newest(self) -> datetime | None:
        times = [*self.said.values(), *([self.latest] if self.latest else [])]
        return max(times) if times else None


# -- the answer -------------------------------------------------------------------------------


def parse_answer(raw: object) -> list[Any]:
    """The ``edits`` list of the model's answer; raises InvalidAnswer for anything else.

    Tolerates what models wrap JSON in (code fences, a sentence before or after), nothing more:
    the answer must contain one JSON object with an ``edits`` list (or be a bare list).
    """
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidAnswer("the model's answer is empty")
    text = _FENCE.sub("", raw).strip()
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("edits"), list):
            return data["edits"][:MAX_EDITS]
        if isinstance(data, list):
            return data[:MAX_EDITS]
        raise InvalidAnswer('the model\'s JSON has no "edits" list')
    raise InvalidAnswer(f"the model's answer is not JSON: {' '.join(text.split())[:120]!r}")


def _one_line(value: object) -> str:
    if not isinstance(value, str):
        return ""
    return " ".join(clean_text(value).split())[:MAX_EDIT_CHARS]


def _seq(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def validate_edits(
    *, proposals: Sequence[Any], documents: Mapping[str, int | ShownDocument]
) -> tuple[list[CoreEdit], list[RejectedEdit]]:
    """Check each proposal; return the valid edits (oldest statement first) and the rejected ones.

    ``documents`` maps the ids of the archive documents shown to the model to their seqs, or to
    what was shown of them (``ShownDocument``, which dates the edits).
    """
    shown = {key: value if isinstance(value, ShownDocument) else ShownDocument(int(value))
             for key, value in documents.items()}
    edits: list[tuple[tuple, CoreEdit]] = []
    rejected: list[RejectedEdit] = []
    seen: set[tuple[str, str, str, str]] = set()
    only = next(iter(shown)) if len(shown) == 1 else None
    for index, proposal in enumerate(proposals):
        if not isinstance(proposal, Mapping):
            rejected.append(RejectedEdit({"value": repr(proposal)[:200]}, "not an object"))
            continue
        file = proposal.get("file")
        action = ACTION_SYNONYMS.get(str(proposal.get("action", "")).strip().lower())
        text = _one_line(proposal.get("text") if proposal.get("text") is not None else proposal.get("new"))
        old = _one_line(proposal.get("old"))
        source = proposal.get("source") or proposal.get("document") or only
        about = str(proposal.get("about") or "").strip().lower()
        reason = None
        if file not in CORE_FILES:
            reason = f"unknown file {file!r}"
        elif action is None:
            reason = f"unknown action {proposal.get('action')!r}"
        elif action in (ADD, UPDATE) and not text:
            reason = f"{action} needs a text"
        elif action == UPDATE and not old:
            reason = "update needs the old text"
        elif action == REMOVE and not (old or text):
            reason = "remove needs the text to remove"
        elif not isinstance(source, str) or source not in shown:
            reason = "no source archive document (or one that was not shown)"
        elif file == SOUL and (about not in IDENTITY_LABELS or _USER_WORDS.search(f"{old} {text}")):
            reason = "SOUL.md only takes edits about the agent's own identity"
        if reason is not None:
            rejected.append(RejectedEdit(dict(proposal), reason))
            continue
        if action == REMOVE and not old:
            old, text = text, ""
        key = (file, action, normalize_line(old), normalize_line(text))
        if key in seen:
            continue  # the same edit proposed twice (often from two documents): merged
        seen.add(key)
        document = shown[source]
        seq = _seq(proposal.get("seq"))
        said_at = document.said.get(seq) if seq is not None else None
        if said_at is None:
            seq = seq if seq in document.said else None
            said_at = document.newest
        edit = CoreEdit(file=file, action=action, text=text, old=old, source=source, source_seq=document.seq,
                        about=about, seq=seq, said_at=said_at)
        order = (said_at.timestamp() if said_at else float("-inf"), document.seq, index)
        edits.append((order, edit))
    edits.sort(key=lambda item: item[0])
    return [edit for _, edit in edits], rejected


# -- applying to text -------------------------------------------------------------------------


def _locate(lines: list[str], target: str) -> int | None:
    want = normalize_line(target)
    if not want:
        return None
    exact = [i for i, line in enumerate(lines) if normalize_line(line) == want]
    if exact:
        return exact[0]
    partial = [i for i, line in enumerate(lines) if want in normalize_line(line)]
    return partial[0] if len(partial) == 1 else None


def _bulleted(lines: list[str]) -> str:
    """The bullet most of the file's lines use ("" when they use none)."""
    prefixes = [m.group("prefix").strip() for line in lines if line.strip() and (m := _BULLET.match(line))]
    content = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if prefixes and len(prefixes) * 2 >= len(content) and prefixes[0] in ("-", "*", "+"):
        return prefixes[0] + " "
    return ""


def _join(lines: list[str]) -> str:
    text = "\n".join(lines).strip("\n")
    return text + "\n" if text else ""


def _apply_one(lines: list[str], edit: CoreEdit, guard: _Guard) -> tuple[list[str], str | None]:
    """``(new lines, None)``, or ``(lines, reason)`` when the edit changes nothing."""
    norms = [normalize_line(line) for line in lines]
    if edit.action == REMOVE:
        at = _locate(lines, edit.old)
        if at is None:
            return lines, "the line to remove is not in the file"
        newer = guard.newer(lines[at], edit)
        if newer:
            return lines, newer
        return lines[:at] + lines[at + 1 :], None
    new_norm = normalize_line(edit.text)
    if new_norm in norms:
        if edit.action == UPDATE:
            at = _locate(lines, edit.old)
            if at is not None and norms[at] != new_norm and not guard.newer(lines[at], edit):
                return lines[:at] + lines[at + 1 :], None  # the new fact exists: drop the old one
        return lines, "the file already holds this"
    removed = guard.removed(edit)
    if removed:
        return lines, removed
    at = _locate(lines, edit.old) if edit.action == UPDATE else None
    if at is None:
        key = attribute_key(edit.file, edit.text)
        if key is not None:
            same = [i for i, line in enumerate(lines) if attribute_key(edit.file, line) == key]
            at = same[-1] if same else None
    if at is not None:
        newer = guard.newer(lines[at], edit)
        if newer:
            return lines, newer
        match = _BULLET.match(lines[at])
        prefix = match.group("prefix") if match else ""
        return lines[:at] + [prefix + edit.text] + lines[at + 1 :], None
    return [*lines, _bulleted(lines) + edit.text], None


class _Guard:
    """The as-of checks of one application (see the module docstring)."""

    def __init__(self, file: str, ledger: LineLedger | None, written_at: datetime | None) -> None:
        self.file, self.ledger, self.written_at = file, ledger, written_at
        self.dated: dict[str, datetime] = {}  # lines this application wrote, by normalised text

    def as_of(self, line: str) -> datetime | None:
        mine = self.dated.get(normalize_line(line))
        if mine is not None:
            return mine
        return self.ledger.as_of(line, fallback=self.written_at) if self.ledger is not None else None

    def newer(self, line: str, edit: CoreEdit) -> str | None:
        """Why ``line`` must not give way to ``edit`` (it states something newer), or None."""
        if edit.said_at is None:
            return None
        held = self.as_of(line)
        if held is not None and held > edit.said_at:
            return f"a newer statement is held (“{line.strip()}” as of {held:%Y-%m-%d %H:%M})"
        return None

    def removed(self, edit: CoreEdit) -> str | None:
        if self.ledger is None or edit.said_at is None:
            return None
        when = self.ledger.removed_since(file=self.file, line=edit.text, said_at=edit.said_at)
        return f"removed by a person on {when:%Y-%m-%d %H:%M}, after it was said" if when else None


def apply_edits(
    text: str,
    edits: Sequence[CoreEdit],
    *,
    cap: int,
    ledger: LineLedger | None = None,
    written_at: datetime | None = None,
) -> tuple[str, list[CoreEdit], list[RejectedEdit]]:
    """Apply ``edits`` in order to ``text``; return the new text, the applied and skipped edits.

    Pure and deterministic, so re-running it on a file that changed meanwhile re-applies the
    same intent to the new text. An edit that would take the file over ``cap`` tokens (and
    grow it) is skipped. With ``ledger`` (the file's, and ``written_at``, its last write, for
    lines the ledger does not know), dated edits never overwrite a newer statement nor bring
    back what a person removed.
    """
    lines = text.splitlines()
    applied: list[CoreEdit] = []
    skipped: list[RejectedEdit] = []
    tokens = count_text(text)
    guard = _Guard(edits[0].file if edits else "", ledger, written_at)
    for edit in edits:
        guard.file = edit.file
        candidate, reason = _apply_one(lines, edit, guard)
        if reason is not None:
            skipped.append(RejectedEdit(edit.to_json(), reason))
            continue
        new_tokens = count_text(_join(candidate))
        if new_tokens > cap and new_tokens > tokens:
            skipped.append(RejectedEdit(edit.to_json(), f"{edit.file} would exceed its cap of {cap} tokens"))
            continue
        lines, tokens = candidate, new_tokens
        if edit.said_at is not None and edit.text:
            guard.dated[normalize_line(edit.text)] = edit.said_at
        applied.append(edit)
    new_text = _join(lines) if applied else text
    return new_text, applied, skipped


__all__ = [
    "ACTION_SYNONYMS",
    "ADD",
    "REMOVE",
    "UPDATE",
    "CoreEdit",
    "InvalidAnswer",
    "RejectedEdit",
    "ShownDocument",
    "apply_edits",
    "attribute_key",
    "normalize_line",
    "parse_answer",
    "validate_edits",
]
