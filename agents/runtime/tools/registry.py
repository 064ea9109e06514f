"""Compile an agent's tool roster from its declaration node.

Declared tool names map to tools; a tier's tool is compiled in only when the tier is on for the
agent (core_memory needs core_enabled, archive_search and archive_read need archive_enabled;
archive_read comes with archive_search); ``subagent`` only
when the node declares subagents; ``knowledge_base`` (the run scratchpad) whenever the node
takes part in a multi-agent run. Supplements are name-merged: a name already present is kept.
"""

from __future__ import annotations

from typing import Any

from agents.runtime.supplements import supplement_tools
from agents.runtime.tools.base import Tool, ToolRoster
from agents.runtime.tools.history_tools import ArchiveReadTool, ArchiveSearchTool, PrunedLookupTool
from agents.runtime.tools.memory_tools import CoreMemoryTool
from agents.runtime.tools.scratchpad import GraphKnowledgeBaseTool
from agents.runtime.tools.subagent import SpawnSubagentTool
from agents.runtime.tools.todo import TodoTool


def _declared_tool(name: str, node: Any) -> Tool | None:
    config = node.memory_config
    if name == "core_memory":
        return CoreMemoryTool() if config.core_enabled else None
    if name == "archive_search":
        return ArchiveSearchTool() if config.archive_enabled else None
    if name == "archive_read":
        return ArchiveReadTool() if config.archive_enabled else None
    if name == "pruned_lookup":
        return PrunedLookupTool()
    if name == "todo":
        return TodoTool()
    if name == "subagent":
        if not node.subagents:
            return None
        return SpawnSubagentTool({child.name: child.description for child in node.subagents})
    return None  # e.g. "experience": supplied by its supplement, below


def compile_roster(node: Any, *, in_multi_agent_run: bool) -> ToolRoster:
    """The tools ``node`` may call, in declaration order, supplements merged by name."""
    roster = ToolRoster()
    for name in node.tools:
        tool = _declared_tool(name, node)
        if tool is not None and tool.name not in roster.tools:
            roster.tools[tool.name] = tool
    if ArchiveSearchTool.name in roster.tools:  # a search hands out handles: reading them comes with it
        roster.tools.setdefault(ArchiveReadTool.name, ArchiveReadTool())
    for tool in supplement_tools(node):  # none on a subagent
        roster.tools.setdefault(tool.name, tool)
    if in_multi_agent_run:
        roster.tools.setdefault(GraphKnowledgeBaseTool.name, GraphKnowledgeBaseTool())
    return roster
