"""A person's view of an agent's memory: their core memory files line by line with where each
line came from, the history of each file (as diffs, any kept version restorable), and the agent's
experiences. Shared by the memory pages (agents/personal/) and the JSON API.

Every read and write is scoped to the requesting user: USER.md is ``UserScope(<user pk>)`` (one
profile, read by every agent the user talks to), MEMORY.md is ``CompositeScope(agent, user)`` (this
agent's facts about the user); nobody reaches another user's files through here. SOUL.md (the
agent's identity, shared by all its users) is read-only unless the user is staff, who write it
with their authority (``admin:<pk>``). Edits go through ``CoreMemory`` with the version the person
saw, so the caps and the compare-and-set the agent itself obeys apply to people too (source
``user:<pk>``); a line a person deletes is remembered as deleted, so the Dream Engine does not
bring it back from older conversations.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model

from agents.declarations import AgentNode, get_declaration
from agents.experience.supplement import experience_enabled
from agents.experience.store import ExperienceFile, ExperienceStore
from agents.runtime.services import get_services
from memory.core_lines import LineSource, content_lines
from memory.core_memory import (
    CORE_FILES,
    MEMORY,
    SOUL,
    USER,
    CoreChange,
    CoreFileState,
    CoreMemory,
    CoreMemoryConflict,
    check_file,
    is_shared,
)

HOW_TO_ENABLE = (
    "Core memory is off for this agent. To switch it on, set core_enabled: true (together with "
    "archive_enabled: true, which feeds it) in the agent's memory: block in config/scopes/bot.yml, "
    "or ask a staff member to switch it on in the scope editor (/scopes/); then restart Modex."
)
#: The same, for people who cannot act on the configuration (no file names, no settings).
CORE_OFF = ("Core memory is off for this agent: it keeps nothing about you from one conversation to the "
            "next. A staff member can switch it on.")


def how_to_enable(*, user) -> str:
    """Why core memory is off and what to do, in words ``user`` can act on: staff get the
    setting and where it lives, everyone else who can switch it on."""
    return HOW_TO_ENABLE if getattr(user, "is_staff", False) else CORE_OFF


class UserMemoryError(Exception):
    """Base of the errors of this module; the message says what to do."""


class AgentNotFound(UserMemoryError):
    """No main agent by that name (subagents have no memory pages)."""


class InternalAgent(AgentNotFound):
    """A main agent declared with ``chat: false``: nobody chats with it, it keeps no one's memory."""


class ReadOnlyFile(UserMemoryError):
    """The user may read this file but not change it (SOUL.md, for non-staff users)."""


class NotConfirmed(UserMemoryError):
    """"Forget everything" was asked for without its confirmation."""


#: What each file is, in words a user reads (true: USER.md is one file for every agent).
FILE_ROLES = {
    SOUL: "The agent's identity, shared by everyone who talks to it.",
    USER: "Your profile. One file shared by every agent you talk to: what you change here, they all see.",
    MEMORY: "Facts this agent keeps about you (each agent has its own).",
}


@dataclass(frozen=True, slots=True)
class ChangeView:
    """One history entry with its writer in words: the agent, the Dream Engine, you, a person;
    ``diff`` the lines it took out (``-``) and put in (``+``), when both texts are kept."""

    change: CoreChange
    who: str
    diff: tuple[tuple[str, str], ...] = ()
    restorable: bool = False


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One line of a file with where it came from: who wrote it, in which conversation, when."""

    index: int  # the line's position in the file's lines (what the edit and delete forms name)
    text: str
    who: str
    at: datetime | None
    said_at: datetime | None
    conversation_id: str  # the conversation it came from, when it is the viewer's and still exists
    conversation: str  # its title
    archived: bool  # it came from an archived conversation (the Dream Engine)
    source_conversation: str = ""  # the id of the conversation it came from (live or archived)
    source_seq: int | None = None  # the message it rests on (its seq there), when the Dream Engine knows it

    @property
    def plain(self) -> str:
        """The line without its list bullet (what the edit box shows)."""
        return re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", self.text)


@dataclass(frozen=True, slots=True)
class CoreFileView:
    state: CoreFileState
    editable: bool
    history: tuple[ChangeView, ...]
    items: tuple[MemoryItem, ...] = ()
    role: str = ""

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
    how_to_enable: str = HOW_TO_ENABLE  # for staff and scripts: the setting and where it lives
    core_off: str = CORE_OFF  # for everyone else


def main_agents() -> tuple[AgentNode, ...]:
    """The main agents people talk to, in file order (an internal agent, declared with
    ``chat: false``, keeps no memory of anyone: nobody chats with it)."""
    return get_declaration().chat_agents()


def main_agent(name: str) -> AgentNode:
    """The main agent called ``name`` that people chat with; raises AgentNotFound otherwise (an
    internal agent, ``chat: false``, included)."""
    node = get_declaration().find(name) if isinstance(name, str) else None
    if node is None or not node.is_main:
        raise AgentNotFound(f"No agent called {name!r}.")
    if not node.for_chat:
        raise InternalAgent(f"The agent {node.name!r} works behind the scenes: nobody chats with it, so it keeps "
                            "no memory of you.")
    return node


def user_id(user) -> str:
    """The id the user's memory scopes are keyed by (the runtime uses the same)."""
    return str(user.pk)


