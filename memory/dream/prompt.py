"""The Dream Engine's request: what the consolidation model is asked, and how documents are shown.

The prompt is two wire messages. The system message carries ``CONSOLIDATION_MARKER`` (the
literal ``[consolidation request]``, which the built-in offline model recognises), names SOUL.md,
USER.md and MEMORY.md, and asks for JSON edits each naming its source document. The user
message holds the current files (as ``<your_identity>``, ``<user_profile>``, ``<known_facts>``,
the tags the agent sees them under) and the archive documents, oldest first, as
``<archive_document id=".." seq=".." date=".." session="..">`` with the document's summary and
an excerpt of its messages. Everything is XML-escaped: documents hold user-written text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory.assembly.xml import element, wrap
from memory.core_memory import CORE_FILES, MEMORY, SOUL, USER
from memory.messages import KIND_COMPACT_SUMMARY
from memory.stores.base import ArchiveDocument
from memory.tokens import count_text, truncate_text

#: The literal every consolidation request carries (the offline model keys on it).
CONSOLIDATION_MARKER = "[consolidation request]"
FILE_TAGS: Mapping[str, str] = {SOUL: "your_identity", USER: "user_profile", MEMORY: "known_facts"}

DEFAULT_DOCUMENT_TOKENS = 1500
_SUMMARY_SHARE = 0.5
_MESSAGE_CHARS = 1200

INSTRUCTIONS = f"""{CONSOLIDATION_MARKER}
You are the Dream Engine of an assistant with layered memory. You read archived conversations
and keep the assistant's three core memory files up to date. They are injected into every turn:
- SOUL.md: the assistant's own identity (its name, persona, tone). Change it only for facts about
  the assistant itself, and mark those edits "about": "identity".
- USER.md: the user's profile (name, where they live, work, preferences), one fact per line.
- MEMORY.md: other durable facts and decisions worth remembering, one per line.

Read the archive documents (oldest first) and propose edits. Answer with JSON only, no prose:
{{"edits": [
  {{"file": "USER.md", "action": "add", "text": "<new line>", "source": "<archive document id>"}},
  {{"file": "USER.md", "action": "update", "old": "<exact current line>", "text": "<new line>", "source": "<id>"}},
  {{"file": "MEMORY.md", "action": "remove", "old": "<exact current line>", "source": "<id>"}}
]}}
Rules:
- every edit names the archive document it came from as "source" (its id attribute);
- skip facts the files already hold; merge duplicates into one line;
- when a newer document contradicts a line, update that line (the newer fact wins);
- remove a line only when a document says it is no longer true or asks to forget it;
- keep lines short; the files have size caps (shown as cap, in tokens);
- only durable facts: not the conversation's small talk, not what the assistant said about itself
  unless the user set it; nothing the documents do not support.
If nothing is worth keeping, answer {{"edits": []}}."""


def _messages_excerpt(document: ArchiveDocument, budget: int) -> list[str]:
    rendered: list[str] = []
    used = 0
    for message in document.messages:
        if message.kind == KIND_COMPACT_SUMMARY or message.role not in ("user", "assistant"):
            continue
        text = " ".join((message.content or "").split())
        if not text:
            continue
        if len(text) > _MESSAGE_CHARS:
            text = text[: _MESSAGE_CHARS - 1] + "…"
        piece = element("message", text, attrs={"role": message.role, "seq": message.seq})
        cost = count_text(piece)
        if used + cost > budget:
            rendered.append(element("note", "later messages omitted"))
            break
        rendered.append(piece)
        used += cost
    return rendered


def render_document(document: ArchiveDocument, *, max_tokens: int = DEFAULT_DOCUMENT_TOKENS) -> str:
    """One archive document as XML for the prompt, within about ``max_tokens``."""
    summary_budget = max(64, int(max_tokens * _SUMMARY_SHARE))
    summary = truncate_text(document.summary or "", summary_budget, marker=" […]")
    children = [element("summary", summary)]
    children += _messages_excerpt(document, max_tokens - count_text(summary))
    attrs = {
        "id": document.id,
        "seq": document.seq,
        "date": document.created_at.date().isoformat(),
        "session": document.session,
    }
    return wrap("archive_document", children, attrs=attrs)


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
    documents: Sequence[ArchiveDocument],
    files: Mapping[str, str],
    caps: Mapping[str, int],
    document_tokens: int = DEFAULT_DOCUMENT_TOKENS,
) -> list[dict[str, Any]]:
    """The wire messages asking for edits from ``documents`` against the current ``files``."""
    body = [
        "Current core memory files:",
        render_files(files, caps),
        "",
        f"Archive documents to consolidate ({len(documents)}, oldest first):",
        *(render_document(doc, max_tokens=document_tokens) for doc in documents),
        "",
        'Answer with the JSON {"edits": [...]} now.',
    ]
    return [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": "\n".join(body)}]


__all__ = ["CONSOLIDATION_MARKER", "FILE_TAGS", "INSTRUCTIONS", "build_prompt", "render_document", "render_files"]
