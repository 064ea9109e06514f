"""Schema validation: a composed YAML node tree -> a ``Declaration`` plus every problem found.

The walk never stops at the first problem: each node is checked and the walk goes on, so a
user sees everything wrong with the file at once. Typing rules live in
``agents.declarations.readers``.
"""

from __future__ import annotations

from yaml.nodes import MappingNode, Node, ScalarNode

from agents.declarations.nodes import (
    AGENT_KEYS,
    AGENT_NAME_RE,
    BACKENDS,
    DEFAULT_BACKEND,
    KNOWN_SUPPLEMENTS,
    KNOWN_TOOLS,
    LONG_TERM_TOOLS,
    MAIN_AGENT_ONLY_TOOLS,
    MAIN_MEMORY_KEYS,
    MEMORY_TOGGLES,
    MODEL_KEYS,
    PERSISTENCE_KEYS,
    PROVIDERS,
    ROOT_KEYS,
    SUBAGENT_MEMORY_KEYS,
    AgentNode,
    Declaration,
    ModelSettings,
    Persistence,
)
from agents.declarations.problems import DeclarationProblem, ProblemCode
from agents.declarations.readers import SKIP, NodeReader
from agents.declarations.source import Path, format_path
from memory.config import MAIN_AGENT_PRESET, SUBAGENT_PRESET, InvalidMemoryConfig, MemoryConfig

_MIN_CONTEXT_WINDOW = 256
_INT_MINIMUMS = {
    "compression_threshold": 1,
    "keep_tokens": 0,
    "pruned_budget_tokens": 0,
    "archive_budget_tokens": 0,
    "context_window": _MIN_CONTEXT_WINDOW,
}


def build_declaration(
    root: Node, *, source: str = "", sha256: str = ""
) -> tuple[Declaration | None, list[DeclarationProblem]]:
    """Validate a composed tree. Returns the declaration only if no problem was found."""
    walker = _Walker()
    declaration = walker.root(root, source=source, sha256=sha256)
    return (declaration if not walker.problems else None), walker.problems


