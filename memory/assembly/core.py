"""CoreMemoryProvider: SOUL.md, USER.md and MEMORY.md as ``<your_identity>``, ``<user_profile>``
and ``<known_facts>``, in that order, as one "core memory" section.

The tag values are fixed agent-facing artifacts (see the seed): never rename them. The files are
capped at write time; the provider caps them again at render time (a cap lowered after the file
was written must not blow the context up).
"""

from __future__ import annotations

from collections.abc import Mapping

from memory.assembly.base import AssemblyContext, MemoryProvider, RenderMemo, Section, SectionPart
from memory.assembly.xml import element
from memory.core_memory import CORE_FILES, DEFAULT_CAPS, MEMORY, SOUL, USER, core_scope
from memory.tokens import count_text, truncate_text

#: Fixed XML tags per file (agent-facing: do not rename).
CORE_TAGS: Mapping[str, str] = {SOUL: "your_identity", USER: "user_profile", MEMORY: "known_facts"}
SECTION_NAME = "core memory"

_OVER_CAP = "\n[… cut at the file's cap; edit the file to bring it under the cap …]"


class CoreMemoryProvider(MemoryProvider):
    """The three core memory files, only when the agent's ``core_enabled`` is on.

    All three elements are always present (an empty file renders as an empty element), so the
    agent sees which files exist and can fill them. ``items`` counts the non-empty files.
    USER.md and MEMORY.md need a user; without one only ``<your_identity>`` is rendered.
    """

    name = SECTION_NAME

    def __init__(self, *, caps: Mapping[str, int] | None = None) -> None:
        self._caps = {**DEFAULT_CAPS, **(caps or {})}
        # (agent, user) -> the section, while the files read are the same.
        self._memo = RenderMemo()

    def provide(self, ctx: AssemblyContext) -> Section | None:
        if not ctx.config.core_enabled:
            return None
        files = [file for file in CORE_FILES if ctx.user is not None or file == SOUL]
        texts = tuple(
            ctx.stores.kv.get_value(core_scope(file=file, agent=ctx.agent, user=ctx.user), file, "") or ""
            for file in files
        )
        key = (ctx.agent, ctx.user)
        section = self._memo.get(key, texts)
        if section is None:
            section = self._render(files, texts)
            self._memo.put(key, texts, section)
        return section

    def _render(self, files: list[str], texts: tuple[str, ...]) -> Section:
        parts: list[SectionPart] = []
        for file, text in zip(files, texts, strict=True):
            cap = self._caps[file]
            if count_text(text) > cap:
                text = truncate_text(text, cap, marker=_OVER_CAP)
            # Newlines around the content keep markdown headings at the start of a line.
            rendered = element(CORE_TAGS[file], f"\n{text.strip(chr(10))}\n" if text.strip() else "")
            parts.append(SectionPart.of(key=file, text=rendered, items=1 if text.strip() else 0))
        return Section.of(
            name=SECTION_NAME,
            tag=CORE_TAGS[SOUL],
            text="\n".join(part.text for part in parts),
            items=sum(part.items for part in parts),
            parts=tuple(parts),
        )
