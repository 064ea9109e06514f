"""The Dream Engine's request: what the consolidation model is asked, and how documents are shown.

The prompt is two wire messages. The system message carries ``CONSOLIDATION_MARKER`` (the
literal ``[consolidation request]``, which the built-in offline model recognises), names SOUL.md,
USER.md and MEMORY.md, and asks for JSON edits each naming its source document and the message it
rests on. The user message holds the current files (as ``<your_identity>``, ``<user_profile>``,
``<known_facts>``, the tags the agent sees them under) and the chunk's documents, oldest first
(``memory.dream.reading``)::

    <archive_document id=".." seq="3" session="session:.." from="2023-05-08" to="2023-05-09">
    <summary>…</summary>
    <message role="user" seq="12" date="2023-05-08 14:03">…</message>
    <message role="assistant" seq="13" date="2023-05-08 14:04">…</message>
    </archive_document>

A document continued from the previous chunk says ``continued="true"``, one that goes on in the
next ``continues="true"``; a message read in parts has ``part="start"``/``"middle"``/``"end"``.
Every message is shown whole otherwise: nothing is omitted. Everything is XML-escaped: documents
hold user-written text. A repair request (``repair_prompt``) sends back an answer that was not the
JSON asked for, with the parse error, and asks for the JSON only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memory.assembly.xml import element, wrap
from memory.core_memory import CORE_FILES, MEMORY, SOUL, USER
from memory.dream.reading import Piece, Said, shown
from memory.stores.base import ArchiveDocument

#: The literal every consolidation request carries (the offline model keys on it).
CONSOLIDATION_MARKER = "[consolidation request]"
FILE_TAGS: Mapping[str, str] = {SOUL: "your_identity", USER: "user_profile", MEMORY: "known_facts"}

DEFAULT_DOCUMENT_TOKENS = 1500
#: How much of an invalid answer a repair request sends back.
REPAIR_ECHO_CHARS = 4000

INSTRUCTIONS = f"""{CONSOLIDATION_MARKER}
You are the Dream Engine of an assistant with layered memory. You read archived conversations
and keep the assistant's three core memory files up to date. They are injected into every turn:
- SOUL.md: the assistant's own identity (its name, persona, tone). Change it only for facts about
  the assistant itself, and mark those edits "about": "identity".
- USER.md: the user's profile (name, where they live, work, family, preferences), one fact per line.
- MEMORY.md: other durable facts worth remembering, one per line: about the people, places,
  events and plans the user talks about, and decisions made.

Read the archive documents (oldest first). Read both speakers: in a conversation the assistant's
side holds half of what was said and asked. Every message has the date it was said. Propose edits.
Answer with JSON only, no prose:
{{"edits": [
  {{"file": "USER.md", "action": "add", "text": "<new line>", "source": "<archive document id>", "seq": <message seq>}},
  {{"file": "USER.md", "action": "update", "old": "<exact current line>", "text": "<new line>", "source": "<id>", "seq": <seq>}},
  {{"file": "MEMORY.md", "action": "remove", "old": "<exact current line>", "source": "<id>", "seq": <seq>}}
]}}
Rules:
- every edit names the archive document it came from as "source" (its id attribute) and the
  message it rests on as "seq" (that message's seq attribute);
- keep dated facts where the date matters: write "On 8 May 2023, ..." with the date of the
  message (turn "yesterday" or "next month" into dates from that message's date);
- facts about other people, places and plans are as worth keeping as facts about the user; say
  whose they are ("Caroline's sister lives in Boston");
- skip facts the files already hold; merge duplicates into one line;
- when a newer message contradicts a line, update that line: the newer fact wins;
- remove a line only when a message says it is no longer true or asks to forget it;
- keep lines short; the files have size caps (shown as cap, in tokens);
- only durable facts, nothing the conversation does not support; not small talk.
If nothing is worth keeping, answer {{"edits": []}}."""

REPAIR = (
    "That answer is not the JSON asked for ({error}). Answer again with only the JSON object "
    '{{"edits": [...]}} described above: no prose, no code fence.'
)


def _date(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _part(said: Said) -> str | None:
    if said.whole:
        return None
    if said.start == 0:
        return "start"
    return "end" if said.end >= len(said.message.content or "") else "middle"


def render_piece(piece: Piece) -> str:
    """One document (or the part of it a chunk shows) as XML for the prompt."""
    children = [element("summary", piece.summary)] if piece.summary else []
    for said in piece.said:
        attrs = {"role": said.message.role, "seq": said.message.seq, "date": _date(said.message.created_at),
                 "part": _part(said)}
        children.append(element("message", said.text.strip(), attrs=attrs))
    times = [m.created_at for m in piece.document.messages] or [piece.document.created_at]
    attrs = {
        "id": piece.document.id,
        "seq": piece.document.seq,
        "session": piece.document.session,
        "title": piece.document.title or None,
        "from": min(times).date().isoformat(),
        "to": max(times).date().isoformat(),
        "continued": "true" if piece.part > 1 else None,
        "continues": None if piece.last else "true",
    }
    return wrap("archive_document", children, attrs=attrs)


def render_document(document: ArchiveDocument) -> str:
    """A whole document as XML (every message shown), as the Dream Engine would read it alone."""
    said = tuple(Said(m, i, 0, len(m.content or "")) for i, m in enumerate(document.messages) if shown(m))
    return render_piece(Piece(document, said, (document.summary or "").strip()))


def render_files(files: Mapping[str, str], caps: Mapping[str, int]) -> str:
    """The current core memory files, under the tags the agent sees them as."""
    parts = []
    for file in CORE_FILES:
        text = files.get(file, "")
        body = f"\n{text.strip(chr(10))}\n" if text.strip() else ""
        parts.append(element(FILE_TAGS[file], body, attrs={"file": file, "cap": caps.get(file)}))
    return "\n".join(parts)


def build_prompt(
    *,
    files: Mapping[str, str],
    caps: Mapping[str, int],
    pieces: Sequence[Piece] = (),
    documents: Sequence[ArchiveDocument] = (),
) -> list[dict[str, Any]]:
    """The wire messages asking for edits from ``pieces`` (a chunk) or whole ``documents``
    against the current ``files``."""
    rendered = [render_piece(piece) for piece in pieces] + [render_document(doc) for doc in documents]
    body = [
        "Current core memory files:",
        render_files(files, caps),
        "",
        f"Archive documents to consolidate ({len(rendered)}, oldest first):",
        *rendered,
        "",
        'Answer with the JSON {"edits": [...]} now.',
    ]
    return [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": "\n".join(body)}]


def repair_prompt(prompt: list[dict[str, Any]], *, answer: str, error: str) -> list[dict[str, Any]]:
    """``prompt`` followed by the invalid ``answer`` and a request for the JSON only."""
    echo = answer if len(answer) <= REPAIR_ECHO_CHARS else answer[:REPAIR_ECHO_CHARS] + " […]"
    return [*prompt, {"role": "assistant", "content": echo},
            {"role": "user", "content": REPAIR.format(error=error)}]


__all__ = [
    "CONSOLIDATION_MARKER",
    "FILE_TAGS",
    "INSTRUCTIONS",
    "build_prompt",
    "render_document",
    "render_files",
    "render_piece",
    "repair_prompt",
]
