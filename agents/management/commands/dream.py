"""``manage.py dream``: run the Dream Engine now, with progress.

    manage.py dream                      every agent with archive + core on, every user, incremental
    manage.py dream --agent default      one agent
    manage.py dream --user 42            one user (the account's id, as the chat uses it)
    manage.py dream --full               re-read every archive document, not only the new ones

On demand means now: a pending backoff after a failure is ignored. Pairs with nothing new are
skipped. Every warning is printed (a model whose answers were not the JSON asked for, edits that
were all refused), and so are the changes to SOUL.md that were proposed to staff instead of
written (SOUL.md is shared by every user of the agent). Exits with an error when a consolidation
failed (after trying the others).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.tasks import current_environment, dream_engine
from memory.dream import ConsolidationMode, ConsolidationProgress, ConsolidationStatus, default_archive_scope


class Command(BaseCommand):
    help = "Consolidate archived conversations into core memory (SOUL.md, USER.md, MEMORY.md) now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="only this main agent (default: every agent with archive and core on)")
        parser.add_argument("--user", help="only this user id (default: every user)")
        parser.add_argument("--full", action="store_true", help="re-read every archive document, not only new ones")

    def handle(self, *args: Any, agent: str | None, user: str | None, full: bool, **options: Any) -> None:
        env = current_environment()
        agents = self._agents(env, agent)
        users = (
            [user] if user else [str(pk) for pk in get_user_model().objects.order_by("pk").values_list("pk", flat=True)]
        )
        mode = ConsolidationMode.FULL if full else ConsolidationMode.INCREMENTAL
        engine = dream_engine(services=env.services)
        runs = failures = 0
        for node in agents:
            for uid in users:
                scope = default_archive_scope(agent=node.name, user=uid)
                archive = env.services.bundle.archive
                work = archive.list(scope, limit=1) if full else engine.has_pending(scope=scope)
                if not work:
                    continue
                runs += 1
                label = f"{node.name} / user {uid}"
                self.stdout.write(f"{label}: consolidating ({mode.value})…")
                result = engine.consolidate(
                    agent=node.name,
                    user=uid,
                    config=node.memory_config,
                    mode=mode,
                    force=True,
                    progress=lambda p, label=label: self._progress(label, p),
                )
                failures += self._report(label, result)
        if not runs:
            self.stdout.write("Nothing to consolidate: no archive documents are waiting.")
        if failures:
            raise CommandError(f"{failures} consolidation(s) failed; nothing of the failed batches was applied.")

    def _agents(self, env: Any, name: str | None) -> list[Any]:
        from agents.declarations import get_declaration

        if name is not None:
            node = env.find_agent(name)
            if node is None or not node.is_main:
                raise CommandError(f"no main agent called {name!r} in the declaration")
            if not (node.memory_config.archive_enabled and node.memory_config.core_enabled):
                raise CommandError(
                    f"{name} has archive or core memory off: set archive_enabled and core_enabled to true in "
                    "its memory: block in config/scopes/bot.yml and restart"
                )
            return [node]
        found = (env.find_agent(n.name) for n in get_declaration().main_agents())
        nodes = [n for n in found if n is not None and n.memory_config.archive_enabled and n.memory_config.core_enabled]
        if not nodes:
            self.stdout.write(
                "No agent has both archive_enabled and core_enabled on; the Dream Engine has nothing to do."
            )
        return nodes

    def _progress(self, label: str, progress: ConsolidationProgress) -> None:
        self.stdout.write(
            f"{label}: {progress.documents} document(s) read, through seq {progress.through_seq} of "
            f"{progress.last_seq}, {progress.edits} edit(s) so far"
        )

    def _report(self, label: str, result: Any) -> int:
        if result.status is ConsolidationStatus.FAILED:
            when = (
                f"; the next automatic attempt is after {result.next_attempt_at:%Y-%m-%d %H:%M} UTC"
                if result.next_attempt_at
                else ""
            )
            self.stderr.write(f"{label}: FAILED (run {result.run_id}): {result.error}{when}")
            self._warn(label, result)
            if result.failure is not None and result.failure.answer:
                self.stderr.write(f"{label}:   the model answered: {result.failure.answer!r}")
            return 1
        if result.status is ConsolidationStatus.BUSY:
            self.stdout.write(f"{label}: skipped, another consolidation is running")
            return 0
        if result.status is ConsolidationStatus.SUPERSEDED:
            self.stderr.write(f"{label}: stopped (run {result.run_id}): {result.error}; another run took over and "
                              "its work stands")
            return 0
        files = ", ".join(f"{file} v{version}" for file, version in result.files.items()) or "no file changed"
        self.stdout.write(
            self.style.SUCCESS(
                f"{label}: {result.documents} document(s), {result.edits} edit(s) applied ({files}); "
                f"cursor {result.cursor}"
            )
        )
        for edit in result.applied:
            self.stdout.write(f"  {edit.describe()}")
        for proposal in result.proposals:
            self.stdout.write(f"  SOUL.md (proposed to staff, not written): {proposal}")
        self._warn(label, result)
        return 0

    def _warn(self, label: str, result: Any) -> None:
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(f"{label}: WARNING: {warning}"))
