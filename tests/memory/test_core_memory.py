"""Core memory: the three files, caps, compare-and-set, history and CORE_MEMORY_UPDATED."""

from __future__ import annotations

import pytest

from memory.config import MemoryConfig
from memory.core_memory import (
    CORE_FILES,
    MEMORY,
    SOUL,
    USER,
    CoreMemory,
    CoreMemoryConflict,
    CoreMemoryDisabled,
    CoreMemoryEditError,
    CoreMemoryFull,
    InvalidSource,
    UnknownCoreFile,
)
from memory.hooks import CoreMemoryUpdated, MemoryHookDispatcher, MemoryHookPoint
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import VersionConflict
from memory.tokens import count_text

ON = MemoryConfig(archive_enabled=True, core_enabled=True)


@pytest.fixture
def events():
    return []


@pytest.fixture
def hooks(events):
    dispatcher = MemoryHookDispatcher()
    dispatcher.register(MemoryHookPoint.CORE_MEMORY_UPDATED, events.append)
    return dispatcher


@pytest.fixture
def core(bundle, hooks):
    return CoreMemory(kv=bundle.kv, config=ON, agent="default", user="42", hooks=hooks)


def other(bundle, hooks, *, agent="default", user="42", **kwargs):
    return CoreMemory(kv=bundle.kv, config=ON, agent=agent, user=user, hooks=hooks, **kwargs)


# -- enabling, scopes, reads ------------------------------------------------------------------


def test_refuses_when_core_memory_is_off(bundle):
    with pytest.raises(CoreMemoryDisabled, match="core_enabled"):
        CoreMemory(kv=bundle.kv, config=MemoryConfig(), agent="default", user="42")
    with pytest.raises(CoreMemoryDisabled):
        CoreMemory(kv=bundle.kv, config=MemoryConfig(archive_enabled=True), agent="default", user="42")


def test_missing_files_read_empty_at_version_zero(core):
    for state in core.read_all():
        assert (state.text, state.version, state.tokens, state.exists) == ("", 0, 0, False)
    assert [s.file for s in core.read_all()] == list(CORE_FILES)


def test_files_live_under_their_scopes_and_keys(bundle, core):
    core.append(file=SOUL, text="I am Modex.", source="system")
    core.append(file=USER, text="Name: Ada", source="agent")
    core.append(file=MEMORY, text="- prefers metric units", source="agent")
    assert bundle.kv.get_value(AgentScope("default"), "SOUL.md") == "I am Modex.\n"
    assert bundle.kv.get_value(UserScope("42"), "USER.md") == "Name: Ada\n"
    facts = CompositeScope(AgentScope("default"), UserScope("42"))
    assert bundle.kv.get_value(facts, "MEMORY.md") == "- prefers metric units\n"


def test_facts_are_per_user_within_a_shared_agent(bundle, core, hooks):
    core.append(file=MEMORY, text="- user 42 fact", source="agent")
    core.append(file=SOUL, text="shared identity", source="admin:1")
    someone_else = other(bundle, hooks, user="43")
    assert someone_else.read(file=MEMORY).text == ""
    assert someone_else.read(file=SOUL).text == "shared identity\n"
    another_agent = other(bundle, hooks, agent="reviewer")
    assert another_agent.read(file=MEMORY).text == ""
    assert another_agent.read(file=SOUL).text == ""


def test_file_backend_stores_real_markdown_files(bundle, core, tmp_path):
    if bundle.backend != "file":
        pytest.skip("only the file backend has files")
    core.rewrite(file=MEMORY, text="# Facts\n\n- one\n", source="agent", expected_version=0)
    found = [p for p in tmp_path.rglob("MEMORY.md") if p.is_file()]
    assert found, "MEMORY.md should be a real file under the store's root"
    assert found[0].read_text(encoding="utf-8") == "# Facts\n\n- one\n"


# -- edits ------------------------------------------------------------------------------------


