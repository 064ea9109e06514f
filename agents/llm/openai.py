"""``OpenAIChatModel``: the ChatModel over the official ``openai`` SDK, for any OpenAI-compatible
endpoint (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, DeepSeek); agents.llm.settings builds one
from the environment.

Retries are this module's, not the SDK's (the client is built with ``max_retries=0``): HTTP 429,
408/409, 5xx and connection errors are retried with exponential backoff and jitter, honouring
``Retry-After``, but only while nothing has been yielded yet; once output has started, a broken
stream raises instead of silently repeating text. Timeouts are not retried. The sleep function
and the random source are injectable so tests run instantly.

The API key is handed to the SDK and otherwise never stored in a message, a log line, a
``repr`` or ``describe()``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import random
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx2
import openai

from agents.llm.base import ModelEvent
from agents.llm.capabilities import (
    UNKNOWN_SERVER,
    Capabilities,
    for_known_host,
    from_models_entry,
    from_ollama_show,
    from_props,
)
from agents.llm.chunks import ChunkAssembler
from agents.llm.scrub import scrub_secrets
from agents.llm.shaping import fold_roles, needs_folding
from agents.llm.openai_errors import Retry, translate
from agents.llm.sse import stream_chunks
from agents.llm.errors import (
    MalformedResponse,
    ModelError,
    ModelUnavailable,
)

logger = logging.getLogger("agents.llm.openai")

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 3
#: Local servers (Ollama, llama.cpp, vLLM without --api-key) accept any key, the SDK needs one.
PLACEHOLDER_API_KEY = "not-needed"

_CONNECTION_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)

Sleep = Callable[[float], Awaitable[None]]


def _basic_auth(url: str) -> dict[str, str] | None:
    """The ``Authorization: Basic`` header of ``user:password@`` in ``url``, if it has one."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return None
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
    return {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}


