"""Experience, the tool supplement: EXPERIENCE.md lessons, the tool, the section, the hook.

``tool_supplements: [experience]`` on a main agent does three things, all here:

* ``ExperienceTool`` (``experience``: list, read) is name-merged into the compiled roster
  (``agents.runtime.tools.registry``);
* ``ExperienceProvider`` renders ``<available_experiences>`` (name and description of each
  lesson, within a budget) as a supplement section of the context (``supplements_for``);
* the ``experience_review`` AFTER_GRAPH hook (``agents.experience.hook``, installed for these
  agents only) queues the ExperienceReviewAgent (``agents.experience.review``) when a run finishes.

``register`` (called at app ready) makes the supplement known to ``agents.runtime.supplements``.

Subagents never get any of it (``memory_config.is_subagent``), and neither do agents without
the supplement. Storage is ``agents.experience.store``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.experience.store import (
    ExperienceError,
    ExperienceExists,
    ExperienceFile,
    ExperienceNotFound,
    ExperienceStore,
)
from agents.runtime.supplements import Supplement, register_supplement
from agents.runtime.tools.base import Tool, ToolError
from memory.assembly.base import AssemblyContext, MemoryProvider, RenderMemo, Section
from memory.assembly.xml import element, wrap
from memory.stores.base import KVStore
from memory.tokens import count_text

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext

logger = logging.getLogger("agents.experience.supplement")

SUPPLEMENT = "experience"
TAG = "available_experiences"
SECTION_NAME = "experiences"
DEFAULT_BUDGET_TOKENS = 600

__all__ = [
    "DEFAULT_BUDGET_TOKENS",
    "SUPPLEMENT",
    "TAG",
    "ExperienceError",
    "ExperienceExists",
    "ExperienceFile",
    "ExperienceNotFound",
    "ExperienceProvider",
    "ExperienceStore",
    "ExperienceTool",
    "experience_enabled",
    "register",
    "render_listing",
    "supplements_for",
]


def experience_enabled(agent: Any) -> bool:
    """True for a main agent that declares ``tool_supplements: [experience]``."""
    config = agent.memory_config
    return (
        not config.is_subagent
        and SUPPLEMENT in tuple(getattr(agent, "tool_supplements", ()) or ())
        and bool(config.experience_enabled)
    )


def render_listing(files: list[ExperienceFile]) -> str:
    """One line per lesson: ``- <slug>: <name> — <description> (updated <date>)``."""
    if not files:
        return "No lessons recorded yet."
    return "\n".join(f"- {f.slug}: {f.name} — {f.description} (updated {f.updated_at:%Y-%m-%d})" for f in files)


def store_for(ctx: ToolContext, agent: str | None = None) -> ExperienceStore:
    """The lessons of the run's agent for the run's user (lessons are per user)."""
    return ExperienceStore(kv=ctx.services.bundle.kv, agent=agent or ctx.agent.name, user=ctx.user_id)


# -- the agent's tool -------------------------------------------------------------------------


class ExperienceTool(Tool):
    """The agent's read access to its lessons: ``list`` them or ``read`` one in full."""

    name = "experience"
    description = (
        "Lessons from your earlier runs (EXPERIENCE.md files). list them, or read one in full by its name "
        "(as shown in <available_experiences>) before a task it applies to."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "read"]},
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        store = store_for(ctx)
        if args["action"] == "list":
            return render_listing(await sync_to_async(store.list, thread_sensitive=True)())
        if not args.get("name"):
            raise ToolError("'read' needs the lesson's name")
        found = await sync_to_async(store.get, thread_sensitive=True)(args["name"])
        if found is None:
            raise ToolError(f"no lesson called {args['name']!r}; list them to see the names")
        return found.render()


# -- the context section ----------------------------------------------------------------------


#: Per store: what each conversation's context showed of its lessons (see ExperienceProvider).
_shown: weakref.WeakKeyDictionary[KVStore, RenderMemo] = weakref.WeakKeyDictionary()
_shown_lock = threading.Lock()
_NOTHING_YET = object()


