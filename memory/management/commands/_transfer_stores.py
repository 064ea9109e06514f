"""The stores the memory_export / memory_import commands work on (shared by both)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from memory import inspection
from memory.compression.pruned import PrunedCatalog
from memory.stores.base import MemoryStoreBundle
from memory.stores.registry import BACKENDS, open_bundle


def stores(backend: str | None) -> tuple[MemoryStoreBundle, PrunedCatalog]:
    """``backend``'s stores over the workspace, or (None) the ones the process is configured for."""
    if backend is None:
        try:
            src = inspection.source()
        except Exception as exc:  # no provider, or a declaration that does not load
            raise CommandError(f"cannot tell the configured backend ({exc}); pass --backend") from None
        return src.bundle, src.catalog
    if backend not in BACKENDS:
        raise CommandError(f"unknown backend {backend!r}; choose one of: {', '.join(sorted(BACKENDS))}")
    workspace = Path(settings.MODEX_WORKSPACE)
    return open_bundle(backend, root=workspace / "memory"), PrunedCatalog(workspace / "pruned")
