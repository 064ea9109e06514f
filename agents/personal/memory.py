"""A person's view of an agent's memory: their core memory files, the history of each, and the
agent's experiences. Shared by the memory pages (agents/personal/views.py) and the JSON API.

Every read and write is scoped to the requesting user: USER.md is ``UserScope(<user pk>)``,
MEMORY.md is ``CompositeScope(agent, user)``; nobody reaches another user's files through here.
SOUL.md (the agent's identity, shared by all its users) is read-only unless the user is staff.
Edits go through ``CoreMemory.rewrite`` with the version the person saw, so the caps and the
compare-and-set the agent itself obeys apply to people too (source ``user:<pk>``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model

from agents.declarations import AgentNode, get_declaration
from agents.experience.supplement import experience_enabled
from agents.experience.store import ExperienceFile, ExperienceStore
from agents.runtime.services import get_services
from memory.core_memory import CORE_FILES, SOUL, CoreChange, CoreFileState, CoreMemory, check_file

HOW_TO_ENABLE = (
    "Core memory is off for this agent. To switch it on, set core_enabled: true (together with "
    "archive_enabled: true, which feeds it) in the agent's memory: block in config/scopes/bot.yml, "
    "or ask a staff member to switch it on in the scope editor (/scopes/); then restart Modex."
)


class UserMemoryError(Exception):
    """Base of the errors of this module; the message says what to do."""


class AgentNotFound(UserMemoryError):
    """No main agent by that name (subagents have no memory pages)."""


class ReadOnlyFile(UserMemoryError):
    """The user may read this file but not change it (SOUL.md, for non-staff users)."""


@dataclass(frozen=True, slots=True)
class ChangeView:
    """One history entry with its writer in words: the agent, the Dream Engine, you, a person."""

    change: CoreChange
    who: str


@dataclass(frozen=True, slots=True)
class CoreFileView:
    state: CoreFileState
    editable: bool
    history: tuple[ChangeView, ...]

    @property
    def file(self) -> str:
        return self.state.file


@dataclass(frozen=True, slots=True)
class AgentMemory:
    """Everything the memory page of one agent shows to one user."""

    agent: AgentNode
    core_enabled: bool
    files: tuple[CoreFileView, ...]
    experience_enabled: bool
    experiences: tuple[ExperienceFile, ...]
    how_to_enable: str = HOW_TO_ENABLE


def main_agents() -> tuple[AgentNode, ...]:
    """The declared main agents, in file order."""
    return get_declaration().main_agents()


def main_agent(name: str) -> AgentNode:
    """The main agent called ``name``; raises AgentNotFound otherwise."""
    node = get_declaration().find(name) if isinstance(name, str) else None
    if node is None or not node.is_main:
        raise AgentNotFound(f"No agent called {name!r}.")
    return node


def user_id(user) -> str:
    """The id the user's memory scopes are keyed by (the runtime uses the same)."""
    return str(user.pk)


def can_edit(*, user, file: str) -> bool:
    """Whether ``user`` may change ``file`` (their own USER.md/MEMORY.md; SOUL.md only staff)."""
    return file != SOUL or bool(user.is_staff)


def core_memory(*, user, agent: AgentNode) -> CoreMemory:
    """The agent's CoreMemory as seen by ``user``; raises CoreMemoryDisabled when it is off."""
    services = get_services()
    return CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent=agent.name,
                      user=user_id(user), hooks=services.hooks)


STAFF_SOURCE = "staff"


def describe_source(source: str, *, viewer, names: dict[str, str] | None = None) -> str:
    """Who or what made a change, in words, for ``viewer``. Another person is named to staff
    only; others read "a staff member" (only staff write a file someone else reads)."""
    if source == "agent":
        return "the agent"
    if source == "dream":
        return "the Dream Engine"
    if source in ("system", "admin"):
        return source
    kind, _, ident = source.partition(":")
    if ident == user_id(viewer):
        return "you"
    if not getattr(viewer, "is_staff", False):
        return "a staff member"
    name = (names or {}).get(ident)
    return f"a person ({name})" if name else f"a person (user {ident})"


def shown_source(source: str, *, viewer) -> str:
    """The raw source of a change as ``viewer`` may see it: another person's user id is
    replaced by ``staff`` for everyone but staff."""
    kind, _, ident = source.partition(":")
    if kind == "user" and ident != user_id(viewer) and not getattr(viewer, "is_staff", False):
        return STAFF_SOURCE
    return source


def _history(memory: CoreMemory, file: str, *, viewer) -> tuple[ChangeView, ...]:
    changes = memory.history(file=file)
    ids = {c.source.partition(":")[2] for c in changes if ":" in c.source}
    model = get_user_model()
    numeric = [int(i) for i in ids if i.isdigit()]
    names = {str(pk): n for pk, n in model.objects.filter(pk__in=numeric).values_list("pk", model.USERNAME_FIELD)}
    return tuple(ChangeView(c, describe_source(c.source, viewer=viewer, names=names)) for c in reversed(changes))


def read_core_file(*, user, agent: str, file: str) -> CoreFileView:
    """One core memory file of ``agent`` for ``user``, with its history (newest first).
    Raises AgentNotFound, UnknownCoreFile, CoreMemoryDisabled."""
    node = main_agent(agent)
    check_file(file)
    memory = core_memory(user=user, agent=node)
    return CoreFileView(memory.read(file=file), can_edit(user=user, file=file), _history(memory, file, viewer=user))


def experiences(*, user, agent: AgentNode) -> tuple[ExperienceFile, ...]:
    """``user``'s lessons of ``agent`` (empty when it has no experience supplement); never
    another user's: lessons are made from one user's runs."""
    if not experience_enabled(agent):
        return ()
    return tuple(ExperienceStore(kv=get_services().bundle.kv, agent=agent.name, user=user_id(user)).list())


def agent_memory(*, user, agent: str) -> AgentMemory:
    """The memory page of ``agent`` for ``user``. Raises AgentNotFound."""
    node = main_agent(agent)
    enabled = node.memory_config.core_enabled
    files: tuple[CoreFileView, ...] = ()
    if enabled:
        memory = core_memory(user=user, agent=node)
        files = tuple(
            CoreFileView(memory.read(file=f), can_edit(user=user, file=f), _history(memory, f, viewer=user))
            for f in CORE_FILES
        )
    return AgentMemory(node, enabled, files, experience_enabled(node), experiences(user=user, agent=node))


def update_core_file(*, user, agent: str, file: str, text: str, expected_version: int) -> CoreFileState:
    """Replace ``file`` with ``text`` if it is still at ``expected_version``.

    Raises AgentNotFound, UnknownCoreFile, ReadOnlyFile, CoreMemoryDisabled, and from CoreMemory:
    CoreMemoryConflict (changed meanwhile: nothing written) and CoreMemoryFull (over the cap:
    nothing written).
    """
    node = main_agent(agent)
    check_file(file)
    if not can_edit(user=user, file=file):
        raise ReadOnlyFile(f"{file} is the agent's identity, shared by all its users; only staff can change it.")
    memory = core_memory(user=user, agent=node)
    return memory.rewrite(file=file, text=text, source=f"user:{user_id(user)}", expected_version=expected_version)