def participant_names(user) -> tuple[str, ...]:
    """The user's names as the account gives them (first and last name; not the login name,
    which is often a word like any other), for archive search to leave out of its queries."""
    return tuple(name for name in ((user.first_name or "").strip(), (user.last_name or "").strip()) if name)


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
    only; others read "staff" or "a staff member" (only staff write a file someone else reads)."""
    if source == "agent":
        return "the agent"
    if source == "dream":
        return "the Dream Engine (from your archived conversations)"
    if source == "system":
        return "the operator"
    if source == "unknown":
        return "not recorded (written before sources were kept)"
    kind, _, ident = source.partition(":")
    if ident and ident == user_id(viewer) and kind == "user":
        return "you"
    if kind == "admin" or source == "admin":
        if not getattr(viewer, "is_staff", False):
            return "a staff member"
        name = (names or {}).get(ident)
        return f"staff ({name})" if name else "staff"
    if not getattr(viewer, "is_staff", False):
        return "a staff member"
    name = (names or {}).get(ident)
    return f"a person ({name})" if name else f"a person (user {ident})"


def shown_source(source: str, *, viewer) -> str:
    """The raw source of a change as ``viewer`` may see it: another person's id is replaced by
    ``staff`` for everyone but staff."""
    kind, _, ident = source.partition(":")
    if kind in ("user", "admin") and ident and ident != user_id(viewer) and not getattr(viewer, "is_staff", False):
        return STAFF_SOURCE
    return source


def _names(sources) -> dict[str, str]:
    ids = {s.partition(":")[2] for s in sources if ":" in s}
    model = get_user_model()
    numeric = [int(i) for i in ids if i.isdigit()]
    return {str(pk): n for pk, n in model.objects.filter(pk__in=numeric).values_list("pk", model.USERNAME_FIELD)}


def _diff(before: str | None, after: str | None) -> tuple[tuple[str, str], ...]:
    if before is None or after is None:
        return ()
    lines = difflib.ndiff(before.splitlines(), after.splitlines())
    return tuple((line[0], line[2:]) for line in lines if line[:1] in "+-" and line[2:].strip())


def _history(memory: CoreMemory, file: str, *, viewer) -> tuple[ChangeView, ...]:
    changes = memory.history(file=file)
    names = _names(c.source for c in changes)
    views = []
    previous: str | None = ""
    for index, change in enumerate(changes):
        # The first kept entry's predecessor is unknown unless it is version 1 (from empty).
        before = previous if index or change.version == 1 else None
        views.append(ChangeView(change, describe_source(change.source, viewer=viewer, names=names),
                                _diff(before, change.text), restorable=change.text is not None))
        previous = change.text
    return tuple(reversed(views))


def _items(memory: CoreMemory, state: CoreFileState, *, viewer) -> tuple[MemoryItem, ...]:
    from agents.models import Conversation

    ledger = memory.ledger(file=state.file)
    lines = state.text.splitlines()
    shown = [(i, line) for i, line in enumerate(lines) if line in content_lines(line)]
    sources: dict[int, LineSource | None] = {i: ledger.source_of(line) for i, line in shown}
    names = _names(s.by for s in sources.values() if s is not None)
    ids = {s.session.partition(":")[2] for s in sources.values() if s is not None and s.session.startswith("session:")}
    titles = dict(Conversation.objects.filter(pk__in=ids, owner=viewer).values_list("pk", "title"))
    items = []
    for index, line in shown:
        source = sources[index]
        conversation = source.session.partition(":")[2] if source is not None else ""
        items.append(MemoryItem(
            index=index, text=line, who=describe_source(source.by if source else "unknown", viewer=viewer, names=names),
            at=source.at if source else None, said_at=source.said_at if source else None,
            conversation_id=conversation if conversation in titles else "", conversation=titles.get(conversation, ""),
            archived=bool(source and source.document), source_conversation=conversation,
            source_seq=source.seq if source else None,
        ))
    return tuple(items)


def _view(memory: CoreMemory, file: str, *, user) -> CoreFileView:
    state = memory.read(file=file)
    return CoreFileView(state, can_edit(user=user, file=file), _history(memory, file, viewer=user),
                        _items(memory, state, viewer=user), FILE_ROLES[file])


def read_core_file(*, user, agent: str, file: str) -> CoreFileView:
    """One core memory file of ``agent`` for ``user``: its lines with their sources, its history
    (newest first). Raises AgentNotFound, UnknownCoreFile, CoreMemoryDisabled."""
    node = main_agent(agent)
    check_file(file)
    return _view(core_memory(user=user, agent=node), file, user=user)


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
        files = tuple(_view(memory, f, user=user) for f in CORE_FILES)
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
    return memory.rewrite(file=file, text=text, source=writer(user=user, file=file), expected_version=expected_version)


def writer(*, user, file: str) -> str:
    """The change source of ``user`` editing ``file``: a shared file is written by staff with
    their authority (``admin:<pk>``); one's own files as oneself (``user:<pk>``)."""
    if is_shared(file) and user.is_staff:
        return f"admin:{user_id(user)}"
    return f"user:{user_id(user)}"


