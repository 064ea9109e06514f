"""Which storage backend a configuration value names, and how to open it.

``persistence.backend`` in bot.yml (or ``MODEX_PERSISTENCE_BACKEND``) is one of BACKENDS. Adding
a backend is one module with an ``open_bundle(*, root, using)`` function and one entry here.
Modules are imported on first use, so the file backend never loads the database layer.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from memory.stores.base import MemoryStoreBundle, StoreError

#: Backend name -> module whose ``open_bundle(*, root, using)`` returns the bundle.
BACKENDS: dict[str, str] = {
    "file": "memory.stores.file",  # DefaultScopedStorage under <workspace>/memory
    "sqlite": "memory.stores.sql",  # Sql*Store adapters; also PostgreSQL when DATABASE_URL says so
}


class UnknownBackend(StoreError, ValueError):
    """A backend name that is not in BACKENDS."""


def open_bundle(backend: str, *, root: Path | None = None, using: str = "default") -> MemoryStoreBundle:
    """The four stores of ``backend``.

    ``root`` is the file backend's directory (default ``settings.MODEX_WORKSPACE / "memory"``);
    ``using`` is the Django database alias of the SQL backend. Each backend ignores the other's
    argument. Raises UnknownBackend naming the valid choices.
    """
    module = BACKENDS.get(backend) if isinstance(backend, str) else None
    if module is None:
        raise UnknownBackend(
            f"unknown persistence backend {backend!r}; choose one of: {', '.join(sorted(BACKENDS))}"
        )
    return import_module(module).open_bundle(root=None if root is None else Path(root), using=using)
