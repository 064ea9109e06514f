"""EXPERIENCE.md files: reusable lessons, one KV item per file in the agent's scope.

Each lesson is the KV item ``experience.<slug>.md`` in ``experience_scope(agent, user)``, the
agent+user composite (the file backend keeps it as a real markdown file a person can open),
holding::

    ---
    name: Calling the todo tool
    description: What to check before calling todo with an item
    updated: 2025-01-01T10:00:00+00:00
    ---
    <the lesson, markdown>

The slug is the name lower-cased with every run of other characters turned into ``-``. Writes
use the KV compare-and-set: ``create`` only if the key does not exist yet, ``update`` only on
the version read (or the one given), so two reviewers never overwrite each other. ``create``
refuses a near-duplicate of an existing lesson (same words in the name) and names the file to
update instead: one lesson per topic, kept current.

Privacy: lessons are per user. The reviewer reads a run whole and a model can quote anything of
it (a tool error holding a customer record, a pasted password), so no redaction pass can promise
that a lesson carries nothing private. A lesson made from a user's runs is therefore stored with
that user's memory and shown, listed, injected and exported for that user only; another user of
the same agent never reads it. Lessons in the agent-wide ``AgentScope(agent)`` (where they lived
before) are not read by anything any more: the operator decides what to do with them (admin, KV).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from memory.messages import utcnow
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import MUST_NOT_EXIST, KVItem, KVStore, VersionConflict
from memory.text import storable

KEY_PREFIX = "experience."
KEY_SUFFIX = ".md"
MAX_NAME = 80
MAX_DESCRIPTION = 240
MAX_BODY = 6000
MAX_FILES = 200
#: Name-word overlap (over the smaller set) from which two lessons count as the same topic.
DUPLICATE_OVERLAP = 0.75

_SLUG_RUN = re.compile(r"[^a-z0-9]+")
_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset({"a", "an", "and", "the", "of", "to", "for", "in", "on", "with", "when", "how", "using", "use"})
_FRONT = re.compile(r"\A---\n(?P<head>.*?)\n---\n?(?P<body>.*)\Z", re.DOTALL)


class ExperienceError(Exception):
    """Base of the experience errors; the message says what to do instead."""


class ExperienceNotFound(ExperienceError):
    """No lesson by that name."""


class ExperienceExists(ExperienceError):
    """A lesson with the same (or a near-identical) name exists: update it instead."""

    def __init__(self, message: str, *, existing: str) -> None:
        super().__init__(message)
        self.existing = existing


class ExperienceConflict(ExperienceError):
    """The lesson changed since it was read; nothing was written. Read it again."""


class InvalidExperience(ExperienceError, ValueError):
    """A name, description or body that is empty or too long, or too many lessons."""


@dataclass(frozen=True, slots=True)
class ExperienceFile:
    """One lesson as stored. ``slug`` names the file (``experience.<slug>.md``)."""

    slug: str
    name: str
    description: str
    body: str
    updated_at: datetime
    version: int

    @property
    def key(self) -> str:
        return key_for(self.slug)

    def render(self) -> str:
        """The markdown file: front matter, then the body."""
        return render(name=self.name, description=self.description, updated_at=self.updated_at, body=self.body)


def experience_scope(agent: str, user: str) -> CompositeScope:
    """Where ``user``'s lessons of ``agent`` live (the same composite as their MEMORY.md)."""
    return CompositeScope(AgentScope(agent), UserScope(user))


def slugify(name: str) -> str:
    """The file slug of a lesson name (``"Calling todo!"`` → ``"calling-todo"``)."""
    slug = _SLUG_RUN.sub("-", (name or "").lower()).strip("-")[:MAX_NAME].strip("-")
    return slug or "lesson"


def key_for(slug: str) -> str:
    return f"{KEY_PREFIX}{slug}{KEY_SUFFIX}"


def _one_line(value: str) -> str:
    return " ".join((value or "").split())


def render(*, name: str, description: str, updated_at: datetime, body: str) -> str:
    head = f"name: {_one_line(name)}\ndescription: {_one_line(description)}\nupdated: {updated_at.isoformat()}"
    # The one place a lesson becomes a KV value: NUL dropped (KV values cannot hold it) and
    # lone surrogates made U+FFFD, on create and update alike.
    return storable(f"---\n{head}\n---\n{body.strip()}\n".replace("\x00", ""))


def parse(item: KVItem) -> ExperienceFile:
    """The lesson stored in ``item``; a file without front matter keeps its text as the body."""
    slug = item.key[len(KEY_PREFIX) : -len(KEY_SUFFIX)]
    match = _FRONT.match(item.value.replace("\r\n", "\n"))
    fields: dict[str, str] = {}
    body = item.value
    if match:
        body = match.group("body")
        for line in match.group("head").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip().lower()] = value.strip()
    try:
        updated = datetime.fromisoformat(fields["updated"])
    except (KeyError, ValueError):
        updated = item.updated_at
    first = next((line.strip("# ").strip() for line in body.splitlines() if line.strip()), "")
    return ExperienceFile(
        slug=slug,
        name=fields.get("name") or slug.replace("-", " "),
        description=fields.get("description") or first[:MAX_DESCRIPTION],
        body=body.strip(),
        updated_at=updated,
        version=item.version,
    )