def test_append_adds_lines_and_dispatches(core, events):
    first = core.append(file=MEMORY, text="- one", source="agent")
    second = core.append(file=MEMORY, text="- two\n", source="dream")
    assert second.text == "- one\n- two\n"
    assert (first.version, second.version) == (1, 2)
    assert events == [
        CoreMemoryUpdated(scope=first.scope, file=MEMORY, version=1, source="agent"),
        CoreMemoryUpdated(scope=first.scope, file=MEMORY, version=2, source="dream"),
    ]


def test_append_to_text_without_final_newline_starts_a_new_line(core):
    core.rewrite(file=USER, text="Name: Ada", source="user:42", expected_version=0)
    assert core.append(file=USER, text="Role: engineer", source="agent").text == "Name: Ada\nRole: engineer\n"


def test_blank_append_is_refused(core, events):
    with pytest.raises(CoreMemoryEditError, match="empty"):
        core.append(file=MEMORY, text="  \n", source="agent")
    assert events == [] and core.read(file=MEMORY).version == 0


def test_replace_needs_exactly_one_occurrence(core, events):
    core.rewrite(file=MEMORY, text="- likes tea\n- tea at 5\n- lives in Oslo\n", source="agent", expected_version=0)
    events.clear()
    with pytest.raises(CoreMemoryEditError, match="occurs 2 times"):
        core.replace(file=MEMORY, old="tea", new="coffee", source="agent")
    with pytest.raises(CoreMemoryEditError, match="does not occur"):
        core.replace(file=MEMORY, old="Bergen", new="Paris", source="agent")
    with pytest.raises(CoreMemoryEditError, match="empty"):
        core.replace(file=MEMORY, old="", new="x", source="agent")
    assert events == [] and core.read(file=MEMORY).version == 1
    state = core.replace(file=MEMORY, old="- likes tea", new="- likes coffee", source="agent")
    assert state.text == "- likes coffee\n- tea at 5\n- lives in Oslo\n"
    removed = core.replace(file=MEMORY, old="- tea at 5\n", new="", source="user:42")
    assert removed.text == "- likes coffee\n- lives in Oslo\n"
    assert [e.version for e in events] == [2, 3]


def test_noop_edits_write_nothing(core, events):
    state = core.append(file=SOUL, text="calm", source="admin:1")
    assert core.rewrite(file=SOUL, text="calm\n", source="admin:1", expected_version=1) == state
    assert core.replace(file=SOUL, old="calm", new="calm", source="admin:1") == state
    assert len(events) == 1 and core.read(file=SOUL).version == 1


def test_control_characters_are_dropped_and_line_ends_made_lf_on_write(core):
    state = core.rewrite(file=MEMORY, text="- a\x00b\x01c\td\r\n", source="agent", expected_version=0)
    assert state.text == "- abc\td\n"
    assert core.replace(file=MEMORY, old="a\x00bc", new="x\x1b", source="agent").text == "- x\td\n"
    assert core.append(file=MEMORY, text="\x00- y", source="agent").text == "- x\td\n- y\n"
    # a browser's textarea sends CRLF; an old Mac editor CR: the file keeps LF only
    state = core.rewrite(file=USER, text="Name: Ada\r\nLikes tea\rLives in Oslo\r\n", source="user:42",
                         expected_version=0)
    assert state.text == "Name: Ada\nLikes tea\nLives in Oslo\n" and "\r" not in core.history(file=USER)[-1].text


def test_unknown_file_and_source_are_refused(core):
    with pytest.raises(UnknownCoreFile):
        core.read(file="NOTES.md")
    for source in ("", "someone", "user:", "user:../x", "dream "):
        with pytest.raises(InvalidSource):
            core.append(file=MEMORY, text="x", source=source)
    core.append(file=MEMORY, text="ok", source="user:alice.b")


# -- compare-and-set --------------------------------------------------------------------------