class _Walker(NodeReader):
    """Walks the declaration's structure: root, persistence, model, the agent tree."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, tuple[int, str]] = {}  # agent name -> (line, path) of first use

    def root(self, node: Node, *, source: str, sha256: str) -> Declaration | None:
        entries = self.mapping(node, (), allowed=ROOT_KEYS, what="the declaration")
        if entries is SKIP:
            return None
        persistence = Persistence()
        if "persistence" in entries:
            block = self.mapping(
                entries["persistence"][1], ("persistence",), allowed=PERSISTENCE_KEYS, what="persistence"
            )
            if block is not SKIP and "backend" in block:
                backend = self.choice(block["backend"][1], ("persistence", "backend"), BACKENDS)
                persistence = Persistence(backend=backend if backend is not SKIP else DEFAULT_BACKEND)
        model = (
            self.model_block(entries["model"][1], ("model",), base=ModelSettings())
            if "model" in entries
            else ModelSettings()
        )
        if "agents" not in entries:
            self.problems.append(
                DeclarationProblem(
                    ProblemCode.MISSING_KEY,
                    "agents",
                    node.start_mark.line + 1,
                    "the declaration has no `agents:` mapping; at least one main agent is required.",
                    column=1,
                )
            )
            return None
        agents_node = entries["agents"][1]
        agents = self.mapping(agents_node, ("agents",), allowed=None, what="agents")
        if agents is SKIP:
            return None
        if not agents and not (isinstance(agents_node, MappingNode) and agents_node.value):
            self.add(
                ProblemCode.INVALID_VALUE,
                ("agents",),
                entries["agents"][0],
                "declares no agents; add at least one main agent.",
            )
            return None
        roots = [
            self.agent(key, value, ("agents",), depth=0, parent=None, model=model) for key, value in agents.values()
        ]
        if roots and all(root is not None and not root.chat for root in roots):
            self.add(
                ProblemCode.INVALID_VALUE,
                ("agents",),
                entries["agents"][0],
                "every main agent has chat: false, so nobody could start a conversation.",
                hint="Remove chat: false from the agent people should talk to.",
            )
        return Declaration(
            persistence=persistence,
            model=model if isinstance(model, ModelSettings) else ModelSettings(),
            agents=tuple(r for r in roots if r is not None),
            source=source,
            sha256=sha256,
        )

    def model_block(self, node: Node, path: Path, *, base: ModelSettings) -> ModelSettings | None:
        """``base`` with the block's keys applied; ``None`` when any of them is invalid."""
        block = self.mapping(node, path, allowed=MODEL_KEYS, what="model")
        if block is SKIP:
            return None
        values = {"provider": base.provider, "name": base.name, "context_window": base.context_window}
        ok = True
        for key, (_key_node, value_node) in block.items():
            if key == "provider":
                value = self.choice(value_node, (*path, key), PROVIDERS)
            elif key == "name":
                value = self.string(value_node, (*path, key), required=True)
            else:
                value = self.integer(value_node, (*path, key), minimum=_INT_MINIMUMS[key])
            if value is SKIP:
                ok = False
            else:
                values[key] = value
        return ModelSettings(**values) if ok else None

    def agent(
        self,
        key: ScalarNode,
        node: Node,
        parent_path: Path,
        *,
        depth: int,
        parent: str | None,
        model: ModelSettings | None,
    ) -> AgentNode | None:
        name = key.value
        path = (*parent_path, name)
        valid = True
        if not AGENT_NAME_RE.fullmatch(name) or name in (".", ".."):
            self.add(
                ProblemCode.INVALID_VALUE,
                path,
                key,
                f"agent name {name!r} is not a valid id.",
                hint="Use letters, digits, '.', '_' or '-' (at most 128), starting with a letter or digit.",
            )
            valid = False
        if name in self.names:
            first_line, first_path = self.names[name]
            self.add(
                ProblemCode.DUPLICATE_AGENT,
                path,
                key,
                f"agent name {name!r} is already used by {first_path} (line {first_line}); every agent needs a "
                "unique name, since it keys the agent's memory.",
            )
            valid = False
        else:
            self.names[name] = (key.start_mark.line + 1, format_path(path))
        entries = self.mapping(node, path, allowed=AGENT_KEYS, what=f"agent {name!r}")
        if entries is SKIP:
            return None
        text = {
            f: self.string(entries[f][1], (*path, f)) if f in entries else "" for f in ("description", "instructions")
        }
        valid &= all(v is not SKIP for v in text.values())
        tools = self.tools(entries, path, depth)
        supplements = self.supplements(entries, path, depth)
        if "model" in entries and model is not None:
            model = self.model_block(entries["model"][1], (*path, "model"), base=model)
        overrides = self.memory(entries, path, depth)
        chat = self.chat_flag(entries, path, depth)
        children = []
        if "subagents" in entries:
            subs = self.mapping(entries["subagents"][1], (*path, "subagents"), allowed=None, what="subagents")
            if subs is not SKIP:
                for sub_key, sub_node in subs.values():
                    child = self.agent(
                        sub_key, sub_node, (*path, "subagents"), depth=depth + 1, parent=name, model=model
                    )
                    children.append(child)
        if not valid or SKIP in (tools, supplements, overrides, chat) or model is None or None in children:
            return None
        config = self.memory_config(entries, path, key, depth, overrides, supplements, model)
        if config is None:
            return None
        return AgentNode(
            name=name,
            path=tuple(str(p) for p in path),
            line=key.start_mark.line + 1,
            depth=depth,
            parent=parent,
            description=text["description"].strip(),
            instructions=text["instructions"],
            tools=tools,
            tool_supplements=supplements,
            memory_overrides=tuple(overrides),
            model=model,
            memory_config=config,
            subagents=tuple(children),
            chat=chat,
        )

    def chat_flag(self, entries: dict, path: Path, depth: int) -> bool | object:
        """``chat:`` (main agents only): false keeps the agent out of the chat pages."""
        if "chat" not in entries:
            return True
        key_node, value_node = entries["chat"]
        if depth > 0:
            self.add(
                ProblemCode.INVALID_VALUE,
                (*path, "chat"),
                key_node,
                "chat applies to main agents only: a subagent is never offered for chat.",
                hint="Remove it from the subagent.",
            )
            return SKIP
        return self.boolean(value_node, (*path, "chat"))

    def tools(self, entries: dict, path: Path, depth: int) -> tuple | object:
        if "tools" not in entries:
            return ()
        items = self.name_list(
            entries["tools"][1], (*path, "tools"), known=KNOWN_TOOLS, code=ProblemCode.UNKNOWN_TOOL, what="tool"
        )
        if items is SKIP:
            return SKIP
        ok = True
        if depth > 0:
            for index, (tool, item) in enumerate(items):
                if tool in MAIN_AGENT_ONLY_TOOLS:
                    self.add(
                        ProblemCode.SUBAGENT_SUPPLEMENT,
                        (*path, "tools", index),
                        item,
                        f"the {tool!r} tool is for main agents only; subagents carry no long-term layers.",
                    )
                    ok = False
                elif tool in LONG_TERM_TOOLS:
                    self.add(
                        ProblemCode.SUBAGENT_LONG_TERM_TOOL,
                        (*path, "tools", index),
                        item,
                        f"the {tool!r} tool can never run on a subagent: subagents have no {LONG_TERM_TOOLS[tool]}.",
                        hint="Remove it from the subagent (pruned_lookup and todo work there); the main agent keeps it.",
                    )
                    ok = False
        return tuple(tool for tool, _ in items) if ok else SKIP

    def supplements(self, entries: dict, path: Path, depth: int) -> tuple | object:
        if "tool_supplements" not in entries:
            return ()
        key_node, value_node = entries["tool_supplements"]
        if depth > 0:
            self.add(
                ProblemCode.SUBAGENT_SUPPLEMENT,
                (*path, "tool_supplements"),
                key_node,
                "tool_supplements are for main agents only (experience is a main-agent layer).",
                hint="Move the supplement to the main agent, or remove it.",
            )
            return SKIP
        items = self.name_list(
            value_node,
            (*path, "tool_supplements"),
            known=KNOWN_SUPPLEMENTS,
            code=ProblemCode.UNKNOWN_SUPPLEMENT,
            what="tool supplement",
        )
        return tuple(name for name, _ in items) if items is not SKIP else SKIP

    def memory(self, entries: dict, path: Path, depth: int) -> list | object:
        """The memory block's overrides as ``[(key, value), ...]`` in file order."""
        if "memory" not in entries:
            return []
        mpath = (*path, "memory")
        block = self.mapping(entries["memory"][1], mpath, allowed=None, what="memory")
        if block is SKIP:
            return SKIP
        allowed = MAIN_MEMORY_KEYS if depth == 0 else SUBAGENT_MEMORY_KEYS
        overrides: list[tuple[str, bool | int]] = []
        unreadable: set[str] = set()
        ok = True
        for key, (key_node, value_node) in block.items():
            if key not in allowed:
                ok = False
                if depth > 0 and key in MAIN_MEMORY_KEYS:
                    layer = "a long-term layer" if key in MEMORY_TOGGLES else "a main-agent setting"
                    self.add(
                        ProblemCode.SUBAGENT_MEMORY,
                        (*mpath, key),
                        key_node,
                        f"{key} is {layer}; a subagent's memory block accepts only compression_threshold.",
                        hint="Subagents use the subagent_memory preset: session compression, the pruned catalog and "
                        "governance. Remove the key, or set it on the main agent.",
                    )
                else:
                    self.unknown_key(mpath, key_node, allowed, "memory")
                continue
            if key in MEMORY_TOGGLES:
                value = self.boolean(value_node, (*mpath, key))
            else:
                value = self.integer(value_node, (*mpath, key), minimum=_INT_MINIMUMS[key])
            if value is SKIP:
                ok = False
                unreadable.add(key)
            else:
                overrides.append((key, value))
        values = dict(overrides)
        # Reported even when other keys are broken, unless the archive switch itself is unreadable.
        if (
            values.get("core_enabled") is True
            and values.get("archive_enabled") is not True
            and "archive_enabled" not in unreadable
        ):
            self.add(
                ProblemCode.CORE_WITHOUT_ARCHIVE,
                (*mpath, "core_enabled"),
                block["core_enabled"][0],
                "core_enabled requires archive_enabled: core memory is fed from the archive by the Dream Engine.",
                hint="Set archive_enabled: true as well, or turn core_enabled off.",
            )
            ok = False
        return overrides if ok else SKIP

    def memory_config(
        self,
        entries: dict,
        path: Path,
        key: ScalarNode,
        depth: int,
        overrides: list,
        supplements: tuple,
        model: ModelSettings,
    ) -> MemoryConfig | None:
        values = dict(overrides)
        try:
            config = MemoryConfig(
                preset=MAIN_AGENT_PRESET if depth == 0 else SUBAGENT_PRESET,
                context_window=model.context_window,
                experience_enabled="experience" in supplements,
                **values,
            )
        except InvalidMemoryConfig as exc:
            message = str(exc)
            culprit = next((k for k in ("keep_tokens", "compression_threshold") if k in values and k in message), None)
            if culprit is not None:
                where, node = (*path, "memory", culprit), entries["memory"][1]
                node = next(k for k, _ in node.value if k.value == culprit)
            elif "memory" in entries:
                where, node = (*path, "memory"), entries["memory"][0]
            else:
                where, node = path, key
            self.add(
                ProblemCode.MEMORY_CONFIG,
                where,
                node,
                f"{message}.",
                hint="Lower the threshold, or raise model.context_window.",
            )
            return None
        problems = config.budget_problems()
        for problem in problems:
            self.add(
                ProblemCode.MEMORY_CONFIG,
                *self._blame(entries, path, key, problem.keys, values),
                f"{problem.message}.",
                hint=problem.hint
                or f"Lower {' or '.join(problem.keys)} in the memory block, or raise model.context_window.",
            )
        return None if problems else config

    @staticmethod
    def _blame(entries: dict, path: Path, key: ScalarNode, keys: tuple[str, ...], values: dict) -> tuple[Path, Node]:
        """Where a budget problem points: the first of ``keys`` the memory block sets, else the
        block itself, else the agent (its budgets are all defaults sized by the window)."""
        culprit = next((k for k in keys if k in values), None)
        if culprit is not None:
            block = entries["memory"][1]
            return (*path, "memory", culprit), next(k for k, _ in block.value if k.value == culprit)
        if "memory" in entries:
            return (*path, "memory"), entries["memory"][0]
        return path, key
