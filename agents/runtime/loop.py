"""The ReAct loop: hooks → assemble → model → tools → persist, one turn at a time.

Each step starts at the BEFORE_STEP hook point, where the installed cleanup hook compresses a
session over its threshold (``agents.runtime.cleanup``); the loop itself knows nothing of
compression. Which hooks a run gets is ``Runtime.hooks_for(agent)``.

``Runtime.run_turn`` is an async generator of ``agents.runtime.events`` for one conversation turn. Every
message is persisted as it completes, so a turn cut short (stop button, client gone, crash)
leaves a session that is legal or is repaired to legality before the next model call: calls
without results get synthetic "interrupted" results.

Model calls go through the services' gate (``agents.runtime.gate``): a chat runtime's turn holds
a turn mark from its first store trip to its end, so background memory work waits for it, and
its calls (the cleanup's summary included: ``Runtime.calls``) take slots with chat priority; a
``background`` runtime (the experience reviewer) takes none and waits for chat. Each step's
reply is capped (``max_tokens``: ``reply_cap``, else ``MODEX_MAX_TOKENS_REPLY`` or the agent's
reply reserve). When the server is known not to call tools (``capabilities.tools`` False), no
tool schemas are sent: the pages and the log say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from django.conf import settings

from agents.runtime.events import (
    ContextReady,
    MessageStored,
    RuntimeEvent,
    ToolFinished,
    ToolStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from agents.runtime.hooks import HookPoint, Installer, RuntimeHooks
from agents.runtime.hooks import installers as registered_installers
from agents.runtime.context import ToolContext
from agents.runtime.leases import KeptLease
from agents.runtime.outcomes import context_advice, reply_kind
from agents.runtime.relay import relay_reply
from agents.runtime.sizing import learn_window, probe_window, sized_agent, too_long
from agents.runtime.supplements import supplement_providers
from agents.llm import ChatModel, CompletionBuilder, ContextLengthExceeded, ModelError
from agents.runtime.services import MemoryServices
from agents.runtime.tools.base import ToolRoster
from agents.runtime.tools.history_tools import archive_scope_for
from agents.runtime.tools.registry import compile_roster
from agents.runtime.tools.scratchpad import RunScratchpad
from agents.runtime.writes import SessionWrites
from memory.archiving import archived_through
from memory.assembly.assembler import AssemblyError
from memory.hooks import take_reorientation
from memory.locks import Lease, LeaseBusy, acquire_lease, release_lease
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import Fence, FencedOut, SessionHead
from memory.threads import run_blocking as _io

logger = logging.getLogger("agents.runtime.loop")

DEFAULT_MAX_STEPS = 8
TURN_LEASE = "turn"
TURN_LEASE_TTL = 300.0  # default of settings.MODEX_TURN_LEASE_TTL
CLEANUP_LEASE_TTL = 600.0  # default of settings.MODEX_CLEANUP_LEASE_TTL
MAX_USER_CHARS = 32000  # the one limit on a user message, in characters (code points); the composer states it
TAKEN_OVER = "this conversation was taken over by another worker; send your message again"
#: How far back from the session's end a replaced exchange (``replace_from``) is looked for.
REPLACE_TAIL = 256
NOT_LAST = "only the last message of the conversation can be edited or answered again; reload the page to see it"
ARCHIVED = ("the last exchange is already kept in long-term memory (archived), so it can no longer be replaced; "
            "send a new message instead")


class TurnBusy(Exception):
    """Another turn of this conversation is running; the caller should wait for it."""


class TurnRejected(ValueError):
    """The user's input cannot start a turn (empty, too long)."""


