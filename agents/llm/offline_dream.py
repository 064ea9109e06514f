"""The offline model's answer to a Dream Engine request that shows archive documents.

When the consolidation request holds ``<archive_document id=".." seq="..">`` blocks (the form
``memory.dream.prompt`` renders), each edit names the document it came from (``source``) and
what it is about (``about``: ``identity`` for SOUL.md, ``user`` for USER.md, ``fact`` for
MEMORY.md). Documents are read oldest first against a running copy of the current files, so a
later document's single-valued fact (name, location, identity) updates the line an earlier one
added: the newer fact wins. Evidence is what the user said (``<message role="user">``), after
the facts and decisions the document's compact summary lists (they may stem from before the
archive was on); a document without user messages falls back to its whole summary. A learned
line names the message it rests on: the one the summary names ("(seq 17)"), else the first user
message that states the same fact; only a line no message of the document states is dated by
the document's first user message (it is older than what was said beside it).

"forget that X" / "forget X" removes the current line that mentions X; "I no longer like X" /
"I don't like X anymore" removes "Likes X". Such sentences are not mined for facts.

A move ("I moved from Lisbon to Porto", "I'm no longer in Lisbon") updates "Lives in …" to the new
place and keeps the old one as "Previously lived in Lisbon" (``offline_facts``). Each edit names the
message it came from (``seq``), so the Dream Engine dates it by when it was said.
"""

from __future__ import annotations

import html
import json
import re

from agents.llm import offline_facts as facts
from agents.llm.offline_summary import existing_core

_DOCUMENT = re.compile(r"<archive_document\b(?P<attrs>[^>]*)>(?P<body>.*?)</archive_document>", re.DOTALL)
_USER_MESSAGE = re.compile(r'<message\b(?P<attrs>[^>]*\brole="user"[^>]*)>(?P<text>.*?)</message>', re.DOTALL)
_SUMMARY = re.compile(r"<summary\b[^>]*>(?P<text>.*?)</summary>", re.DOTALL)
_FORGET = re.compile(r"\bforget(?:\s+that|\s+about)?\s+(?P<v>[^\n.!?]+)", re.IGNORECASE)
_NO_LONGER = re.compile(
    r"\bi (?:no longer|don't|do not) (?P<verb>like|love|enjoy|prefer)\s+"
    r"(?P<v>[^\n.!?]+?)(?:\s+any ?more)?\s*(?:[.!?]|$)",
    re.IGNORECASE,
)
_ABOUT = {facts.SOUL_FILE: "identity", facts.USER_FILE: "user", facts.MEMORY_FILE: "fact"}
_STOP = frozenset({"the", "a", "an", "my", "that", "is", "are", "i", "to", "of", "in", "on"})


def has_documents(text: str) -> bool:
    """True when the request shows archive documents in the Dream Engine's form."""
    return "<archive_document" in text


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in _STOP}


def _matching_line(lines: list[str], target: str) -> str | None:
    """The current line best matching what the user asked to forget (all its words present)."""
    want = _words(target)
    if not want:
        return None
    hits = [line for line in lines if want <= _words(line)]
    return hits[0] if hits else None


def _documents(text: str) -> list[tuple[str, list[tuple[str, int | None]]]]:
    """``(id, [(evidence, message seq)])`` per document, in the order shown (oldest first)."""
    out = []
    for match in _DOCUMENT.finditer(text):
        attrs = dict(facts.ATTRIBUTES.findall(match.group("attrs")))
        body = match.group("body")
        said: list[tuple[str, int | None]] = []
        for message in _USER_MESSAGE.finditer(body):
            seq = dict(facts.ATTRIBUTES.findall(message.group("attrs"))).get("seq")
            said.append((html.unescape(message.group("text")), int(seq) if seq and seq.isdigit() else None))
        summary = _SUMMARY.search(body)
        if summary is not None:
            # What the summary says it learned is older than the messages beside it (it may
            # stem from before the archive was on): read first, so what the user said wins.
            text = html.unescape(summary.group("text"))
            learned = [line.strip("- ").strip() for line in _learned(text)]
            first = said[0][1] if said else None
            said = [*((f"{line}.", _said_in(line, said) or first) for line in learned if line and line != "(none)"),
                    *said] if said else [(text, None)]
        if "id" in attrs:
            out.append((html.unescape(attrs["id"]), said))
    return out


