"""The line ledger (where each line came from, what people removed), versions kept whole for
restoring, and "forget everything". Every backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory import core_memory
from memory.config import MemoryConfig
from memory.core_lines import LineLedger, LineSource, attribute_key, normalize_line
from memory.core_memory import MEMORY, USER, CoreMemory, CoreMemoryEditError, Origin

ON = MemoryConfig(archive_enabled=True, core_enabled=True)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def core(bundle):
    return CoreMemory(kv=bundle.kv, config=ON, agent="default", user="42", clock=Clock())


def test_each_line_keeps_who_wrote_it_from_which_conversation_and_when(core):
    said = T0 - timedelta(days=30)
    core.append(file=USER, text="Name: Sam", source="agent", origin=Origin(session="session:c1"))
    core.append(file=USER, text="Lives in Porto", source="dream",
                origin=Origin(session="session:c0", document="doc-9", said_at=said))
    core.replace(file=USER, old="Name: Sam", new="Name: Samantha", source="user:42")
    ledger = core.ledger(file=USER)
    name, place = ledger.source_of("Name: Samantha"), ledger.source_of("- lives in porto.")
    assert (name.by, name.session, name.said_at) == ("user:42", "", None)
    assert (place.by, place.session, place.document, place.said_at) == ("dream", "session:c0", "doc-9", said)
    assert place.as_of == said and name.as_of == name.at
    assert ledger.source_of("Name: Sam") is None  # a line gone has no source
    # the person's change is remembered as a removal of the old line, not of the attribute
    assert ledger.removed_since(file=USER, line="Name: Sam", said_at=said) is not None
    assert ledger.removed_since(file=USER, line="Name: Alex", said_at=said) is None


def test_a_person_removing_an_attribute_marks_it_and_a_later_statement_is_new(core):
    core.append(file=USER, text="Lives in Lisbon", source="agent")
    state = core.read(file=USER)
    core.rewrite(file=USER, text="", source="user:42", expected_version=state.version)
    ledger = core.ledger(file=USER)
    removed = ledger.removed_since(file=USER, line="Lives in Braga", said_at=T0)  # the attribute is gone
    assert removed is not None
    assert ledger.removed_since(file=USER, line="Lives in Braga", said_at=removed + timedelta(seconds=1)) is None


def test_lines_written_before_the_ledger_are_dated_by_the_files_last_write(bundle, core):
    from memory.scopes import UserScope

    item = bundle.kv.put(UserScope("42"), "USER.md", "Lives in Lisbon\n")  # an older Modex wrote it
    core.append(file=USER, text="Likes tea", source="agent")
    legacy = core.ledger(file=USER).source_of("Lives in Lisbon")
    assert legacy.by == "unknown" and legacy.at == item.updated_at


def test_history_keeps_whole_texts_and_a_version_can_be_restored(core):
    core.append(file=MEMORY, text="- one", source="agent")
    core.append(file=MEMORY, text="- two", source="dream")
    v3 = core.replace(file=MEMORY, old="- one", new="", source="user:42")
    assert [c.text for c in core.history(file=MEMORY)] == ["- one\n", "- one\n- two\n", "\n- two\n"]
    restored = core.restore(file=MEMORY, version=2, source="user:42", expected_version=v3.version)
    assert restored.text == "- one\n- two\n" and restored.version == 4
    assert core.history(file=MEMORY)[-1].action == "restore"
    with pytest.raises(CoreMemoryEditError, match="no longer kept"):
        core.restore(file=MEMORY, version=99, source="user:42", expected_version=4)


def test_old_whole_texts_age_out_within_the_budget(core, monkeypatch):
    monkeypatch.setattr(core_memory, "HISTORY_TEXT_CHARS", 40)
    for i in range(5):
        core.append(file=MEMORY, text=f"- fact number {i}", source="agent")
    texts = [c.text for c in core.history(file=MEMORY)]
    assert texts[-1] is not None and texts[0] is None
    assert sum(len(t) for t in texts[:-1] if t) <= 40  # the newest is always whole
    with pytest.raises(CoreMemoryEditError):
        core.restore(file=MEMORY, version=1, source="user:42", expected_version=5)


def test_forget_empties_the_file_and_keeps_older_statements_out(core):
    core.append(file=USER, text="Name: Sam\nLives in Porto", source="agent")
    state = core.forget(file=USER, source="user:42", expected_version=core.read(file=USER).version)
    assert state.text == "" and core.history(file=USER)[-1].action == "forget"
    ledger = core.ledger(file=USER)
    assert ledger.lines == {} and ledger.cleared_at is not None
    assert ledger.removed_since(file=USER, line="Likes jazz", said_at=T0) is not None
    assert ledger.removed_since(file=USER, line="Likes jazz", said_at=ledger.cleared_at + timedelta(1)) is None


def test_the_ledger_survives_damage_and_round_trips():
    assert LineLedger.from_json("{broken") == LineLedger() and LineLedger.from_json(None) == LineLedger()
    ledger = LineLedger({"name: sam": LineSource("dream", T0, T0 - timedelta(1), "session:s", "d")},
                        {"attr:lives in": T0}, T0)
    assert LineLedger.from_json(ledger.to_json()) == ledger
    assert LineLedger.from_json('{"lines": {"x": {"by": "agent"}}, "removed": {"y": "no date"}}') == LineLedger()


def test_a_line_keeps_the_message_it_rests_on_and_old_entries_still_read(bundle, core):
    said = T0 - timedelta(days=3)
    core.append(file=MEMORY, text="Works as a paramedic", source="dream",
                origin=Origin(session="session:c0", document="doc-1", said_at=said, seq=7))
    core.append(file=MEMORY, text="Likes tea", source="agent", origin=Origin(session="session:c1"))
    ledger = core.ledger(file=MEMORY)
    assert ledger.source_of("Works as a paramedic").seq == 7  # read back from the store
    assert ledger.source_of("Likes tea").seq is None  # an edit that rests on no one message
    assert '"seq": 7' in bundle.kv.get_value(core.scope(file=MEMORY), "MEMORY.md.lines")
    assert LineLedger.from_json(ledger.to_json()) == ledger
    # a ledger written before lines kept their message, and entries whose seq is damaged
    old = LineLedger.from_json(
        '{"lines": {"likes jazz": {"by": "dream", "at": "2026-01-01T00:00:00+00:00", "session": "session:c0",'
        ' "document": "doc-1"}, "a": {"by": "dream", "at": "2026-01-01T00:00:00+00:00", "seq": "7"},'
        ' "b": {"by": "dream", "at": "2026-01-01T00:00:00+00:00", "seq": -1},'
        ' "c": {"by": "dream", "at": "2026-01-01T00:00:00+00:00", "seq": true}}}')
    jazz = old.source_of("Likes jazz")
    assert (jazz.session, jazz.document, jazz.seq) == ("session:c0", "doc-1", None)
    assert [old.source_of(line).seq for line in "abc"] == [None, None, None]
    assert "seq" not in jazz.to_data()


def test_line_rules():
    assert normalize_line("  - Name:  Sam. ") == "name: sam"
    assert attribute_key(USER, "- Based in Porto") == attribute_key(USER, "Lives in Lisbon") == "lives in"
    assert attribute_key(USER, "Name: Sam") == "name" and attribute_key(MEMORY, "Name: Sam") is None
    assert attribute_key(USER, "Previously lived in Lisbon") is None
