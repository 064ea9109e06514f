"""manage.py archive_sessions: archive conversations now, and (re)embed archived messages."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from agents.archiving import archive_one, archiving_on
from agents.runtime.tools.history_tools import archive_scope_for
from memory.archiving import ArchivingStatus, reembed
from memory.scopes import SessionScope


class Command(BaseCommand):
    help = (
        "Archive what conversations hold unarchived (agents with the archive on), each message exactly "
        "once; the conversations themselves are unchanged. --idle archives only conversations quiet for "
        "that many minutes. --reembed stores vectors of the current embedding model for archived "
        "messages that have none (after a change of OPENAI_EMBEDDING_MODEL)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", help="only this agent's conversations")
        parser.add_argument("--user", help="only this user's (id) conversations")
        parser.add_argument("--idle", type=float, default=None, help="only conversations idle this many minutes")
        parser.add_argument("--reembed", action="store_true", help="also store missing vectors")

    def handle(self, *args, agent=None, user=None, idle=None, reembed=False, **options):
        from agents.models import Conversation
        from agents.tasks import current_environment

        if idle is not None and idle < 0:
            raise CommandError("--idle must be at least 0 minutes")
        env = current_environment()
        if agent is not None:
            node = env.find_agent(agent)
            if node is None or not node.is_main:
                raise CommandError(f"no main agent called {agent!r}")
        services = env.services
        rows = Conversation.objects.order_by("updated_at")
        if agent is not None:
            rows = rows.filter(agent=agent)
        if user is not None:
            if not str(user).isdigit():
                raise CommandError("--user takes a user id (a number)")
            rows = rows.filter(owner_id=int(user))
        counts = {status: 0 for status in ArchivingStatus}
        messages = 0
        pairs = set()
        for conversation_id, agent_name, owner in rows.values_list("pk", "agent", "owner_id").iterator():
            node = env.find_agent(agent_name)
            if node is None or not archiving_on(node):
                continue
            result = archive_one(
                services=services, agent=node, user=str(owner), session=SessionScope(conversation_id),
                idle_for=timedelta(minutes=idle) if idle is not None else None,
            )
            counts[result.status] += 1
            messages += result.messages
            pairs.add((node.name, str(owner)))
            if result.status is ArchivingStatus.BUSY:
                self.stderr.write(f"{conversation_id}: busy ({result.reason}); left for the next run")
        self.stdout.write(
            f"archived {messages} messages from {counts[ArchivingStatus.ARCHIVED]} conversations; "
            f"{counts[ArchivingStatus.UP_TO_DATE]} up to date, {counts[ArchivingStatus.NOT_IDLE]} not idle, "
            f"{counts[ArchivingStatus.BUSY]} busy"
        )
        if reembed:
            embedder = services.retrieval.embedder
            if embedder is None:
                raise CommandError("no embedding model is configured (MODEX_EMBEDDINGS=off)")
            done = sum(
                reembed_scope(services, agent_name, owner, embedder) for agent_name, owner in sorted(pairs)
            )
            self.stdout.write(f"stored vectors ({embedder.model}) for {done} archive documents")


def reembed_scope(services, agent: str, user: str, embedder) -> int:
    return reembed(bundle=services.bundle, archive_scope=archive_scope_for(agent=agent, user_id=user), embedder=embedder)