def redact_url(url: str) -> str:
    """``url`` without any ``user:password@`` part, safe for logs and the UI."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class OpenAIChatModel:
    """A ChatModel speaking ``/chat/completions`` with ``stream=True`` to one endpoint.

    ``timeout`` (seconds) bounds each network wait: connecting, the first byte, and the gap
    between two streamed chunks (a long answer that keeps streaming is never cut off).
    ``max_retries`` is the number of retries after the first attempt. ``include_usage`` sends
    ``stream_options={"include_usage": True}``; switch it off for a server that rejects it (a
    server that answers 400 naming ``stream_options`` is asked again without it, and from then
    on it is off). ``context_window`` is the server's real window in tokens when known
    (``OPENAI_CONTEXT_WINDOW``, the server's model metadata, or an overflow error that stated
    it); the runtime sizes the agents' memory with it instead of bot.yml's value.

    What the server can do is read once by ``discover()`` (``capabilities``). What a refused
    request teaches is kept for the rest of the process, logged once, and shown in
    ``capabilities``: a server that refuses ``response_format`` is asked again without it and
    no longer sent it (``json_mode`` False); one that refuses ``tools`` is asked again without
    them and no longer sent them (``tools_refused``); one whose chat template refuses the roles
    ("Conversation roles must alternate") is asked again with tool turns folded into
    alternating text, and from then on always so (``fold_roles``).
    """

    is_offline = False

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        max_retry_after: float = 60.0,
        include_usage: bool = True,
        context_window: int | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required (e.g. https://api.openai.com/v1)")
        if not model:
            raise ValueError("model is required (the endpoint's model name)")
        if timeout <= 0 or max_retries < 0:
            raise ValueError("timeout must be positive and max_retries non-negative")
        if context_window is not None and context_window < 256:
            raise ValueError("context_window must be at least 256 tokens")
        self.name = model
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self.include_usage = include_usage
        self.context_window = context_window
        self.json_mode: bool | None = None  # False once the server refused response_format
        self.fold_roles = False  # True once the server's template refused the roles
        self.tools_refused: str | None = None  # why, once the server refused tools
        self._detected: Capabilities | None = None
        self._probed = False
        self._api_key = api_key or PLACEHOLDER_API_KEY
        self._sleep = sleep
        self._rng = rng or random.Random()
        # One SDK client per event loop: an HTTP connection pool cannot outlive its loop.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.name!r}, base_url={redact_url(self.base_url)!r})"

    def describe(self) -> str:
        return f"{self.name} at {redact_url(self.base_url)}"

    @property
    def discovered(self) -> bool:
        """Whether ``discover()`` has asked the server already (it asks once)."""
        return self._probed

    @property
    def capabilities(self) -> Capabilities:
        """What this endpoint can do: detected by ``discover()``, then corrected by what its
        answers taught (refused tools or JSON mode, strict roles). Before ``discover()`` ran,
        or when the server could not be asked, ``detected`` is False and most is unknown."""
        base = self._detected or Capabilities(server=UNKNOWN_SERVER, model=self.name, detected=False,
                                              tools_note="not detected yet")
        changes: dict[str, Any] = {}
        if self.context_window is not None:
            changes["window"] = self.context_window
        if self.tools_refused:
            changes.update(tools=False, tools_note=f"refused by the server: {self.tools_refused}")
        if self.json_mode is False:
            changes["json_mode"] = False
        if self.fold_roles:
            changes["folds_roles"] = True
        return base.learned(**changes) if changes else base

    async def discover(self) -> Capabilities:
        """Ask the server once what it can do (``agents.llm.capabilities``), set
        ``context_window`` from it unless already known (``OPENAI_CONTEXT_WINDOW`` wins), log the
        result, and return ``capabilities``. Any failure means "unknown", never an error."""
        if not self._probed:
            self._probed = True
            try:
                detected = await asyncio.wait_for(self._metadata(), timeout=min(self.timeout, 5.0))
            except Exception as exc:  # metadata is a convenience: never fail a turn for it
                logger.info("could not read the metadata of %s: %s", self.describe(), type(exc).__name__)
                detected = None
            self._adopt(detected)
            logger.info("model capabilities: %s", self.capabilities.describe())
        return self.capabilities

    async def discover_context_window(self) -> int | None:
        """The server's window from its model metadata, asked once per model; sets
        ``context_window`` unless it is already known (``OPENAI_CONTEXT_WINDOW`` wins).

        Read from ``GET /models``: vLLM's ``max_model_len``, or ``context_length`` /
        ``context_window`` / ``max_context_length`` (OpenRouter, LM Studio, several proxies) of
        the entry for this model; else llama.cpp's ``GET /props``
        (``default_generation_settings.n_ctx``). Any failure means "unknown" (None).
        """
        if self.context_window is not None or self._probed:
            return self.context_window
        await self.discover()
        return self.context_window

    def _adopt(self, detected: Capabilities | None) -> None:
        self._detected = detected
        window = detected.window if detected is not None else None
        if window is not None and window >= 256 and self.context_window is None:
            logger.info("the model %s reports a context window of %d tokens", self.describe(), window)
            self.context_window = window

    async def _metadata(self) -> Capabilities | None:
        http = self._client()._client  # the SDK's own httpx client (auth headers added below)
        headers = {"Authorization": f"Bearer {self._api_key}"}
        base = redact_url(self.base_url)  # the HTTP client logs URLs; credentials stay out of them
        known = for_known_host(urlsplit(base).hostname or "", model=self.name)
        if known is not None:
            return known
        found: Capabilities | None = None
        owner = ""
        response = await http.get(f"{base}/models", headers=headers)
        if response.status_code == 200:
            listing = response.json()
            entries = listing.get("data") if isinstance(listing, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and entry.get("id") == self.name:
                    owner = str(entry.get("owned_by") or "").lower()
                    found = from_models_entry(entry, model=self.name)
        if found is not None and found.window is not None:
            return found  # vLLM and proxies that state the window: nothing more to ask
        root = base[: -len("/v1")] if base.endswith("/v1") else base
        if owner in ("library", "ollama"):
            response = await http.post(f"{root}/api/show", headers=headers, json={"model": self.name})
            if response.status_code == 200 and isinstance(show := response.json(), dict):
                return from_ollama_show(show, model=self.name) or found
            return found
        response = await http.get(f"{root}/props", headers=headers)
        if response.status_code == 200 and isinstance(props := response.json(), dict):
            return from_props(props, model=self.name) or found
        return found

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop. Call it before a loop that used this
        model ends (shutdown, or each ``asyncio.run``); other loops' clients are unaffected."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            # Credentials of the base URL go as the Basic auth header they would become anyway,
            # and the URL without them: the HTTP client logs every request's URL.
            transport = httpx2.AsyncHTTPTransport(limits=_CONNECTION_LIMITS)
            client = openai.AsyncOpenAI(
                base_url=redact_url(self.base_url),
                api_key=self._api_key,
                timeout=self.timeout,
                max_retries=0,
                default_headers=_basic_auth(self.base_url),
                http_client=openai.DefaultAsyncHttpxClient(transport=transport),
            )
            self._clients[loop] = client
        return client

    # -- the call ----------------------------------------------------------------------------

    async def stream(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        response_format: dict[str, Any] | None = None,
        slot: int | None = None,
    ) -> AsyncIterator[ModelEvent]:
        """See ``ChatModel.stream``. ``slot`` (llama.cpp only: its ``id_slot``) pins the request
        to one of the server's slots, so that background work never takes over the slot whose
        cached prompt is the chat's (``agents.runtime.gate``)."""
        if self.fold_roles and needs_folding(messages):
            messages = fold_roles(messages)
        request: dict[str, Any] = {"model": model or self.name, "messages": messages, "stream": True}
        if self.include_usage:
            request["stream_options"] = {"include_usage": True}
        if tools and not self.tools_refused:
            request["tools"] = tools
        if temperature is not None:
            request["temperature"] = temperature
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        if timeout is not None:
            request["timeout"] = timeout
        if response_format is not None and self.json_mode is not False:
            request["response_format"] = response_format
        if slot is not None:
            request["id_slot"] = slot
        attempt = 0
        while True:
            yielded = False
            try:
                # aclosing: an abandoned or cancelled outer stream closes the HTTP stream now,
                # not whenever the garbage collector finalizes the inner generator.
                async with contextlib.aclosing(self._attempt(request)) as events:
                    async for event in events:
                        yielded = True
                        yield event
                return
            except Retry as retry:
                if retry.adjust is not None:
                    if not yielded and self._adjust(request, retry):
                        continue
                    raise retry.error from retry.error.__cause__
                if yielded or attempt >= self.max_retries:
                    raise retry.error from retry.error.__cause__
                delay = self._delay(attempt, retry.retry_after)
                if delay is None:
                    raise retry.error from retry.error.__cause__
                attempt += 1
                logger.warning("%s; retry %d of %d in %.2fs", retry.error, attempt, self.max_retries, delay)
                await self._sleep(delay)

    def _adjust(self, request: dict[str, Any], retry: Retry) -> bool:
        """Change ``request`` as ``retry.adjust`` says and remember it for this endpoint; False
        when that change was already made (the same refusal again is the caller's error)."""
        match retry.adjust:
            case "stream_options" if "stream_options" in request:
                logger.warning("%s; asking again without stream_options (set OPENAI_INCLUDE_USAGE=false)", retry.error)
                self.include_usage = False
                request.pop("stream_options")
            case "response_format" if "response_format" in request:
                logger.warning("%s; asking again without response_format, and no longer sending it to this "
                               "endpoint (JSON mode off for this process)", retry.error)
                self.json_mode = False
                request.pop("response_format")
            case "tools" if "tools" in request:
                logger.warning("%s; asking again without tools: this endpoint cannot call tools, and is no "
                               "longer sent any for this process", retry.error)
                self.tools_refused = retry.error.message.rsplit(": ", 1)[-1][:200]
                request.pop("tools")
                request.pop("tool_choice", None)
            case "fold" if not request.get("_folded") and needs_folding(request["messages"]):
                logger.warning("%s; asking again with tool turns folded into alternating user/assistant text, "
                               "as for every later request to this endpoint in this process", retry.error)
                self.fold_roles = True
                request["messages"] = fold_roles(request["messages"])
                request["_folded"] = True
            case _:
                return False
        return True

    async def _attempt(self, request: dict[str, Any]) -> AsyncIterator[ModelEvent]:
        # The SDK sends the request and raises its errors for a refused one; agents.llm.sse
        # reads the streamed body (and says why). The request goes through the client's plain
        # ``post``: ``chat.completions.create`` first walks every message and tool schema against
        # its typed parameters, about 10 ms for 40 messages and 8 tools, for JSON that is already
        # the wire format.
        body = {key: value for key, value in request.items() if key not in ("timeout", "_folded")}
        options: dict[str, Any] = {"timeout": request["timeout"]} if "timeout" in request else {}
        try:
            response = await self._client().post(
                "/chat/completions", cast_to=httpx2.Response, body=body, options=options, stream=True
            )
        except openai.OpenAIError as exc:
            translated = self._translate(exc, request.get("timeout", self.timeout))
            raise translated from translated.__cause__
        assembler = ChunkAssembler(source=f"the model {self.describe()}")
        started = False
        try:
            async for chunk in stream_chunks(response):
                for event in assembler.feed(chunk):
                    started = True
                    yield event
            for event in assembler.close():
                yield event
        except ModelUnavailable as exc:
            raise Retry(exc) from None
        except openai.OpenAIError as exc:
            translated = self._translate(exc, request.get("timeout", self.timeout), started=started)
            raise translated from translated.__cause__
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise MalformedResponse(f"the endpoint sent a stream chunk that is not valid JSON: {exc}") from exc
        finally:
            # Runs on success, error, cancellation and early close alike: release the connection.
            await response.aclose()

    # -- errors and backoff ------------------------------------------------------------------

    def _translate(self, exc: openai.OpenAIError, timeout: float, *, started: bool = False) -> ModelError | Retry:
        """The ModelError for an SDK error (agents.llm.openai_errors)."""
        return translate(exc, where=f"{self.name} at {redact_url(self.base_url)}", timeout=timeout, started=started,
                         scrub=self._scrub)

    def _scrub(self, text: str) -> str:
        """``text`` without the API key, the base URL's credentials, or anything close to them
        (servers echo what they were sent in error messages): agents.llm.scrub."""
        key = self._api_key if self._api_key != PLACEHOLDER_API_KEY else None
        return scrub_secrets(text, key=key, base_url=self.base_url)

    def _delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds before retry number ``attempt + 1``; None when the server asks for longer
        than ``max_retry_after`` (waiting would only hold the user up)."""
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        ceiling = min(self.backoff_max, self.backoff_base * 2**attempt)
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)