def test_two_writers_from_the_same_version_one_conflicts_nothing_lost(bundle, core, hooks, events):
    core.rewrite(file=MEMORY, text="- likes tea\n- lives in Oslo\n", source="agent", expected_version=0)
    version = core.read(file=MEMORY).version
    agent_side = core
    dream_side = other(bundle, hooks)

    agent_side.replace(file=MEMORY, old="likes tea", new="likes coffee", source="agent", expected_version=version)
    with pytest.raises(CoreMemoryConflict) as caught:
        dream_side.replace(
            file=MEMORY, old="lives in Oslo", new="lives in Bergen", source="dream", expected_version=version
        )
    assert (caught.value.expected, caught.value.actual) == (version, version + 1)
    assert "Read it again" in str(caught.value)
    assert core.read(file=MEMORY).text == "- likes coffee\n- lives in Oslo\n"  # the winner's edit is intact

    # The loser re-reads and re-applies: both edits end up in the file.
    fresh = dream_side.read(file=MEMORY)
    dream_side.replace(
        file=MEMORY, old="lives in Oslo", new="lives in Bergen", source="dream", expected_version=fresh.version
    )
    assert core.read(file=MEMORY).text == "- likes coffee\n- lives in Bergen\n"
    assert [e.source for e in events] == ["agent", "agent", "dream"]


def test_two_first_writers_of_a_new_file_cannot_both_win(bundle, core, hooks):
    core.rewrite(file=SOUL, text="first", source="admin:1", expected_version=0)
    with pytest.raises(CoreMemoryConflict):
        other(bundle, hooks).rewrite(file=SOUL, text="second", source="admin:2", expected_version=0)
    assert core.read(file=SOUL).text == "first"


def test_rewrite_from_a_stale_version_conflicts(core):
    core.rewrite(file=USER, text="v1", source="agent", expected_version=0)
    core.rewrite(file=USER, text="v2", source="user:42", expected_version=1)
    with pytest.raises(CoreMemoryConflict):
        core.rewrite(file=USER, text="stale overwrite", source="agent", expected_version=1)
    with pytest.raises(CoreMemoryConflict):
        core.rewrite(file=USER, text="thinks it is new", source="agent", expected_version=0)
    assert core.read(file=USER).text == "v2"


class _Interleaving:
    """A KVStore proxy that lets another writer slip in just before the first few commits."""

    def __init__(self, kv, meddle, times):
        self._kv, self._meddle, self._times = kv, meddle, times

    def __getattr__(self, name):
        return getattr(self._kv, name)

    def commit(self, writes, **kwargs):
        if self._times:
            self._times -= 1
            self._meddle()
        return self._kv.commit(writes, **kwargs)


def test_append_retries_its_compare_and_set(bundle, hooks):
    rival = other(bundle, hooks)
    counter = iter(range(100))
    kv = _Interleaving(bundle.kv, lambda: rival.append(file=MEMORY, text=f"- rival {next(counter)}", source="dream"), 2)
    core = CoreMemory(kv=kv, config=ON, agent="default", user="42", hooks=hooks)
    core.append(file=MEMORY, text="- mine", source="agent")
    assert core.read(file=MEMORY).text == "- rival 0\n- rival 1\n- mine\n"


def test_replace_does_not_retry_over_a_concurrent_change(bundle, hooks):
    rival = other(bundle, hooks)
    rival.rewrite(file=MEMORY, text="- a\n", source="agent", expected_version=0)
    kv = _Interleaving(bundle.kv, lambda: rival.append(file=MEMORY, text="- b", source="dream"), 1)
    core = CoreMemory(kv=kv, config=ON, agent="default", user="42", hooks=hooks)
    with pytest.raises(CoreMemoryConflict):
        core.replace(file=MEMORY, old="- a", new="- A", source="agent")
    assert core.read(file=MEMORY).text == "- a\n- b\n"


