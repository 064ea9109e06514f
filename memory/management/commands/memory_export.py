"""``manage.py memory_export``: write memory to a folder of plain files (see memory/transfer.py).

    manage.py memory_export --scope user:42 --out /tmp/u42           one scope (repeatable)
    manage.py memory_export --session 3f2a... --out DIR              a session and its pruned catalog
    manage.py memory_export --user 42 --out DIR                      everything of one user
    manage.py memory_export --all --out DIR                          every scope (to switch backends)
    manage.py memory_export --all --backend file --out DIR           read another backend than configured

Pair with ``memory_import --from DIR --backend sqlite`` to move memory between backends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import inspection
from memory.management.commands._transfer_stores import stores
from memory.scopes import InvalidScopeId, SessionScope
from memory.stores.registry import BACKENDS
from memory.transfer import TransferError, every_scope, export_scopes, scope_keys, user_scopes


class Command(BaseCommand):
    help = "Export memory (messages, KV files, cursors, archive documents, pruned catalogs) to a folder."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scope", action="append", default=[], metavar="KEY",
                            help="a scope key, e.g. user:42 or composite:agent:default+user:42 (repeatable)")
        parser.add_argument("--session", action="append", default=[], metavar="ID", help="a session id (repeatable)")
        parser.add_argument("--user", metavar="ID", help="every scope of this user id, and their conversations' sessions")
        parser.add_argument("--all", action="store_true", help="every scope that holds data")
        parser.add_argument("--out", required=True, type=Path, help="a new (or empty) folder to write")
        parser.add_argument("--backend", choices=sorted(BACKENDS), help="read this backend (default: the configured one)")

    def handle(self, *args: Any, **options: Any) -> None:
        bundle, catalog = stores(options["backend"])
        try:
            chosen = scope_keys(options["scope"])
            chosen += [SessionScope(s) for s in options["session"]]
        except (TransferError, InvalidScopeId) as exc:
            raise CommandError(str(exc)) from None
        if options["user"]:
            chosen += user_scopes(bundle=bundle, user=options["user"], sessions=self._sessions(options["user"]))
        if options["all"]:
            chosen += every_scope(bundle=bundle, catalog=catalog)
        if not chosen:
            raise CommandError("say what to export: --scope, --session, --user or --all")
        try:
            report = export_scopes(bundle=bundle, catalog=catalog, scopes=chosen, out=options["out"])
        except TransferError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"Exported {report.summary()} from {bundle.backend} to {options['out']}"))

    @staticmethod
    def _sessions(user: str) -> list[str]:
        try:
            resolver = inspection.source().sessions_of_user
        except Exception:
            resolver = None
        return resolver(user) if resolver else []
