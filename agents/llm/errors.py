"""The model layer's exception family: what can go wrong when asking a model for a reply.

Every error a ``ChatModel`` raises is a ``ModelError``; nothing from the ``openai`` SDK or the
HTTP client leaks past ``agents.llm``. Messages are meant for the person running Modex: they say
what failed and what to check, and they never contain the API key.
"""

from __future__ import annotations


class ModelError(Exception):
    """Base of every model failure. ``retryable`` says whether trying later may succeed."""

    retryable: bool = False

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class ModelUnavailable(ModelError):
    """The endpoint could not be reached or kept failing (connection errors, HTTP 5xx), after
    the model's own bounded retries, or the stream broke off after output had started."""

    retryable = True


class RateLimited(ModelError):
    """The endpoint kept answering HTTP 429 after the bounded retries.

    ``retry_after`` is the server's last hint in seconds, when it sent one.
    """

    retryable = True

    def __init__(self, message: str, *, status_code: int | None = 429, retry_after: float | None = None) -> None:
        super().__init__(message, status_code=status_code)
        self.retry_after = retry_after


class ModelTimeout(ModelError):
    """No answer within the timeout: connecting, waiting for the first byte, or between two
    streamed chunks. Not retried by the model itself (a user is usually waiting)."""

    retryable = True


class ContextLengthExceeded(ModelError):
    """The request does not fit the model's context window.

    Its own type so the runtime can force a cleanup of the session and retry once. ``window``
    is the context window the endpoint stated in its error (llama.cpp's ``n_ctx``, OpenAI's
    "maximum context length is N tokens"), when it stated one.
    """

    def __init__(self, message: str, *, status_code: int | None = None, window: int | None = None) -> None:
        super().__init__(message, status_code=status_code)
        self.window = window


class MalformedResponse(ModelError):
    """The endpoint answered something that is not a valid chat completion (invalid JSON in a
    stream chunk, a tool call without a name, an impossible chunk shape)."""


class ModelRejected(ModelError):
    """The endpoint refused the request for a reason retrying will not fix (HTTP 400 other than
    context length, 401/403 authentication, 404 unknown model or path, 422 ...)."""


class ChatTemplateRejected(ModelRejected):
    """The server's chat template refused the conversation (e.g. "conversation roles must
    alternate"), over HTTP or inside a stream. Never retried: the same messages fail the same way."""