def _writable(*, user, agent: str, file: str) -> CoreMemory:
    node = main_agent(agent)
    check_file(file)
    if not can_edit(user=user, file=file):
        raise ReadOnlyFile(f"{file} is the agent's identity, shared by all its users; only staff can change it.")
    return core_memory(user=user, agent=node)


def _line_at(state: CoreFileState, index: int, line: str) -> list[str]:
    """The file's lines, after checking that line ``index`` is still ``line`` (else the file
    changed since the person saw it: CoreMemoryConflict, nothing written)."""
    lines = state.text.splitlines()
    if not (0 <= index < len(lines)) or lines[index] != line:
        raise CoreMemoryConflict(state.file, expected=None, actual=state.version)
    return lines


def _joined(lines: list[str]) -> str:
    text = "\n".join(lines).strip("\n")
    return text + "\n" if text else ""


def delete_item(*, user, agent: str, file: str, index: int, line: str, expected_version: int) -> CoreFileState:
    """Remove one line (``index``, which must still read ``line``) of the file at
    ``expected_version``. The Dream Engine will not re-add it from what was said before."""
    memory = _writable(user=user, agent=agent, file=file)
    state = memory.read(file=file)
    if state.version != expected_version:
        raise CoreMemoryConflict(file, expected=expected_version, actual=state.version)
    lines = _line_at(state, index, line)
    return memory.rewrite(file=file, text=_joined(lines[:index] + lines[index + 1:]),
                          source=writer(user=user, file=file), expected_version=expected_version, action="delete line")


def edit_item(*, user, agent: str, file: str, index: int, line: str, text: str, expected_version: int) -> CoreFileState:
    """Replace one line with ``text`` (one line; empty deletes it)."""
    text = " ".join((text or "").split())
    if not text:
        return delete_item(user=user, agent=agent, file=file, index=index, line=line, expected_version=expected_version)
    memory = _writable(user=user, agent=agent, file=file)
    state = memory.read(file=file)
    if state.version != expected_version:
        raise CoreMemoryConflict(file, expected=expected_version, actual=state.version)
    lines = _line_at(state, index, line)
    bullet = line[: len(line) - len(line.lstrip(" -*+"))] if line.lstrip().startswith(("-", "*", "+")) else ""
    return memory.rewrite(file=file, text=_joined(lines[:index] + [bullet + text] + lines[index + 1:]),
                          source=writer(user=user, file=file), expected_version=expected_version, action="edit line")


def restore_version(*, user, agent: str, file: str, version: int, expected_version: int) -> CoreFileState:
    """Make the file read as it did at ``version`` again (a new version; CoreMemoryEditError
    when that version's text is no longer kept)."""
    memory = _writable(user=user, agent=agent, file=file)
    return memory.restore(file=file, version=version, source=writer(user=user, file=file),
                          expected_version=expected_version)


FORGET_CONFIRMATION = "forget"


def forget_everything(*, user, agent: str, confirm: str) -> tuple[CoreFileState, ...]:
    """Empty the user's USER.md (every agent's view of them) and this agent's MEMORY.md, if
    ``confirm`` is ``FORGET_CONFIRMATION``; what was said before stays out of them (the Dream
    Engine learns only from what is said afterwards). Raises NotConfirmed otherwise."""
    if (confirm or "").strip().lower() != FORGET_CONFIRMATION:
        raise NotConfirmed(f"Type “{FORGET_CONFIRMATION}” to confirm: this empties USER.md and MEMORY.md.")
    memory = core_memory(user=user, agent=main_agent(agent))
    done = []
    for file in (USER, MEMORY):
        for _ in range(5):
            state = memory.read(file=file)
            try:
                done.append(memory.forget(file=file, source=writer(user=user, file=file),
                                          expected_version=state.version))
                break
            except CoreMemoryConflict:
                continue  # the agent wrote meanwhile: forget that too
        else:
            raise CoreMemoryConflict(file, expected=None, actual=None)
    return tuple(done)