def _name_words(name: str) -> set[str]:
    return {w for w in _WORD.findall(name.lower()) if w not in _STOPWORDS}


def similar(a: str, b: str) -> bool:
    """True when two lesson names are about the same topic (see DUPLICATE_OVERLAP)."""
    wa, wb = _name_words(a), _name_words(b)
    if not wa or not wb:
        return slugify(a) == slugify(b)
    return len(wa & wb) / min(len(wa), len(wb)) >= DUPLICATE_OVERLAP


def _check(value: str, *, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidExperience(f"the lesson's {what} is empty")
    if len(value) > limit:
        raise InvalidExperience(f"the lesson's {what} is {len(value)} characters; at most {limit}")
    return value.replace("\x00", "")


class ExperienceStore:
    """The lessons of one agent for one user, over the KV store (see "Privacy" above)."""

    def __init__(self, *, kv: KVStore, agent: str, user: str, clock: Callable[[], datetime] = utcnow) -> None:
        self._kv = kv
        self._scope = experience_scope(agent, user)
        self._clock = clock

    @property
    def scope(self) -> CompositeScope:
        return self._scope

    def list(self) -> list[ExperienceFile]:
        """Every lesson, most recently updated first."""
        files = [parse(item) for item in self._kv.list(self._scope, prefix=KEY_PREFIX) if item.key.endswith(KEY_SUFFIX)]
        return sorted(files, key=lambda f: (f.updated_at, f.slug), reverse=True)

    def get(self, name: str) -> ExperienceFile | None:
        """The lesson called ``name`` (its name, slug or file name), or None."""
        ref = (name or "").strip()
        ref = ref.removeprefix(KEY_PREFIX).removesuffix(KEY_SUFFIX)
        item = self._kv.get(self._scope, key_for(slugify(ref)))
        return parse(item) if item is not None else None

    def find_similar(self, name: str) -> ExperienceFile | None:
        """An existing lesson on the same topic as ``name``, if any."""
        return next((f for f in self.list() if f.slug == slugify(name) or similar(f.name, name)), None)

    def create(self, *, name: str, description: str, body: str) -> ExperienceFile:
        """Write a new lesson. Raises ExperienceExists when one on the same topic exists
        (update that one), InvalidExperience for bad fields or when the agent has MAX_FILES."""
        name = _check(_one_line(name), what="name", limit=MAX_NAME)
        description = _check(_one_line(description), what="description", limit=MAX_DESCRIPTION)
        body = _check(body, what="body", limit=MAX_BODY)
        existing = self.find_similar(name)
        if existing is not None:
            raise ExperienceExists(
                f"a lesson on this topic exists: {existing.slug} ({existing.name}); update it instead of "
                "creating a near-duplicate",
                existing=existing.slug,
            )
        if len(self._kv.list(self._scope, prefix=KEY_PREFIX)) >= MAX_FILES:
            raise InvalidExperience(f"the agent has {MAX_FILES} lessons already; update or merge existing ones")
        now = self._clock()
        slug = slugify(name)
        try:
            item = self._kv.put(
                self._scope,
                key_for(slug),
                render(name=name, description=description, updated_at=now, body=body),
                expected_version=MUST_NOT_EXIST,
            )
        except VersionConflict:
            raise ExperienceExists(f"{slug} was just created by someone else; update it", existing=slug) from None
        return parse(item)

    def update(
        self,
        *,
        name: str,
        description: str | None = None,
        body: str | None = None,
        expected_version: int | None = None,
    ) -> ExperienceFile:
        """Change a lesson's description and/or body (the name stays). With
        ``expected_version`` the write applies only to that version; without, to the version
        just read. Raises ExperienceNotFound, ExperienceConflict, InvalidExperience."""
        current = self.get(name)
        if current is None:
            raise ExperienceNotFound(f"no lesson called {name!r}; list the lessons, or create it")
        if expected_version is not None and expected_version != current.version:
            raise ExperienceConflict(f"{current.slug} changed since you read it; read it again")
        new_description = current.description if description is None else _one_line(description)
        new_body = current.body if body is None else body
        _check(new_description, what="description", limit=MAX_DESCRIPTION)
        _check(new_body, what="body", limit=MAX_BODY)
        if new_description == current.description and new_body.strip() == current.body:
            return current  # nothing changes: no write
        try:
            item = self._kv.put(
                self._scope,
                current.key,
                render(name=current.name, description=new_description, updated_at=self._clock(), body=new_body),
                expected_version=current.version,
            )
        except VersionConflict:
            raise ExperienceConflict(f"{current.slug} changed since you read it; read it again") from None
        return parse(item)