class Runtime:
    """Runs agents declared in bot.yml over one set of memory services."""

    def __init__(
        self,
        *,
        services: MemoryServices,
        model: ChatModel | None = None,
        hooks: RuntimeHooks | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        lease_ttl: float | None = None,
        cleanup_lease_ttl: float | None = None,
        installers: Sequence[tuple[str, Installer]] | None = None,
        background: bool = False,
        label: str = "",
        reply_cap: int | None = None,
    ) -> None:
        self.services = services
        self.model = model or services.model
        self.background = background
        self.reply_cap = reply_cap
        #: The model as this runtime's calls reach it: through the gate, with chat priority, or
        #: background priority for a background runtime (the model itself without a gate).
        self.calls = services.calls(self.model, background=background, label=label or ("background" if background else "chat"))
        self.hooks = hooks or RuntimeHooks()
        self.max_steps = max_steps
        # The turn lease is renewed every third of its ttl while the turn runs, so the ttl only
        # bounds how long a worker that died mid-turn blocks the conversation.
        self.lease_ttl = getattr(settings, "MODEX_TURN_LEASE_TTL", TURN_LEASE_TTL) if lease_ttl is None else lease_ttl
        self.cleanup_lease_ttl = (
            getattr(settings, "MODEX_CLEANUP_LEASE_TTL", CLEANUP_LEASE_TTL) if cleanup_lease_ttl is None
            else cleanup_lease_ttl
        )
        # None: the process's installers as they are at each run (see ``hooks_for``).
        self._installers = (lambda: list(installers)) if installers is not None else registered_installers
        self._running: set[str] = set()
        self._orphans: set[asyncio.Task] = set()  # closing turns cancelled during their first trip

    # -- public -------------------------------------------------------------------------------

    def supplements_for(self, agent: Any) -> tuple[Any, ...]:
        """The supplement providers of ``agent``'s context (e.g. ``<available_experiences>``)."""
        return supplement_providers(agent)

    def hooks_for(self, agent: Any) -> RuntimeHooks:
        """The hooks of one run of ``agent``: this runtime's own, then what each installer
        (``agents.runtime.hooks.installers()``, set from ``MODEX_RUNTIME_HOOKS``) adds for it."""
        hooks = RuntimeHooks(parent=self.hooks)
        for name, installer in self._installers():
            try:
                installer(hooks, agent, self)
            except Exception:
                logger.exception("runtime hook installer %s failed for %s; its hooks are left out", name, agent.name)
        return hooks

    def roster(self, agent: Any) -> ToolRoster:
        in_run = bool(agent.subagents) or agent.memory_config.is_subagent
        return compile_roster(agent, in_multi_agent_run=in_run)

    async def run_turn(
        self,
        *,
        agent: Any,
        user_id: str,
        session: SessionScope,
        text: str,
        replace_from: str | None = None,
        participants: Sequence[str] = (),
    ) -> AsyncIterator[RuntimeEvent]:
        """One user turn. Raises TurnBusy (before yielding anything) if one is already running.

        ``replace_from`` (a message id): the turn replaces the session's last exchange instead of
        following it (answer again, edit the last message, retry a failed turn). That message
        must be the session's last user message, still live (not moved out by a cleanup) and not
        yet archived; it and everything after it (the reply, its tool chain, a marked failure)
        are soft-deleted, under the turn lease, right before ``text`` is stored as the new user
        message. Otherwise TurnRejected, nothing changed.

        "Running" means in any process sharing the stores: the session's ``turn`` lease is held
        for the whole turn and renewed as it goes. Should it be lost anyway (this worker stalled
        past the ttl and another one took the conversation over), the turn ends at its next
        event with TurnFailed(kind="LeaseLost").

        ``participants``: the names of the people in the conversation (the user's), for archive
        search to leave out of its queries (``ToolContext.participants``).
        """
        if not isinstance(text, str) or not text.strip():
            raise TurnRejected("say something: the message is empty")
        if len(text) > MAX_USER_CHARS:
            raise TurnRejected(f"the message is too long ({len(text):,} characters; at most {MAX_USER_CHARS:,})")
        await probe_window(self.model)  # and what the server can do: once per model
        agent = sized_agent(agent, self.model)
        self._refuse_oversized(agent, text)
        key = session.key()
        if key in self._running:
            raise TurnBusy("a turn of this conversation is already running")
        replacing = None
        if replace_from is not None:
            replacing = (replace_from, archive_scope_for(agent=agent.name, user_id=user_id))
        try:
            lease, opened, head, mark = await self._begin(session, text, replacing)
        except LeaseBusy as exc:
            raise TurnBusy(f"a turn of this conversation is already running ({exc})") from None
        self._running.add(key)
        kept = KeptLease(kv=self.services.bundle.kv, lease=lease, ttl=self.lease_ttl, name=f"turn-lease-{key}")
        marked = self.services.gate.keep(mark, name=f"turn-mark-{key}") if mark is not None else None
        ctx = ToolContext(
            services=self.services,
            runtime=self,
            agent=agent,
            user_id=user_id,
            session=session,
            scratchpad=RunScratchpad(),
            hooks=self.hooks_for(agent),
            fence=lease.fence,
            head=head,
            participants=tuple(name for name in participants if name),
        )
        final: Message | None = None
        try:
            try:
                yield TurnStarted(session=key, agent=agent.name, model=self.model.name, offline=self.services.offline)
            except (asyncio.CancelledError, GeneratorExit):
                # Stopped at the first event: the user's message is already stored (_begin), so
                # it gets its (marked) answer. From here on _loop closes the turn itself.
                await asyncio.shield(self._writes(session, lease.fence).abandon(CompletionBuilder(), None))
                raise
            try:
                async with contextlib.aclosing(self._loop(ctx=ctx, text=text, opened=opened)) as events:
                    async for event in events:
                        if isinstance(event, TurnFinished):
                            final = event.message
                        yield event
                        if kept.lost.is_set() and not isinstance(event, TurnFinished | TurnFailed):
                            final = None
                            yield TurnFailed(error=TAKEN_OVER, kind="LeaseLost")
                            break
            except FencedOut as exc:
                # This worker stalled past the lease and another took the conversation over: the
                # store refused the write, so nothing of ours lands after theirs.
                logger.error("turn of %s fenced out: %s", key, exc)
                final = None
                yield TurnFailed(error=TAKEN_OVER, kind="LeaseLost")
        finally:
            self._running.discard(key)
            with contextlib.suppress(Exception):
                await asyncio.shield(kept.end())
            if marked is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.services.gate.end_turn(marked))
        if final is not None:
            await ctx.hooks.fire(HookPoint.AFTER_GRAPH, agent=agent, user_id=user_id, session=session, final=final)

    async def run_subagent(self, *, parent: ToolContext, node: Any, task: str) -> str:
        """Run ``node`` on ``task`` in a fresh session; clear that session when it finishes."""
        session = SessionScope(f"{parent.session.id[:64]}.sub-{node.name[:40]}-{uuid.uuid4().hex[:8]}")
        node = sized_agent(node, self.model)
        ctx = ToolContext(
            services=self.services,
            runtime=self,
            agent=node,
            user_id=parent.user_id,
            session=session,
            scratchpad=parent.scratchpad,
            fence=parent.fence,  # the subagent works under its parent's turn lease
            hooks=self.hooks_for(node),
            depth=parent.depth + 1,
            participants=parent.participants,
        )
        answer: str | None = None
        try:
            async with contextlib.aclosing(self._loop(ctx=ctx, text=task)) as events:
                async for event in events:
                    if isinstance(event, TurnFinished) and event.message is not None:
                        answer = event.message.content
                    elif isinstance(event, TurnFailed):
                        answer = f"The subagent {node.name} failed: {event.error}"
        finally:
            await asyncio.shield(self._forget_session(session))
        return answer or f"The subagent {node.name} gave no answer."

    # -- the loop -----------------------------------------------------------------------------

    async def _loop(
        self, *, ctx: ToolContext, text: str, opened: list[Message] | None = None
    ) -> AsyncIterator[RuntimeEvent]:
        """``opened``: what the turn's first write stored, when the caller made it (``_begin``).
        An interruption at any of its events (a stop closes the generator there, a cancel lands
        at an await) closes the turn from what the store holds (``SessionWrites.abandon``)."""
        writes = self._writes(ctx.session, ctx.fence)
        builder = CompletionBuilder()
        reply_id: str | None = None
        try:
            if opened is None:
                opened, ctx.head = await _io(writes.open, text)
            for stored in opened:
                yield MessageStored(message=stored)
            roster = self.roster(ctx.agent)
            schemas = roster.schemas() if self.tools_supported() else []
            for step in range(1, self.max_steps + 1):
                async for event in ctx.hooks.stream(HookPoint.BEFORE_STEP, ctx=ctx, step=step, force=False):
                    yield event
                builder = CompletionBuilder()
                reply_id = None
                try:
                    retried = False
                    while True:
                        request = await self._assemble(ctx, schemas)
                        yield ContextReady(step=step, context=request, **request.figures())
                        await ctx.hooks.fire(HookPoint.BEFORE_MODEL, agent=ctx.agent, session=ctx.session, request=request)
                        try:
                            cap = self.reply_cap or self.services.caps.reply_for(request.reply_reserve)
                            async for event in relay_reply(self.calls, request, schemas, builder, max_tokens=cap):
                                yield event
                            break
                        except ContextLengthExceeded as exc:
                            if retried or builder.content or builder.reasoning_content:
                                raise
                            retried = True  # the endpoint's window is smaller than declared: compact, retry once
                            if learn_window(self.model, stated=exc.window, request=request):
                                ctx.agent = sized_agent(ctx.agent, self.model)
                            async for event in ctx.hooks.stream(HookPoint.BEFORE_STEP, ctx=ctx, step=step, force=True):
                                yield event
                    completion = builder.build()
                    reply = completion.to_message(kind=reply_kind(completion))
                    reply_id = reply.id
                    (stored,), ctx.head = await writes.append_reading_head([reply])
                    # From here on the reply is persisted: an interruption must close its calls,
                    # not store its text a second time.
                    pending = list(stored.tool_calls)
                    builder = CompletionBuilder()
                    await ctx.hooks.fire(HookPoint.AFTER_MODEL, agent=ctx.agent, session=ctx.session, message=stored)
                    yield MessageStored(message=stored)
                    if not stored.tool_calls:
                        yield TurnFinished(message=stored, steps=step)
                        return
                    while pending:
                        call = pending[0]
                        yield ToolStarted(call=call)
                        await ctx.hooks.fire(HookPoint.BEFORE_TOOL, agent=ctx.agent, session=ctx.session, call=call)
                        outcome = await roster.call(ctx, name=call.name, arguments_json=call.arguments_json)
                        result = Message(role="tool", content=outcome.content, tool_call_id=call.id, name=call.name)
                        (stored_result,), ctx.head = await writes.append_reading_head([result])
                        pending.pop(0)
                        await ctx.hooks.fire(HookPoint.AFTER_TOOL, agent=ctx.agent, session=ctx.session, call=call, outcome=outcome)
                        if ctx.hooks.entries(HookPoint.AFTER_TOOL):
                            ctx.head = None  # a handler may have written the session since the head was read
                        yield ToolFinished(call=call, content=stored_result.content or "", ok=outcome.ok)
                        yield MessageStored(message=stored_result)
                except ModelError as exc:
                    logger.warning("model call failed for %s: %s", ctx.session.key(), exc)
                    error = str(exc)
                    if isinstance(exc, ContextLengthExceeded):
                        error = context_advice(exc, window=ctx.agent.memory_config.context_window)
                    for stored in await asyncio.shield(writes.record_failure(builder, error)):
                        yield MessageStored(message=stored)
                    yield TurnFailed(error=error, kind=type(exc).__name__, recorded=True)
                    return
                except AssemblyError as exc:
                    # e.g. instructions and tools alone overflow the window: nothing was sent.
                    logger.error("context assembly failed for %s: %s", ctx.session.key(), exc)
                    for stored in await asyncio.shield(writes.record_failure(builder, str(exc))):
                        yield MessageStored(message=stored)
                    yield TurnFailed(error=str(exc), kind=type(exc).__name__, recorded=True)
                    return
            note = Message(
                role="assistant",
                content=f"I stopped after {self.max_steps} steps without a final answer. Ask me to continue if needed.",
            )
            stored = (await writes.append([note]))[0]
            yield MessageStored(message=stored)
            yield TurnFinished(message=stored, steps=self.max_steps, stopped_at_step_limit=True)
        except (asyncio.CancelledError, GeneratorExit):
            await asyncio.shield(writes.abandon(builder, reply_id))
            raise

    def tools_supported(self) -> bool:
        """False when the server is known not to call tools (its chat template cannot, or it
        refused them): the run is then sent no tool schemas. Unknown counts as supported."""
        capabilities = getattr(self.model, "capabilities", None)
        return getattr(capabilities, "tools", None) is not False

    def _writes(self, session: SessionScope, fence: Fence | None) -> SessionWrites:
        return SessionWrites(messages=self.services.bundle.messages, session=session, fence=fence)

    async def _assemble(self, ctx: ToolContext, schemas: list[dict[str, Any]]) -> Any:
        kv = self.services.bundle.kv
        return await self.services.assembler.aassemble(
            session=ctx.session,
            config=ctx.agent.memory_config,
            agent=ctx.agent.name,
            user=ctx.user_id,
            instructions=ctx.agent.instructions or "",
            note=lambda: take_reorientation(kv=kv, session=ctx.session),
            tools=schemas,
            archive_scope=archive_scope_for(agent=ctx.agent.name, user_id=ctx.user_id),
            supplements=self.supplements_for(ctx.agent),
            participants=ctx.participants,
        )

    # -- a turn's first trip ------------------------------------------------------------------

    async def _begin(
        self, session: SessionScope, text: str, replacing: tuple[str, Any] | None = None
    ) -> tuple[Lease, list[Message], SessionHead, Lease | None]:
        """Take the turn lease and make the turn's first write (``SessionWrites.open``) in one
        trip to a store thread: a turn makes no other store call before its model request but
        the assembly's. A chat turn also takes its gate mark there (None: no gate, or background).
        Raises LeaseBusy. A cancel that lands during the trip lets it finish in its thread; the
        turn is then closed as a stopped one (``_close_orphan``): the stored message gets its
        marked answer and the lease is given back, not left to block the conversation."""
        kv = self.services.bundle.kv
        gate = None if self.background else self.services.gate

        def begin() -> tuple[Lease, list[Message], SessionHead, Lease | None]:
            lease = acquire_lease(kv=kv, scope=session, name=TURN_LEASE, ttl=self.lease_ttl)
            mark = None
            try:
                if replacing is not None:
                    self._drop_last_exchange(session, *replacing)
                mark = gate.mark_turn(self.model, session=session) if gate is not None else None
                return (lease, *self._writes(session, lease.fence).open(text), mark)
            except BaseException:
                for held in (lease, mark):
                    if held is not None:
                        with contextlib.suppress(Exception):
                            release_lease(kv=kv, lease=held)
                raise

        trip = asyncio.ensure_future(_io(begin))
        try:
            return await asyncio.shield(trip)
        except asyncio.CancelledError:
            trip.add_done_callback(lambda done: self._close_orphan(session, done))
            raise

    def _drop_last_exchange(self, session: SessionScope, message_id: str, archive_scope: Any) -> None:
        """Soft-delete the session's last exchange from its user message ``message_id`` on (on a
        store thread, under the turn lease); TurnRejected if that is not allowed (run_turn)."""
        bundle = self.services.bundle
        tail = bundle.messages.read(session, last=REPLACE_TAIL)
        index = next((i for i, m in enumerate(tail) if m.id == message_id), None)
        if index is None or tail[index].role != "user" or tail[index].is_compact_summary:
            raise TurnRejected(NOT_LAST)
        if any(m.role == "user" for m in tail[index + 1:]):
            raise TurnRejected(NOT_LAST)
        archived, _stored = archived_through(bundle, session=session, archive_scope=archive_scope)
        if archived >= (tail[index].seq or 0):
            raise TurnRejected(ARCHIVED)
        bundle.messages.soft_delete(session, [m.id for m in tail[index:]])

    def _close_orphan(self, session: SessionScope, trip: asyncio.Future) -> None:
        """``trip`` (``_begin``'s) finished after its turn was cancelled: close that turn."""
        if trip.cancelled() or trip.exception() is not None:
            return
        lease, mark = trip.result()[0], trip.result()[3]

        async def close() -> None:
            try:
                await self._writes(session, lease.fence).abandon(CompletionBuilder(), None)
            finally:
                await _io(release_lease, kv=self.services.bundle.kv, lease=lease)
                if mark is not None:
                    await _io(release_lease, kv=self.services.bundle.kv, lease=mark)

        def closed(task: asyncio.Task) -> None:
            self._orphans.discard(task)
            if not task.cancelled() and task.exception() is not None:
                logger.warning("could not close the cancelled turn of %s: %s", session.key(), task.exception())

        task = asyncio.ensure_future(close())
        self._orphans.add(task)  # referenced until done: the loop keeps only weak references
        task.add_done_callback(closed)

    def _refuse_oversized(self, agent: Any, text: str) -> None:
        """Refuse, before anything is stored, a message that cannot reach the model whole."""
        config = agent.memory_config
        reason = too_long(text, config=config, reply_reserve=self.services.assembler.reply_reserve(config),
                          instructions=agent.instructions or "", tools=self.roster(agent).schemas())
        if reason:
            raise TurnRejected(reason)

    async def _forget_session(self, session: SessionScope) -> None:
        """A subagent's session memory lives only as long as the subagent."""
        await _io(self.services.bundle.messages.clear, session)
        for item in await _io(self.services.bundle.kv.list, session):
            await _io(self.services.bundle.kv.delete, session, item.key)
        await _io(self.services.catalog.delete_session, session)
