"""``manage.py memory_import``: load a ``memory_export`` folder into a backend.

    manage.py memory_import --from DIR --scope user:42 --scope composite:agent:default+user:42
    manage.py memory_import --from DIR --every-scope --backend sqlite     (moving backends)
    manage.py memory_import --from DIR --scope user:42 --replace          clear that scope first

An export is data from somewhere else: only the scopes named with --scope are imported, and an
export holding any other scope is refused (--every-scope imports all of them: read its
manifest.json first). The whole folder is checked before anything is written: no symbolic
links, seqs and nesting within bounds, every file well-formed. Refuses (and writes nothing)
when a scope of the export already holds data in the target, unless --replace. Switching
``persistence.backend`` in bot.yml migrates nothing: export from the old backend, import into
the new one, then switch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.management.commands._transfer_stores import stores
from memory.stores.registry import BACKENDS
from memory.transfer import TransferError, import_export, scope_keys


class Command(BaseCommand):
    help = ("Import the named scopes of a memory export folder into a backend "
            "(refuses scopes not named, and non-empty scopes unless --replace).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="source", required=True, type=Path, help="the folder memory_export wrote")
        parser.add_argument("--scope", action="append", default=[], metavar="KEY",
                            help="a scope key to import, e.g. user:42 (repeatable); the export must hold "
                                 "exactly the scopes named")
        parser.add_argument("--every-scope", action="store_true",
                            help="import every scope the export names (read its manifest.json first)")
        parser.add_argument("--backend", choices=sorted(BACKENDS), help="write this backend (default: the configured one)")
        parser.add_argument("--replace", action="store_true", help="clear scopes that already hold data first")

    def handle(self, *args: Any, source: Path, scope: list[str], every_scope: bool, backend: str | None,
               replace: bool, **options: Any) -> None:
        if bool(scope) == bool(every_scope):
            raise CommandError("say which scopes to import: --scope KEY (repeatable), or --every-scope")
        try:
            allowed = [s.key() for s in scope_keys(scope)] if scope else None
        except TransferError as exc:
            raise CommandError(str(exc)) from None
        bundle, catalog = stores(backend)
        try:
            report = import_export(bundle=bundle, catalog=catalog, source=source, scopes=allowed, replace=replace)
        except TransferError as exc:
            raise CommandError(str(exc)) from None
        for warning in report.warnings:
            self.stderr.write(self.style.WARNING(warning))
        self.stdout.write(self.style.SUCCESS(f"Imported {report.summary()} into {bundle.backend}"))
