"""CoreMemoryProvider: fixed tags, order, hostile content, empty files, caps."""

from __future__ import annotations

import pytest

from memory.assembly.core import CORE_TAGS, CoreMemoryProvider
from memory.config import MemoryConfig
from memory.core_memory import MEMORY, SOUL, USER, CoreMemory, core_scope
from memory.tokens import count_text

from .helpers import HOSTILE, ctx, parse

FULL = MemoryConfig(archive_enabled=True, core_enabled=True)


def put(bundle, file, text, *, agent="default", user="42"):
    bundle.kv.put(core_scope(file=file, agent=agent, user=user), file, text)


def test_fixed_tags():
    assert CORE_TAGS == {SOUL: "your_identity", USER: "user_profile", MEMORY: "known_facts"}


def test_nothing_when_core_memory_is_off(bundle):
    put(bundle, SOUL, "identity")
    assert CoreMemoryProvider().provide(ctx(bundle, config=MemoryConfig(archive_enabled=True))) is None
    assert CoreMemoryProvider().provide(ctx(bundle, config=MemoryConfig())) is None


def test_empty_files_render_three_empty_elements(bundle):
    section = CoreMemoryProvider().provide(ctx(bundle))
    root = parse(section.text)
    assert [child.tag for child in root] == ["your_identity", "user_profile", "known_facts"]
    assert all(not (child.text or "").strip() for child in root)
    assert section.items == 0 and section.name == "core memory"
    assert section.tokens == count_text(section.text)


def test_files_in_order_with_their_text(bundle):
    put(bundle, SOUL, "# Soul\nI am Modex.")
    put(bundle, USER, "Name: Ada")
    put(bundle, MEMORY, "- prefers tea\n- lives in Oslo\n")
    section = CoreMemoryProvider().provide(ctx(bundle))
    root = parse(section.text)
    assert [(c.tag, c.text.strip()) for c in root] == [
        ("your_identity", "# Soul\nI am Modex."),
        ("user_profile", "Name: Ada"),
        ("known_facts", "- prefers tea\n- lives in Oslo"),
    ]
    assert section.items == 3


def test_other_users_facts_are_not_shown(bundle):
    put(bundle, MEMORY, "- secret of user 43", user="43")
    root = parse(CoreMemoryProvider().provide(ctx(bundle, user="42")).text)
    assert "43" not in (root.find("known_facts").text or "")


def test_without_a_user_only_the_identity_is_shown(bundle):
    put(bundle, SOUL, "I am Modex.")
    root = parse(CoreMemoryProvider().provide(ctx(bundle, user=None)).text)
    assert [c.tag for c in root] == ["your_identity"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_content_cannot_leave_its_element(bundle, hostile):
    # Written the way the agent's tool writes: through CoreMemory (which drops NUL, since the
    # KV stores refuse it); other controls are stripped by the XML rendering.
    core = CoreMemory(kv=bundle.kv, config=FULL, agent="default", user="42")
    for file in (SOUL, USER, MEMORY):  # SOUL.md is shared: only the operator or staff write it
        source = "system" if file == SOUL else "agent"
        core.rewrite(file=file, text=f"before {hostile} after", source=source, expected_version=0)
    raw = f"before {hostile.replace(chr(0), '')} after"  # written around CoreMemory, controls and all
    bundle.kv.put(core_scope(file=USER, agent="default", user="42"), USER, raw)
    root = parse(CoreMemoryProvider().provide(ctx(bundle)).text)
    assert [c.tag for c in root] == ["your_identity", "user_profile", "known_facts"]
    for child in root:
        assert list(child) == []  # no injected element survived
        text = child.text.strip()
        assert text.startswith("before ") and text.endswith(" after")
        assert "\x00" not in text and "\x01" not in text


def test_a_file_at_its_cap_is_shown_whole(bundle):
    text = " word" * 50
    put(bundle, MEMORY, text)
    root = parse(CoreMemoryProvider(caps={MEMORY: 50}).provide(ctx(bundle)).text)
    assert root.find("known_facts").text.strip() == text.strip()


def test_a_file_over_its_cap_is_cut_at_render_time(bundle):
    put(bundle, MEMORY, " word" * 500)
    section = CoreMemoryProvider(caps={MEMORY: 50}).provide(ctx(bundle))
    facts = parse(section.text).find("known_facts").text
    assert count_text(facts.strip()) <= 50
    assert "cut at the file's cap" in facts


def test_the_section_is_its_files_in_parts_each_counted(bundle):
    """The parts (for whoever shows the section file by file) are exactly the section's text."""
    put(bundle, SOUL, "# Soul\nI am Modex.")
    put(bundle, USER, "Name: Ada")
    section = CoreMemoryProvider().provide(ctx(bundle))
    assert [p.key for p in section.parts] == [SOUL, USER, MEMORY]
    assert "\n".join(p.text for p in section.parts) == section.text
    assert [p.items for p in section.parts] == [1, 1, 0] and section.items == 2
    assert all(p.tokens == count_text(p.text) for p in section.parts)
    assert section.parts[1].text.startswith("<user_profile>") and "Name: Ada" in section.parts[1].text
