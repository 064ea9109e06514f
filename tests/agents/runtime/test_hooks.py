"""Runtime hooks: cleanup is an installed BEFORE_STEP hook a deployment can replace or remove."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from agents.declarations import load_declaration
from agents.llm import OfflineChatModel
from agents.runtime import hooks as runtime_hooks
from agents.runtime.cleanup import CLEANUP_HOOK
from agents.runtime.events import CleanupDone, CleanupStarted, RuntimeEvent
from agents.runtime.hooks import HookPoint, RuntimeHooks
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from memory.scopes import SessionScope

REPO = Path(__file__).resolve().parents[3]
CLEANUP_INSTALLER = "agents.runtime.cleanup.install"
BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True))]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def small_agent():
    node = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    # Long-term layers off (as the preset has them; the shipped file turns them on): only cleanup runs.
    return replace(node, memory_config=replace(node.memory_config, context_window=4096, compression_threshold=600,
                                               keep_tokens=200, archive_enabled=False, core_enabled=False))


async def talk(runtime, agent, session, turns=8):
    events: list[RuntimeEvent] = []
    for n in range(turns):
        text = f"turn {n}: " + "a long paragraph about the garden and its many plants " * 12
        events += [e async for e in runtime.run_turn(agent=agent, user_id="7", session=session, text=text)]
    return events


def test_the_app_installs_the_configured_hooks_in_order():
    assert [name for name, _ in runtime_hooks.installers()] == list(settings.MODEX_RUNTIME_HOOKS)
    assert settings.MODEX_RUNTIME_HOOKS[0] == CLEANUP_INSTALLER


async def test_with_the_cleanup_hook_a_long_session_is_compacted(tmp_path, backend):
    runtime = Runtime(services=build_services(backend=backend, workspace=tmp_path, model=OfflineChatModel()))
    agent = small_agent()
    assert runtime.hooks_for(agent).names(HookPoint.BEFORE_STEP) == [CLEANUP_HOOK]
    events = await talk(runtime, agent, SessionScope("with-cleanup"))
    assert any(isinstance(e, CleanupDone) and e.committed for e in events)
    assert await sync_to_async(runtime.services.catalog.count)(SessionScope("with-cleanup")) > 0


async def test_removing_the_cleanup_installer_means_no_cleanup(tmp_path, backend):
    before = runtime_hooks.installers()
    assert runtime_hooks.unregister_installer(CLEANUP_INSTALLER)
    try:
        runtime = Runtime(services=build_services(backend=backend, workspace=tmp_path, model=OfflineChatModel()))
        agent = small_agent()
        assert CLEANUP_HOOK not in runtime.hooks_for(agent).names(HookPoint.BEFORE_STEP)
        session = SessionScope("no-cleanup")
        events = await talk(runtime, agent, session)
    finally:
        for name, _ in runtime_hooks.installers():
            runtime_hooks.unregister_installer(name)
        for name, installer in before:
            runtime_hooks.register_installer(name, installer)
    assert not [e for e in events if isinstance(e, CleanupStarted | CleanupDone)]
    head = await sync_to_async(runtime.services.bundle.messages.head)(session)
    assert head.tokens > agent.memory_config.threshold  # the session grew past its threshold, uncompacted
    assert await sync_to_async(runtime.services.catalog.count)(session) == 0


async def test_a_replacement_hook_runs_instead_and_its_events_join_the_turn(tmp_path):
    seen = []

    async def my_cleanup(*, ctx, step, force, **_):
        seen.append((ctx.session.id, step, force))
        yield CleanupDone(False, "custom policy: never compact", 0, 0, 0, 0, None, False)

    def install_mine(hooks: RuntimeHooks, agent, runtime) -> None:
        hooks.register(HookPoint.BEFORE_STEP, my_cleanup, name="my_cleanup")

    runtime = Runtime(
        services=build_services(backend="file", workspace=tmp_path, model=OfflineChatModel()),
        installers=[("mine", install_mine)],
    )
    events = [e async for e in runtime.run_turn(agent=small_agent(), user_id="7", session=SessionScope("r"), text="Hi")]
    assert seen and seen[0] == ("r", 1, False)
    assert [e.reason for e in events if isinstance(e, CleanupDone)] == ["custom policy: never compact"] * len(seen)


async def test_a_failing_hook_or_installer_never_breaks_the_turn(tmp_path):
    async def broken(**_):
        raise RuntimeError("boom")
        yield  # an async generator

    def install_broken(hooks, agent, runtime):
        hooks.register(HookPoint.BEFORE_STEP, broken, name="broken")

    def broken_installer(hooks, agent, runtime):
        raise RuntimeError("cannot install")

    runtime = Runtime(
        services=build_services(backend="file", workspace=tmp_path, model=OfflineChatModel()),
        installers=[("a", install_broken), ("b", broken_installer)],
    )
    agent = small_agent()
    assert runtime.hooks_for(agent).names(HookPoint.BEFORE_STEP) == ["broken"]
    events = [e async for e in runtime.run_turn(agent=agent, user_id="7", session=SessionScope("f"), text="Hi")]
    assert type(events[-1]).__name__ == "TurnFinished"
