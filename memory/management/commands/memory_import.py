"""``manage.py memory_import``: load a ``memory_export`` folder into a backend.

    manage.py memory_import --from DIR                     into the configured backend
    manage.py memory_import --from DIR --backend sqlite    into another backend
    manage.py memory_import --from DIR --replace           clear the scopes it holds first

Refuses (and writes nothing) when a scope of the export already holds data in the target,
unless --replace. Switching ``persistence.backend`` in bot.yml migrates nothing: export from
the old backend, import into the new one, then switch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory.management.commands._transfer_stores import stores
from memory.stores.registry import BACKENDS
from memory.transfer import TransferError, import_export


class Command(BaseCommand):
    help = "Import a memory export folder into a backend (refuses non-empty scopes unless --replace)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="source", required=True, type=Path, help="the folder memory_export wrote")
        parser.add_argument("--backend", choices=sorted(BACKENDS), help="write this backend (default: the configured one)")
        parser.add_argument("--replace", action="store_true", help="clear scopes that already hold data first")

    def handle(self, *args: Any, source: Path, backend: str | None, replace: bool, **options: Any) -> None:
        bundle, catalog = stores(backend)
        try:
            report = import_export(bundle=bundle, catalog=catalog, source=source, replace=replace)
        except TransferError as exc:
            raise CommandError(str(exc)) from None
        for warning in report.warnings:
            self.stderr.write(self.style.WARNING(warning))
        self.stdout.write(self.style.SUCCESS(f"Imported {report.summary()} into {bundle.backend}"))
