"""How ``OpenAIChatModel`` reads a failed request: the SDK's errors become Modex's
``ModelError`` kinds (agents.llm.errors), with the server's own words scrubbed of the endpoint's
secrets, and ``Retry`` says when another try, or a changed request, may help."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable

import openai

from agents.llm.classify import ErrorKind, classify, error_code, error_text, window_hint
from agents.llm.errors import (
    ChatTemplateRejected,
    ContextLengthExceeded,
    MalformedResponse,
    ModelError,
    ModelRejected,
    ModelTimeout,
    ModelUnavailable,
    RateLimited,
)


class Retry(Exception):
    """The attempt failed in a way worth another try.

    ``adjust`` names a change of the request that may make the server accept it, tried once
    and only before any output: ``stream_options`` (ask without), ``response_format`` (ask
    without JSON mode), ``tools`` (ask without tools), ``fold`` (fold tool turns into
    alternating text, ``agents.llm.shaping``). Without an adjustment the error is retried as is
    (transient) or raised."""

    def __init__(self, error: ModelError, retry_after: float | None = None, *, adjust: str | None = None) -> None:
        self.error = error
        self.retry_after = retry_after
        self.adjust = adjust


def translate(exc: openai.OpenAIError, *, where: str, timeout: float, started: bool = False,
              scrub: Callable[[str], str]) -> ModelError | Retry:
    """The ModelError for an SDK error of the model ``where`` ("name at url"), wrapped in
    ``Retry`` when retrying may help. ``started``: the answer had begun streaming when ``exc``
    happened. ``scrub`` takes the endpoint's secrets out of what the server said."""
    if isinstance(exc, openai.APITimeoutError):
        if started:
            message = f"the model {where} stopped sending for {timeout:g}s after its answer had started"
        else:
            message = f"the model {where} did not answer within {timeout:g}s"
        return _caused(scrub, ModelTimeout(message), exc)
    if isinstance(exc, openai.APIConnectionError):
        return Retry(_caused(scrub, ModelUnavailable(f"cannot reach the model {where}: {_cause(exc)}"), exc))
    if isinstance(exc, openai.APIResponseValidationError):
        error = MalformedResponse(f"the model {where} sent a response that is not a chat completion")
        return _caused(scrub, error, exc)
    if isinstance(exc, openai.APIStatusError):
        return _status(exc, where, scrub)
    if isinstance(exc, openai.APIError):  # an error event inside a stream that began with 200 OK
        return _in_stream(exc, where, scrub)
    return _caused(scrub, ModelError(f"the model {where} failed: {type(exc).__name__}"), exc)


def _in_stream(exc: openai.APIError, where: str, scrub: Callable[[str], str]) -> ModelError | Retry:
    """An in-stream error is classified like an HTTP error; its own ``code`` (llama.cpp sends
    the status it would have used) stands in for the status."""
    body = exc.body
    detail = scrub(error_text(body, exc.message or ""))
    raw_code = body.get("code") if isinstance(body, dict) else None
    status = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
    kind = classify(status=status, text=detail, code=error_code(body))
    if kind is ErrorKind.CONTEXT_LENGTH:
        message = f"the request does not fit the context window of {where}: {detail}"
        return _caused(scrub, ContextLengthExceeded(message, window=window_hint(body, detail)), exc)
    if kind is ErrorKind.TEMPLATE:
        return Retry(_caused(scrub, ChatTemplateRejected(_template_message(where, detail)), exc), adjust="fold")
    if kind in (ErrorKind.TRANSIENT, ErrorKind.RATE_LIMITED):
        return Retry(
            _caused(scrub, ModelUnavailable(f"the model {where} reported an error while streaming: {detail}"), exc)
        )
    return _caused(scrub, ModelRejected(f"the model {where} reported an error while streaming: {detail}"), exc)


def _status(exc: openai.APIStatusError, where: str, scrub: Callable[[str], str]) -> ModelError | Retry:
    status = exc.status_code
    detail = scrub(error_text(exc.body, _status_text(exc)))
    kind = classify(status=status, text=detail, code=error_code(exc.body) or (exc.code or ""))
    if kind is ErrorKind.CONTEXT_LENGTH:
        message = f"the request does not fit the context window of {where}: {detail}"
        error = ContextLengthExceeded(message, status_code=status, window=window_hint(exc.body, detail))
        return _caused(scrub, error, exc)
    if kind is ErrorKind.TEMPLATE:
        error = ChatTemplateRejected(_template_message(where, detail), status_code=status)
        return Retry(_caused(scrub, error, exc), adjust="fold")
    if kind is ErrorKind.STREAM_OPTIONS:
        message = f"the model {where} rejected stream_options (HTTP {status}): {detail}"
        return Retry(_caused(scrub, ModelRejected(message, status_code=status), exc), adjust="stream_options")
    if kind is ErrorKind.RESPONSE_FORMAT:
        message = f"the model {where} rejected response_format (HTTP {status}): {detail}"
        return Retry(_caused(scrub, ModelRejected(message, status_code=status), exc), adjust="response_format")
    if kind is ErrorKind.TOOLS_UNSUPPORTED:
        message = f"the model {where} rejected the tools (HTTP {status}): {detail}"
        return Retry(_caused(scrub, ModelRejected(message, status_code=status), exc), adjust="tools")
    if kind is ErrorKind.RATE_LIMITED:
        retry_after = _retry_after(exc)
        message = f"the model {where} is rate limiting requests (HTTP 429): {detail}"
        return Retry(_caused(scrub, RateLimited(message, retry_after=retry_after), exc), retry_after)
    if kind is ErrorKind.TRANSIENT:
        message = f"the model {where} failed with HTTP {status}: {detail}"
        return Retry(_caused(scrub, ModelUnavailable(message, status_code=status), exc), _retry_after(exc))
    hint = {
        401: " (check OPENAI_API_KEY)",
        403: " (check OPENAI_API_KEY and the account's access to this model)",
        404: " (check OPENAI_BASE_URL, usually ending in /v1, and OPENAI_MODEL)",
    }.get(status, "")
    message = f"the model {where} rejected the request with HTTP {status}{hint}: {detail}"
    return _caused(scrub, ModelRejected(message, status_code=status), exc)


def _caused(scrub: Callable[[str], str], error: ModelError, exc: openai.OpenAIError) -> ModelError:
    """``error`` chained to the SDK error, unless that one carries the key (a traceback of
    the chain would print it)."""
    leaks = scrub(f"{exc} {getattr(exc, 'body', '')!r}") != f"{exc} {getattr(exc, 'body', '')!r}"
    error.__cause__ = None if leaks else exc
    error.__suppress_context__ = True
    return error


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def _status_text(exc: openai.APIStatusError) -> str:
    """The response's own text (the SDK's message prefixes it with "Error code: N - ")."""
    try:
        text = exc.response.text
    except Exception:  # a streamed response whose body was not read
        text = ""
    return text.strip() or (exc.message or "")


def _template_message(where: str, detail: str) -> str:
    return (
        f"the model {where} cannot format this conversation with its chat template (asked again only when "
        f"folding tool turns into alternating text changed the request; a server-side template problem): {detail}"
    )


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """The server's wait hint: ``retry-after-ms``, or ``retry-after`` in seconds or as a date."""
    headers = exc.response.headers
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        raw = headers.get("retry-after")
        if raw is None:
            return None
        try:
            return max(0.0, float(raw))
        except ValueError:
            when = email.utils.parsedate_to_datetime(raw)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None
