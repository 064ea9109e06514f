"""The meter's sections as a user reads them: the colour key of each section of the token account,
its name, what it holds (the context viewer's first line), and its count in words.

Section names (memory.hooks.SectionAccount.name) come from the assembler and the providers; the
keys here are stable (CSS ``.seg-<key>``, the viewer's ``?section=<key>``).
"""

from __future__ import annotations

# Section names (memory.hooks.SectionAccount.name) → a stable key with a fixed colour (CSS
# .seg-<key>) and the label the legend shows, in the order the legend lists them.
SECTION_KEYS: tuple[tuple[str, str], ...] = (
    ("system", "Agent instructions"),
    ("core", "Core memory"),
    ("archive", "Archive recall"),
    ("pruned", "Pruned catalog"),
    ("experiences", "Experiences"),
    ("tools", "Tool definitions"),
    ("messages", "Messages"),
    ("other", "Other sections"),
    ("overhead", "Message framing"),
)
LABELS = dict(SECTION_KEYS)
ORDER = {key: index for index, (key, _label) in enumerate(SECTION_KEYS)}

#: What each section holds, said to the user (the context viewer's first line).
ABOUT: dict[str, str] = {
    "system": "The agent's instructions, as declared in bot.yml, that open the system message.",
    "core": "The core memory files, always in context: SOUL.md (who the agent is), USER.md (about you) "
    "and MEMORY.md (facts kept from earlier conversations).",
    "archive": "From your earlier, archived conversations: the messages that match your latest message "
    "(<archive_recall>) and the summaries of the most recent ones (<archive_summaries>).",
    "pruned": "What cleanup removed from this conversation: a catalog of the older messages, which the "
    "agent can open in full with the pruned_lookup tool.",
    "experiences": "Lessons learned from earlier runs, by name and description; the agent reads one in "
    "full with the experience tool.",
    "tools": "The tool definitions (JSON schemas) sent beside the messages; counted as compact JSON, "
    "shown here indented.",
    "messages": "The conversation as sent: the compact summary of what cleanup removed, if any, then the "
    "newest messages that fit the window.",
    "other": "Sections added by other providers.",
    "overhead": "Not text of its own: the tokens every message's role markers take, the separators "
    "between the sections of the system message, and the tokens that start the model's reply.",
}

# How the counts after a section's name are said: (singular, plural) per key or section part.
_UNITS: dict[str, tuple[str, str]] = {
    "core": ("file", "files"),
    "archive": ("item", "items"),
    "archive_recall": ("recalled message", "recalled messages"),
    "archive_summaries": ("summary", "summaries"),
    "pruned": ("entry", "entries"),
    "experiences": ("lesson", "lessons"),
    "tools": ("tool", "tools"),
    "messages": ("message", "messages"),
    "other": ("item", "items"),
}


def count_words(key: str, items: int) -> str:
    """``items`` of section (or part) ``key`` in words: "2 files", "1 entry"; "" when the section's
    count says nothing (the instructions, the framing)."""
    unit = _UNITS.get(key)
    if unit is None:
        return ""
    return f"{items:,} {unit[0] if items == 1 else unit[1]}"


def section_words(key: str, items: int, parts: tuple[tuple[str, int], ...] = ()) -> str:
    """The legend's count for a section: by part when it has parts with units of their own (the
    archive: "3 recalled messages, 2 summaries"), else ``count_words``. Core memory counts the
    files that are not empty."""
    said = [count_words(part, n) for part, n in parts if part in _UNITS]
    if said:
        return ", ".join(said)
    if key == "core":
        return f"{count_words(key, items)} filled" if items else "empty"
    return count_words(key, items)


def section_key(name: str) -> str:
    """The colour key of a SectionAccount name ("core memory" → "core", ...)."""
    lowered = name.lower()
    for needle, key in (
        ("system", "system"),
        ("core", "core"),
        ("archive", "archive"),
        ("pruned", "pruned"),
        ("experience", "experiences"),
        ("tool", "tools"),
        ("message", "messages"),
    ):
        if needle in lowered:
            return key
    return "other"
