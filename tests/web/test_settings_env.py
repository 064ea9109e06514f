from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from modex_web import env


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("1", True), ("YES", True), ("off", False), ("0", False), ("", False)])
def test_env_bool(monkeypatch, raw, value):
    monkeypatch.setenv("X_FLAG", raw)
    assert env.env_bool("X_FLAG", not value) is value


def test_env_bool_rejects_garbage(monkeypatch):
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG='maybe' is not a boolean"):
        env.env_bool("X_FLAG", False)


def test_env_int(monkeypatch):
    monkeypatch.setenv("X_INT", "12")
    assert env.env_int("X_INT", 3) == 12
    monkeypatch.setenv("X_INT", "twelve")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env.env_int("X_INT", 3)
    monkeypatch.setenv("X_INT", "1")
    with pytest.raises(ImproperlyConfigured, match="at least 5"):
        env.env_int("X_INT", 3, minimum=5)


def test_env_list(monkeypatch):
    monkeypatch.setenv("X_LIST", " a.example , b.example,,")
    assert env.env_list("X_LIST", []) == ["a.example", "b.example"]


def test_secret_key_is_generated_once_and_persisted_in_debug(tmp_path, monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    first = env.secret_key(debug=True, workspace=tmp_path)
    assert len(first) >= 50
    assert env.secret_key(debug=True, workspace=tmp_path) == first
    assert (tmp_path / ".secret_key").stat().st_mode & 0o777 == 0o600


def test_secret_key_is_required_without_debug(tmp_path, monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY is not set"):
        env.secret_key(debug=False, workspace=tmp_path)
    monkeypatch.setenv("DJANGO_SECRET_KEY", "short")
    with pytest.raises(ImproperlyConfigured, match="at least 32"):
        env.secret_key(debug=False, workspace=tmp_path)


def test_default_database_is_sqlite_in_the_workspace_with_wal(tmp_path):
    config = env.database_config(url=None, workspace=tmp_path)
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == str(tmp_path / "state.db")
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]
    assert "synchronous=NORMAL" in config["OPTIONS"]["init_command"]
    assert "busy_timeout" in config["OPTIONS"]["init_command"]
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_database_urls(tmp_path):
    pg = env.database_config(url="postgres://modex:p%40ss@db.internal:5433/modex?sslmode=require", workspace=tmp_path)
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == ("modex", "modex", "p@ss", "db.internal", "5433")
    assert pg["OPTIONS"] == {"sslmode": "require"}
    assert env.database_config(url="sqlite:///other.db", workspace=tmp_path)["NAME"] == str(tmp_path / "other.db")
    assert env.database_config(url="sqlite:////var/x.db", workspace=tmp_path)["NAME"] == "/var/x.db"
    with pytest.raises(ImproperlyConfigured, match="not supported"):
        env.database_config(url="mysql://x/y", workspace=tmp_path)
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        env.database_config(url="postgres://host", workspace=tmp_path)


def test_env_path_is_resolved_against_the_repo(monkeypatch, tmp_path):
    monkeypatch.setenv("X_PATH", "ws")
    assert env.env_path("X_PATH", Path("unused"), base=tmp_path) == (tmp_path / "ws").resolve()


def test_env_float(monkeypatch):
    monkeypatch.setenv("X_FLOAT", "2.5")
    assert env.env_float("X_FLOAT", 1.0) == 2.5
    monkeypatch.setenv("X_FLOAT", "")
    assert env.env_float("X_FLOAT", 1.0) == 1.0
    for bad, message in (("soon", "not a number"), ("nan", "not a finite number"), ("0.5", "at least 1")):
        monkeypatch.setenv("X_FLOAT", bad)
        with pytest.raises(ImproperlyConfigured, match=message):
            env.env_float("X_FLOAT", 3.0, minimum=1.0)


def test_env_proxy_ssl_header(monkeypatch):
    monkeypatch.delenv("X_PROXY", raising=False)
    assert env.env_proxy_ssl_header("X_PROXY") is None
    monkeypatch.setenv("X_PROXY", " X-Forwarded-Proto :  https ")
    assert env.env_proxy_ssl_header("X_PROXY") == ("HTTP_X_FORWARDED_PROTO", "https")
    for bad in ("https", "X-Forwarded-Proto:", ": https", "X Forwarded: https"):
        monkeypatch.setenv("X_PROXY", bad)
        with pytest.raises(ImproperlyConfigured, match="is not a 'Header-Name: value' pair"):
            env.env_proxy_ssl_header("X_PROXY")


def test_every_environment_variable_of_the_settings_is_documented():
    """settings.py reads its environment only through modex_web/env.py: each name it passes
    there must appear in the README's configuration table."""
    import re

    root = Path(__file__).resolve().parents[2]
    source = (root / "modex_web" / "settings.py").read_text()
    names = set(re.findall(r'env_\w+\(\s*"([A-Z][A-Z0-9_]+)"', source)) | {"DJANGO_SECRET_KEY"}
    readme = (root / "README.md").read_text()
    assert len(names) > 15
    assert sorted(n for n in names if f"`{n}`" not in readme) == []