def _shown_by(kv: KVStore) -> RenderMemo:
    with _shown_lock:
        memo = _shown.get(kv)
        if memo is None:
            memo = _shown[kv] = RenderMemo(4096)
        return memo


class ExperienceProvider(MemoryProvider):
    """``<available_experiences>``: each of the turn's user's lessons (name and description), newest first, within
    ``budget_tokens``; the agent reads a full lesson with the ``experience`` tool.

    A conversation lists the lessons that existed when its context last began: a lesson the
    reviewer writes during a conversation (it reviews each run in the background) is listed from
    the next conversation on, or once this one's context begins anew (after a cleanup, or when
    the first message read changes). The list sits ahead of the conversation in the system
    message, so a lesson listed mid-conversation made a prefix-caching server (llama.cpp, vLLM, a
    hosted API's prompt cache) read the whole conversation again: up to ten seconds for a small
    local model (benchmarks/results/real_model.md). The run a lesson was learned from is in that
    conversation already; the lesson is for the next.

    What a conversation listed is kept in this process's memory, per store, agent, user and
    conversation: a turn served by another process (a reconnect to another daphne worker, a
    restart) may list them as they are there and then, and the server reads that conversation
    again, as before for every new lesson. A listed lesson that is gone (deleted) leaves the list
    on the next turn; one edited meanwhile keeps its listed description until the context begins
    anew, and the ``experience`` tool always reads the lessons as they are now.
    """

    name = SECTION_NAME

    def __init__(self, *, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> None:
        self._budget = budget_tokens

    def provide(self, ctx: AssemblyContext) -> Section | None:
        if ctx.config.is_subagent or not ctx.config.experience_enabled or ctx.user is None:
            return None  # no user, no lessons: lessons are per user
        files = ExperienceStore(kv=ctx.stores.kv, agent=ctx.agent, user=ctx.user).list()
        memo = _shown_by(ctx.stores.kv)
        key = (ctx.agent, ctx.user, ctx.session.key(), self._budget)
        # The conversation's context begins at its first live message read for this turn.
        began = ctx.first_live_seq
        shown = memo.get(key, began, _NOTHING_YET)
        if shown is not _NOTHING_YET:
            section, listed = shown
            if listed <= {file.slug for file in files}:
                return section
        section, listed = self._listing(files)
        memo.put(key, began, (section, listed))
        return section

    def _listing(self, files: list[ExperienceFile]) -> tuple[Section | None, frozenset[str]]:
        """The section listing the newest of ``files`` that fit, and the slugs it lists."""
        chosen: list[str] = []
        for file in files:
            entry = element(
                "experience", file.description, attrs={"name": file.slug, "updated": f"{file.updated_at:%Y-%m-%d}"}
            )
            if count_text(self._render([*chosen, entry], more=True)) > self._budget:
                break
            chosen.append(entry)
        if not chosen:
            return None, frozenset()
        text = self._render(chosen, more=len(chosen) < len(files))
        listed = frozenset(file.slug for file in files[: len(chosen)])
        return Section.of(name=SECTION_NAME, tag=TAG, text=text, items=len(chosen)), listed

    @staticmethod
    def _render(entries: list[str], *, more: bool) -> str:
        note = "Lessons from your earlier runs. Before a task one applies to, read it with the experience tool."
        if more:
            note += " Older lessons are not shown; the experience tool lists them all."
        return wrap(TAG, [element("note", note), *entries])


def supplements_for(agent: Any) -> tuple[MemoryProvider, ...]:
    """The supplement providers of ``agent``'s context (empty without the supplement)."""
    return (ExperienceProvider(),) if experience_enabled(agent) else ()


def _tools(agent: Any) -> list[Tool]:
    return [ExperienceTool()] if experience_enabled(agent) else []


def register() -> None:
    """Make ``tool_supplements: [experience]`` known to the runtime (the app does this at ready)."""
    register_supplement(Supplement(name=SUPPLEMENT, tools=_tools, providers=supplements_for))