def test_store_conflicts_never_escape_as_store_errors(bundle, hooks):
    core = other(bundle, hooks)
    core.rewrite(file=SOUL, text="x", source="system", expected_version=0)
    try:
        core.rewrite(file=SOUL, text="y", source="system", expected_version=5)
    except VersionConflict:  # pragma: no cover - the assertion below explains
        pytest.fail("a store VersionConflict leaked out of CoreMemory")
    except CoreMemoryConflict:
        pass


# -- caps -------------------------------------------------------------------------------------


def _text_of(tokens):
    text = " word" * tokens
    assert count_text(text) == tokens
    return text


def test_a_file_exactly_at_its_cap_is_accepted(bundle, hooks):
    core = other(bundle, hooks, caps={SOUL: 50})
    state = core.rewrite(file=SOUL, text=_text_of(50), source="system", expected_version=0)
    assert state.tokens == 50 == state.cap


def test_over_the_cap_is_refused_and_nothing_is_written(bundle, hooks, events):
    core = other(bundle, hooks, caps={MEMORY: 50})
    core.rewrite(file=MEMORY, text=_text_of(45), source="agent", expected_version=0)
    events.clear()
    with pytest.raises(CoreMemoryFull) as caught:
        core.append(file=MEMORY, text=_text_of(20), source="agent")
    error = caught.value
    assert (error.file, error.cap) == (MEMORY, 50) and error.tokens > 50
    message = str(error)
    assert (
        "MEMORY.md" in message and "50" in message and str(error.tokens) in message and "nothing was written" in message
    )
    with pytest.raises(CoreMemoryFull):
        core.rewrite(file=MEMORY, text=_text_of(51), source="agent", expected_version=1)
    assert core.read(file=MEMORY).version == 1 and events == []
    assert len(core.history(file=MEMORY)) == 1


def test_default_caps():
    from memory.core_memory import DEFAULT_CAPS

    assert DEFAULT_CAPS == {SOUL: 1500, USER: 1500, MEMORY: 3000}


def test_a_file_over_a_lowered_cap_can_shrink_but_not_grow(bundle, hooks):
    other(bundle, hooks).rewrite(file=USER, text=_text_of(100), source="agent", expected_version=0)
    core = other(bundle, hooks, caps={USER: 50})
    with pytest.raises(CoreMemoryFull):
        core.append(file=USER, text="more", source="agent")
    state = core.rewrite(file=USER, text=_text_of(80), source="agent", expected_version=1)
    assert state.tokens == 80


# -- history ----------------------------------------------------------------------------------


def test_history_records_who_changed_what_and_is_capped(bundle, hooks):
    core = other(bundle, hooks, history_limit=3)
    core.append(file=MEMORY, text="- one", source="agent")
    core.append(file=MEMORY, text="- two", source="dream")
    core.replace(file=MEMORY, old="two", new="2", source="user:42")
    core.rewrite(file=MEMORY, text="- fresh start\n", source="agent", expected_version=3)
    history = core.history(file=MEMORY)
    assert [(c.version, c.source, c.action) for c in history] == [
        (2, "dream", "append"),
        (3, "user:42", "replace"),
        (4, "agent", "rewrite"),
    ]
    assert history[1].detail == "two → 2"
    assert history[-1].tokens == count_text("- fresh start\n")
    assert all(c.at.tzinfo is not None for c in history)
    assert core.history(file=SOUL) == []


@pytest.mark.django_db(transaction=True, databases="__all__")  # threaded_bundle may be on 'pg'
def test_concurrent_appends_from_threads_all_land(threaded_bundle):
    import threading

    from django.db import connections

    errors = []

    def writer(n):
        try:
            core = CoreMemory(kv=threaded_bundle.kv, config=ON, agent="default", user="42")
            for i in range(4):
                core.append(file=MEMORY, text=f"- writer {n} fact {i}", source="agent")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    lines = CoreMemory(kv=threaded_bundle.kv, config=ON, agent="default", user="42").read(file=MEMORY).text.splitlines()
    assert sorted(lines) == sorted(f"- writer {n} fact {i}" for n in range(4) for i in range(4))
