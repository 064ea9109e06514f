"""The declaration model: typed nodes, presets by position, effective MemoryConfig, boot cache."""

from __future__ import annotations

import dataclasses

import pytest

from agents.declarations import (
    KNOWN_TOOLS,
    Declaration,
    InvalidDeclaration,
    ModelSettings,
    Persistence,
    ProblemCode,
    get_declaration,
    load_declaration,
    validate_text,
)
from memory.config import MAIN_AGENT_PRESET, SUBAGENT_PRESET, MemoryConfig
from tests.agents.conftest import CORPUS, SHIPPED_BOT_YML


@pytest.fixture
def shipped() -> Declaration:
    return load_declaration(SHIPPED_BOT_YML)


@pytest.fixture
def rich() -> Declaration:
    return load_declaration(CORPUS / "valid" / "rich.yml")


def test_shipped_declaration_tree(shipped):
    assert [a.name for a in shipped.agents] == ["default", "reviewer"]
    assert [n.name for n in shipped.walk()] == ["default", "researcher", "reviewer"]
    assert shipped.main_agents() == shipped.agents
    # The reviewer works behind the scenes: a main agent (preset, experience) nobody chats with.
    assert [a.name for a in shipped.chat_agents()] == ["default"]
    assert not shipped.find("reviewer").for_chat and shipped.find("default").for_chat
    assert not shipped.find("researcher").for_chat  # subagents never are
    assert shipped.persistence == Persistence(backend="sqlite")
    assert shipped.model == ModelSettings(provider="offline", name="modex-offline", context_window=16384)
    researcher = shipped.find("researcher")
    assert researcher.parent == "default" and researcher.depth == 1 and not researcher.is_main
    assert researcher.yaml_path == "agents.default.subagents.researcher"
    assert shipped.find("nobody") is None


def test_shipped_memory_configs_are_preset_plus_override(shipped):
    default, researcher, reviewer = (shipped.find(n) for n in ("default", "researcher", "reviewer"))
    assert researcher.memory_config == MemoryConfig(
        preset=SUBAGENT_PRESET, context_window=16384, compression_threshold=6000
    )
    # No memory block: the preset alone, long-term layers off; experience from the supplement.
    assert reviewer.memory_config == MemoryConfig(preset=MAIN_AGENT_PRESET, experience_enabled=True)
    assert not MemoryConfig(preset=MAIN_AGENT_PRESET).archive_enabled and not MemoryConfig(preset=MAIN_AGENT_PRESET).core_enabled
    # The shipped file switches both long-term layers on for the agent people talk to, so a fresh
    # install remembers across conversations; the preset itself keeps them off.
    assert default.memory_config.archive_enabled and default.memory_config.core_enabled
    assert default.overrides == {"archive_enabled": True, "core_enabled": True, "compression_threshold": 12000}
    assert default.memory_config == dataclasses.replace(
        MemoryConfig(preset=MAIN_AGENT_PRESET, context_window=16384, compression_threshold=12000, experience_enabled=True),
        archive_enabled=True, core_enabled=True,
    )


def test_supplement_tools_are_name_merged(shipped):
    assert shipped.find("reviewer").tools == ("pruned_lookup",)
    assert shipped.find("reviewer").effective_tools == ("pruned_lookup", "experience")
    assert shipped.find("default").effective_tools[-1] == "experience"
    assert shipped.find("researcher").effective_tools == ("pruned_lookup",)
    assert set(KNOWN_TOOLS) >= set(shipped.find("default").effective_tools)


def test_rich_declaration_models_inherit_down_the_tree(rich):
    assert rich.persistence.backend == "file"
    assert rich.model == ModelSettings(provider="openai", name="gpt-4o-mini", context_window=32000)
    summarizer, fetcher, scribe = rich.find("summarizer"), rich.find("fetcher"), rich.find("scribe")
    assert summarizer.model == ModelSettings(provider="openai", name="small-model", context_window=8192)
    assert summarizer.memory_config.context_window == 8192 and summarizer.memory_config.threshold == 6144
    assert fetcher.depth == 2 and fetcher.preset == SUBAGENT_PRESET and fetcher.parent == "researcher"
    assert fetcher.model == rich.model
    assert scribe.model.context_window == 8192 and scribe.instructions == "Write things down."
    default = rich.find("default")
    assert default.description == "General assistant with layered memory."
    assert default.instructions == "You are a helpful assistant.\n\nKeep answers short.\n"
    assert default.memory_config.keep == 4000 and default.memory_config.threshold == 12000
    assert rich.find("planner").overrides == {"archive_enabled": False}


def test_nodes_are_frozen(shipped):
    with pytest.raises(dataclasses.FrozenInstanceError):
        shipped.agents[0].name = "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        shipped.persistence = Persistence("file")


def test_defaults_without_persistence_or_model():
    declaration, problems = validate_text("agents:\n  a:\n", source="t")
    assert problems == []
    assert declaration.persistence.backend == "sqlite"
    assert declaration.model == ModelSettings()
    assert declaration.agents[0].memory_config == MemoryConfig()


def test_validate_text_accepts_a_bom():
    declaration, problems = validate_text("\ufeffagents:\n  a: {}\n", source="t")
    assert problems == [] and declaration.agents[0].name == "a"


def test_load_declaration_raises_with_every_problem(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("agents:\n  a:\n    tools: [nope]\n    memory: {core_enabled: true}\n")
    with pytest.raises(InvalidDeclaration) as info:
        load_declaration(path)
    codes = [p.code for p in info.value.problems]
    assert codes == [ProblemCode.UNKNOWN_TOOL, ProblemCode.CORE_WITHOUT_ARCHIVE]
    assert "bad.yml:3: agents.a.tools[0]: unknown tool 'nope'" in str(info.value)


def test_get_declaration_loads_once_and_keeps_what_it_booted_with(bot_file):
    first = get_declaration()
    assert first.find("default") is not None
    bot_file.write_text(bot_file.read_text().replace("default:", "renamed:"))
    assert get_declaration() is first  # the process keeps its boot declaration


def test_get_declaration_raises_on_an_invalid_file(bot_file):
    bot_file.write_text("agents: []\n")
    with pytest.raises(InvalidDeclaration):
        get_declaration()


def test_declaration_records_source_and_digest(bot_file):
    import hashlib

    declaration = load_declaration(bot_file)
    assert declaration.sha256 == hashlib.sha256(bot_file.read_bytes()).hexdigest()
    assert declaration.source.endswith("bot.yml")


def test_chat_false_keeps_a_main_agent_out_of_chat():
    text = """
agents:
  helper:
    instructions: Talk to people.
  auditor:
    chat: false
    instructions: Review runs.
"""
    declaration, problems = validate_text(text, source="t.yml")
    assert problems == []
    assert [a.name for a in declaration.main_agents()] == ["helper", "auditor"]
    assert [a.name for a in declaration.chat_agents()] == ["helper"]


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        ("agents:\n  a:\n    chat: false\n", "agents", "nobody could start a conversation"),
        ("agents:\n  a:\n    chat: maybe\n", "agents.a.chat", ""),
        ("agents:\n  a:\n    subagents:\n      b:\n        chat: false\n", "agents.a.subagents.b.chat",
         "main agents only"),
    ],
)
def test_chat_flag_problems_name_their_place(text, path, words):
    declaration, problems = validate_text(text, source="t.yml")
    assert declaration is None
    assert [p.path for p in problems] == [path]
    assert words in problems[0].message
