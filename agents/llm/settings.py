"""``model_from_settings``: the ChatModel the environment configures (``OPENAI_*``), offline
without ``OPENAI_BASE_URL``; a bad value is ``ImproperlyConfigured`` naming its variable.
``model_caps``: the completion-token cap of each kind of model call (``MODEX_MAX_TOKENS_*``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from agents.llm.base import ChatModel
from agents.llm.openai import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, OpenAIChatModel, redact_url


def _shown(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _env_number(name: str, default: float, *, minimum: float, parse: type, what: str) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {what}.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={_shown(value)} must be at least {_shown(minimum)}.")
    return value


def _env_float(name: str, default: float, *, minimum: float) -> float:
    return _env_number(name, default, minimum=minimum, parse=float, what="a number of seconds")


def _env_int(name: str, default: int, *, minimum: int) -> int:
    return _env_number(name, default, minimum=minimum, parse=int, what="an integer")


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use one of true/false, 1/0, yes/no, on/off.")


def model_from_settings(
    *, base_url: str | None = None, api_key: str | None = None, model: str | None = None
) -> ChatModel:
    """The configured ChatModel: arguments first, then the environment.

    * ``OPENAI_BASE_URL`` unset (and no ``base_url``): the built-in ``OfflineChatModel``
      (``MODEX_OFFLINE_CHUNK_DELAY_MS`` slows its streaming down for demos);
    * otherwise ``OpenAIChatModel`` with ``OPENAI_API_KEY`` (optional: local servers need none),
      ``OPENAI_MODEL`` (required), ``OPENAI_TIMEOUT`` (seconds, default 60),
      ``OPENAI_MAX_RETRIES`` (default 3), ``OPENAI_INCLUDE_USAGE`` (default true: send
      ``stream_options.include_usage``) and ``OPENAI_CONTEXT_WINDOW`` (the server's real window
      in tokens; unset: the server's model metadata when it reports one, else bot.yml's).

    Raises ``ImproperlyConfigured`` naming the variable on a bad value.
    """
    base_url = base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
    if base_url is None:
        from agents.llm.offline import OfflineChatModel

        delay_ms = _env_float("MODEX_OFFLINE_CHUNK_DELAY_MS", 0.0, minimum=0.0)
        return OfflineChatModel(chunk_delay=delay_ms / 1000)
    if not urlsplit(base_url).scheme.startswith("http"):
        raise ImproperlyConfigured(
            f"OPENAI_BASE_URL={redact_url(base_url)!r} must be an http(s) URL, e.g. http://127.0.0.1:11434/v1."
        )
    model = model or os.environ.get("OPENAI_MODEL", "").strip() or None
    if model is None:
        raise ImproperlyConfigured("OPENAI_MODEL is required when OPENAI_BASE_URL is set (the endpoint's model name).")
    return OpenAIChatModel(
        base_url=base_url,
        api_key=api_key or os.environ.get("OPENAI_API_KEY", "").strip() or None,
        model=model,
        timeout=_env_float("OPENAI_TIMEOUT", DEFAULT_TIMEOUT, minimum=0.001),
        max_retries=_env_int("OPENAI_MAX_RETRIES", DEFAULT_MAX_RETRIES, minimum=0),
        include_usage=_env_bool("OPENAI_INCLUDE_USAGE", True),
        context_window=_env_int("OPENAI_CONTEXT_WINDOW", 0, minimum=256) or None,
    )


#: Defaults of ``MODEX_MAX_TOKENS_*`` (modex_web/settings.py reads the environment).
DEFAULT_SUMMARY_TOKENS = 1024
DEFAULT_DREAM_TOKENS = 1024
DEFAULT_REVIEW_TOKENS = 512


@dataclass(frozen=True, slots=True)
class ModelCaps:
    """The ``max_tokens`` each caller sends, so that no call runs on without end (a small model
    can write thousands of tokens into one reply).

    ``reply``: the chat reply (and a subagent's), per model step; None means the agent's reply
    reserve (what context assembly leaves free for the reply: an eighth of the window, at most
    1024), so a capped reply always fits the window. ``summary``: one compact-summary call of a
    cleanup. ``dream``: one Dream Engine call. ``review``: one step of the experience reviewer.
    A reply cut by its cap ends with ``finish_reason`` ``length`` and is stored marked as truncated.
    """

    reply: int | None = None
    summary: int = DEFAULT_SUMMARY_TOKENS
    dream: int = DEFAULT_DREAM_TOKENS
    review: int = DEFAULT_REVIEW_TOKENS

    def reply_for(self, reserve: int) -> int:
        """The chat reply's cap for an agent whose reply reserve is ``reserve`` tokens."""
        return self.reply if self.reply else max(1, reserve)


def model_caps() -> ModelCaps:
    """The caps from settings (``MODEX_MAX_TOKENS_REPLY``, ``_SUMMARY``, ``_DREAM``, ``_REVIEW``)."""
    from django.conf import settings

    return ModelCaps(
        reply=getattr(settings, "MODEX_MAX_TOKENS_REPLY", 0) or None,
        summary=getattr(settings, "MODEX_MAX_TOKENS_SUMMARY", DEFAULT_SUMMARY_TOKENS),
        dream=getattr(settings, "MODEX_MAX_TOKENS_DREAM", DEFAULT_DREAM_TOKENS),
        review=getattr(settings, "MODEX_MAX_TOKENS_REVIEW", DEFAULT_REVIEW_TOKENS),
    )
