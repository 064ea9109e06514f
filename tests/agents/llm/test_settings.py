"""model_from_settings: the environment picks the model; bad values fail with the variable's name."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents.llm import OfflineChatModel, OpenAIChatModel, model_from_settings
from agents.llm.openai import PLACEHOLDER_API_KEY, redact_url

VARIABLES = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
    "OPENAI_TIMEOUT",
    "OPENAI_MAX_RETRIES",
    "OPENAI_INCLUDE_USAGE",
    "OPENAI_CONTEXT_WINDOW",
    "MODEX_OFFLINE_CHUNK_DELAY_MS",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_without_a_base_url_the_offline_model_is_used(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ignored")
    model = model_from_settings()
    assert isinstance(model, OfflineChatModel) and model.chunk_delay == 0
    monkeypatch.setenv("MODEX_OFFLINE_CHUNK_DELAY_MS", "40")
    assert model_from_settings().chunk_delay == pytest.approx(0.04)


def test_an_endpoint_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1/")
    monkeypatch.setenv("OPENAI_MODEL", "qwen3:8b")
    monkeypatch.setenv("OPENAI_TIMEOUT", "12.5")
    monkeypatch.setenv("OPENAI_MAX_RETRIES", "0")
    model = model_from_settings()
    assert isinstance(model, OpenAIChatModel) and not model.is_offline
    assert (model.name, model.base_url, model.timeout, model.max_retries) == (
        "qwen3:8b",
        "http://127.0.0.1:11434/v1",
        12.5,
        0,
    )
    assert model._api_key == PLACEHOLDER_API_KEY  # local servers need no key
    assert model.describe() == "qwen3:8b at http://127.0.0.1:11434/v1"


def test_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    model = model_from_settings(base_url="https://api.example.com/v1", api_key="sk-arg", model="arg-model")
    assert (model.base_url, model.name, model._api_key) == ("https://api.example.com/v1", "arg-model", "sk-arg")


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"OPENAI_BASE_URL": "http://h/v1"}, "OPENAI_MODEL"),
        ({"OPENAI_BASE_URL": "localhost:8000", "OPENAI_MODEL": "m"}, "OPENAI_BASE_URL"),
        ({"OPENAI_BASE_URL": "http://h/v1", "OPENAI_MODEL": "m", "OPENAI_TIMEOUT": "soon"}, "OPENAI_TIMEOUT"),
        ({"OPENAI_BASE_URL": "http://h/v1", "OPENAI_MODEL": "m", "OPENAI_MAX_RETRIES": "-1"}, "OPENAI_MAX_RETRIES"),
        ({"MODEX_OFFLINE_CHUNK_DELAY_MS": "fast"}, "MODEX_OFFLINE_CHUNK_DELAY_MS"),
        ({"OPENAI_BASE_URL": "http://h/v1", "OPENAI_MODEL": "m", "OPENAI_INCLUDE_USAGE": "maybe"}, "OPENAI_INCLUDE_USAGE"),
        ({"OPENAI_BASE_URL": "http://h/v1", "OPENAI_MODEL": "m", "OPENAI_CONTEXT_WINDOW": "big"}, "OPENAI_CONTEXT_WINDOW"),
        ({"OPENAI_BASE_URL": "http://h/v1", "OPENAI_MODEL": "m", "OPENAI_CONTEXT_WINDOW": "100"}, "OPENAI_CONTEXT_WINDOW"),
    ],
)
def test_bad_values_name_the_variable(monkeypatch, env, variable):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=variable):
        model_from_settings()


def test_credentials_in_the_url_are_never_shown(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    model = model_from_settings(base_url="https://user:hunter2@llm.example.com:8443/v1", model="m")
    assert redact_url(model.base_url) == "https://llm.example.com:8443/v1"
    for text in (repr(model), model.describe()):
        assert "hunter2" not in text and "sk-very-secret" not in text


def test_include_usage_and_the_context_window_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("OPENAI_MODEL", "gemma")
    model = model_from_settings()
    assert (model.include_usage, model.context_window) == (True, None)  # defaults: usage on, bot.yml's window
    monkeypatch.setenv("OPENAI_INCLUDE_USAGE", "false")
    monkeypatch.setenv("OPENAI_CONTEXT_WINDOW", "8192")
    model = model_from_settings()
    assert (model.include_usage, model.context_window) == (False, 8192)


def test_every_model_variable_is_documented():
    """Each variable agents/llm/settings.py reads appears in the README's configuration table."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    source = (root / "agents" / "llm" / "settings.py").read_text()
    names = set(re.findall(r'"((?:OPENAI|MODEX)_[A-Z0-9_]+)"', source))
    readme = (root / "README.md").read_text()
    assert {"OPENAI_INCLUDE_USAGE", "OPENAI_CONTEXT_WINDOW", "OPENAI_BASE_URL"} <= names
    assert sorted(n for n in names if f"`{n}`" not in readme) == []


def test_an_endpoint_without_a_model_is_a_boot_error(monkeypatch):
    from agents.llm.checks import MODEL_SETTINGS, check_model_settings

    assert check_model_settings() == []
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    [error] = check_model_settings()
    assert error.id == MODEL_SETTINGS and error.is_serious() and "OPENAI_MODEL" in error.msg
    monkeypatch.setenv("OPENAI_MODEL", "qwen2.5-7b")
    assert check_model_settings() == []  # no request is made: the check only reads settings


def test_manage_check_refuses_to_boot_without_the_model_name(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(DJANGO_SETTINGS_MODULE="modex_web.settings_test", MODEX_WORKSPACE=str(tmp_path),
               OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "modex.E101" in done.stderr and "OPENAI_MODEL is required" in done.stderr
