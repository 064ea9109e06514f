"""Typed readers for settings that come from the environment.

Each helper raises ``ImproperlyConfigured`` naming the variable and the value it could not
use, so a bad deployment fails at boot with a message a person can act on.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use one of true/false, 1/0, yes/no, on/off.")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}.")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number.")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value:g} must be at least {minimum:g}.")
    return value


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """``SECURE_PROXY_SSL_HEADER`` from ``"Header-Name: value"`` (e.g. ``X-Forwarded-Proto: https``).

    Set it only behind a proxy that always sets (or strips) that header: Django then trusts it
    to say a request came in over HTTPS.
    """
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    header, sep, value = raw.partition(":")
    header, value = header.strip(), value.strip()
    if not sep or not header or not value or not all(c.isalnum() or c == "-" for c in header):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a 'Header-Name: value' pair; e.g. {name}='X-Forwarded-Proto: https'."
        )
    return "HTTP_" + header.upper().replace("-", "_"), value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_path(name: str, default: Path, *, base: Path) -> Path:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        path = default
    else:
        path = Path(raw.strip()).expanduser()
    if not path.is_absolute():
        path = base / path
    return path.resolve()


def private_workspace(path: Path) -> Path:
    """Create the workspace readable by the service's user only (0700), and tighten one this
    user owns: it holds the database, every conversation, the catalogs and the secret key."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except OSError:
        pass  # not ours to change (a mount, another owner): the operator's choice stands
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist, so whatever creates it later
    (SQLite for state.db, and its -wal and -shm files, which take the database file's mode)
    does not make it readable by others; tighten an existing one this user owns."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
                path.chmod(0o600)
        except OSError:
            pass
    except OSError:
        pass  # e.g. the directory is not there yet: the database layer reports that better
    else:
        os.close(fd)


def secret_key(*, debug: bool, workspace: Path) -> str:
    """DJANGO_SECRET_KEY, or in DEBUG a generated key persisted in the workspace."""
    value = os.environ.get("DJANGO_SECRET_KEY")
    if value:
        if len(value) < 32:
            raise ImproperlyConfigured("DJANGO_SECRET_KEY must be at least 32 characters long.")
        return value
    if not debug:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it to a long random string "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set DJANGO_DEBUG=true for local development."
        )
    key_file = workspace / ".secret_key"
    try:
        return key_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    workspace.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    tmp = key_file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(key)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        # Two processes starting at once must end up with one key: link fails if it exists.
        os.link(tmp, key_file)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return key_file.read_text(encoding="utf-8").strip()


def database_config(*, url: str | None, workspace: Path) -> dict:
    """Django DATABASES['default'] from DATABASE_URL (sqlite:///path or postgres://...)."""
    if not url:
        private_file(workspace / "state.db")
        return sqlite_config(workspace / "state.db")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        # sqlite:///relative/or/absolute, sqlite:////abs/path
        raw = unquote(parts.path)
        if raw.startswith("/"):  # the third slash of sqlite:/// separates scheme from path
            raw = raw[1:]
        if not raw:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no SQLite file.")
        path = Path(raw)
        if not path.is_absolute():
            path = workspace / path
        private_file(path)
        return sqlite_config(path)
    if scheme in {"postgres", "postgresql", "pgsql"}:
        if not parts.path.strip("/"):
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no database.")
        options = dict(parse_qsl(parts.query))
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": unquote(parts.hostname or ""),
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL scheme {scheme!r} is not supported; use sqlite:///path or postgres://user:pass@host/db."
    )


def sqlite_config(path: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                "PRAGMA synchronous=NORMAL;"
                "PRAGMA busy_timeout=10000;"
                "PRAGMA foreign_keys=ON;"
            ),
            "transaction_mode": "IMMEDIATE",
            "timeout": 10,
        },
        "TEST": {"NAME": str(path.with_name("test_" + path.name))},
    }