_SEQ_NOTE = re.compile(r"\(seq (?P<seq>\d+)\)\s*$")


def _said_in(line: str, said: list[tuple[str, int | None]]) -> int | None:
    """The seq of the user message a summary's learned ``line`` rests on: the one it names
    ("... (seq 17)"), else the first that states the same fact; None when none does."""
    seqs = {seq for _, seq in said if seq is not None}
    note = _SEQ_NOTE.search(line)
    if note is not None and int(note.group("seq")) in seqs:
        return int(note.group("seq"))
    wanted = {facts.normalize(f.text) for sentence in facts.sentences(line) for f in facts.extract_facts(sentence)}
    if not wanted:
        return None
    for text, seq in said:
        stated = {facts.normalize(f.text) for sentence in facts.sentences(text) for f in facts.extract_facts(sentence)}
        if seq is not None and wanted & stated:
            return seq
    return None


def _learned(summary: str) -> list[str]:
    """The lines of a compact summary's "Facts learned" and "Decisions" sections."""
    lines, keep = [], False
    for line in summary.splitlines():
        if line.startswith("## "):
            keep = line[3:].strip().lower() in ("facts learned", "decisions")
        elif keep and line.strip():
            lines.append(line.strip())
    return lines


def _same_kind(line: str, fact: facts.Fact) -> bool:
    return any(f.kind == fact.kind for f in facts.extract_facts(line))


def build_document_consolidation(everything: str) -> str:
    """JSON edits with ``source`` and ``about`` for the documents in ``everything``."""
    state = {file: list(lines) for file, lines in existing_core(everything).items()}
    edits: list[dict[str, str]] = []

    def emit(edit: dict[str, str]) -> None:
        file = edit["file"]
        lines = state[file]
        if edit["action"] == "add":
            lines.append(edit["text"])
        elif edit["action"] == "update":
            lines[lines.index(edit["old"])] = edit["text"]
        else:
            lines.remove(edit["old"])
        edit["about"] = _ABOUT[file]
        edits.append(edit)

    for source, evidence in _documents(everything):
        for text, seq in evidence:
            for sentence in facts.sentences(text):
                _consolidate_sentence(sentence, source, seq, state, emit)
    return json.dumps({"edits": edits}, ensure_ascii=False, indent=2)


def _consolidate_sentence(sentence: str, source: str, seq: int | None, state: dict[str, list[str]], emit) -> None:
    def edit(**fields: str) -> None:
        fields["source"] = source
        if seq is not None:
            fields["seq"] = seq
        emit(fields)

    forget = _FORGET.search(sentence)
    dislike = _NO_LONGER.search(sentence)
    if forget or dislike:
        if forget:
            target = facts.clean_value(forget.group("v"), cut_clauses=False)
            for file in (facts.USER_FILE, facts.MEMORY_FILE):
                line = _matching_line(state[file], target)
                if line is not None:
                    edit(file=file, action="remove", old=line)
                    break
        else:
            target = f"{dislike.group('verb')}s {facts.clean_value(dislike.group('v'))}"
            line = _matching_line(state[facts.USER_FILE], target)
            if line is not None:
                edit(file=facts.USER_FILE, action="remove", old=line)
        return
    found = facts.extract_facts(sentence)
    # The new home first: "Lives in Lisbon" becomes "Lives in Porto", then Lisbon is the past.
    found.sort(key=lambda fact: fact.kind == "past_location")
    homes = {facts.normalize(f.value) for f in found if f.kind == "location"}
    for fact in found:
        lines = state[fact.file]
        if facts.normalize(fact.text) in (facts.normalize(line) for line in lines):
            continue
        if fact.kind == "past_location":
            if facts.normalize(fact.value) in homes:
                continue  # "moved to Porto, no longer in Porto": nothing sensible to keep
            current = next((line for line in lines if facts.normalize(line) == f"lives in {facts.normalize(fact.value)}"),
                           None)
            if current is not None:  # "no longer in Lisbon": the current home line goes
                edit(file=fact.file, action="remove", old=current)
        old = next((line for line in lines if fact.single_valued and _same_kind(line, fact)), None)
        if old is not None:
            edit(file=fact.file, action="update", old=old, text=fact.text)
        else:
            edit(file=fact.file, action="add", text=fact.text)
