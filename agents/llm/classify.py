"""Reading an endpoint's error: its text whatever the body's shape, and what kind of error it is.

OpenAI-compatible servers disagree on error bodies: OpenAI's ``{"error": {"message", ...}}``,
``{"error": "text"}``, FastAPI's ``{"detail": "text"}`` or ``{"detail": [{"loc", "msg"}]}``
(llama-cpp-python, many proxies), ``{"message": ...}``, or plain text. ``error_text`` gets the
human part out of any of them. ``classify`` decides what the error means, the same way for an
HTTP error status and for an error sent inside a stream that began with 200 OK.
"""

from __future__ import annotations

import enum
import re
from typing import Any

_MAX_DETAIL = 500

_CONTEXT_MARKERS = re.compile(
    r"context[_ ]length|maximum context|context window|exceed_context_size|exceeds the available context"
    r"|prompt is too long|reduce the length of the messages|input is too long|too many tokens"
    r"|longer than the model'?s context|exceeds? (?:the )?(?:model'?s )?(?:maximum )?context",
    re.IGNORECASE,
)
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length", "exceed_context_size_error"})

# Jinja chat templates (Mistral, Llama-2, Gemma on llama.cpp, vLLM, TGI) raise these; retrying
# the same conversation can only fail the same way.
_TEMPLATE_MARKERS = re.compile(
    r"roles must alternate|chat[_ ]template|template error|TemplateError|jinja|raise_exception"
    r"|only user and assistant roles are supported|conversation roles",
    re.IGNORECASE,
)
_STREAM_OPTIONS_MARKERS = re.compile(r"stream_options|include_usage", re.IGNORECASE)
_RESPONSE_FORMAT_MARKERS = re.compile(r"response_format|json_object|json_schema", re.IGNORECASE)
# Ollama: "<model> does not support tools"; vLLM: '"auto" tool choice requires
# --enable-auto-tool-choice ...'; llama.cpp: "tools param requires --jinja flag".
_TOOLS_MARKERS = re.compile(
    r"does not support tools|tools? (?:are|is) not supported|tool choice requires|tool_choice.{0,40}requires"
    r"|tools param requires|does not support (?:function|tool) call",
    re.IGNORECASE,
)

# "maximum context length is 4096 tokens", "available context size (4096 tokens)",
# "context window of 4096 tokens", "n_ctx: 4096".
_WINDOW_PATTERNS = (
    re.compile(r"maximum context length (?:is|of) (\d{3,8})", re.IGNORECASE),
    re.compile(r"context (?:size|window|length) (?:of |is |\()?(\d{3,8}) tokens", re.IGNORECASE),
    re.compile(r"\bn_ctx\W{0,4}(\d{3,8})", re.IGNORECASE),
)


class ErrorKind(enum.Enum):
    CONTEXT_LENGTH = "context_length"
    TEMPLATE = "template"
    STREAM_OPTIONS = "stream_options"
    RESPONSE_FORMAT = "response_format"
    TOOLS_UNSUPPORTED = "tools_unsupported"
    RATE_LIMITED = "rate_limited"
    TRANSIENT = "transient"
    REJECTED = "rejected"


def error_text(body: Any, fallback: str = "") -> str:
    """The human-readable part of an error body of any common shape, at most 500 characters."""
    text = _text_of(body)
    if not text:
        text = fallback
    return " ".join(text.split())[:_MAX_DETAIL]


def _text_of(body: Any) -> str:
    if body is None:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        return body.strip()
    if isinstance(body, list):
        return "; ".join(t for t in (_text_of(item) for item in body) if t)
    if isinstance(body, dict):
        for key in ("error", "detail", "message", "msg", "error_message", "errors"):
            if key in body:
                inner = _text_of(body[key])
                if inner:
                    if key == "msg" and isinstance(body.get("loc"), list):
                        where = ".".join(str(part) for part in body["loc"])
                        return f"{where}: {inner}"
                    return inner
        return ""
    return str(body)


def error_code(body: Any) -> str:
    """The error's ``code`` or ``type`` when the body has one (OpenAI and llama.cpp shapes)."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(inner, dict):
        return ""
    parts = [str(inner.get(key)) for key in ("code", "type") if isinstance(inner.get(key), str)]
    return " ".join(parts)


def window_hint(body: Any, text: str) -> int | None:
    """The context window an overflow error states (``n_ctx`` field or its message), if any."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict):
        n_ctx = inner.get("n_ctx")
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
            return n_ctx
    for pattern in _WINDOW_PATTERNS:
        if match := pattern.search(text or ""):
            return int(match.group(1))
    return None


def classify(*, status: int | None, text: str, code: str = "") -> ErrorKind:
    """What an error means. ``status`` is the HTTP status (or the ``code`` an in-stream error
    carries; None when it has none), ``text`` its message, ``code`` its code/type strings."""
    if any(c in code for c in _CONTEXT_CODES) or _CONTEXT_MARKERS.search(text):
        if status is None or status in (400, 413, 422, 500):
            return ErrorKind.CONTEXT_LENGTH
    if status in (400, 422, 500) and _TOOLS_MARKERS.search(text):
        return ErrorKind.TOOLS_UNSUPPORTED
    if _TEMPLATE_MARKERS.search(text) and (status is None or status in (400, 422, 500)):
        return ErrorKind.TEMPLATE
    if status in (400, 422) and _STREAM_OPTIONS_MARKERS.search(text):
        return ErrorKind.STREAM_OPTIONS
    if status in (400, 422) and _RESPONSE_FORMAT_MARKERS.search(text):
        return ErrorKind.RESPONSE_FORMAT
    if status == 429:
        return ErrorKind.RATE_LIMITED
    if status is None or status >= 500 or status in (408, 409):
        return ErrorKind.TRANSIENT
    return ErrorKind.REJECTED
