"""Sizing an agent's memory to the model server's real context window, and what one message may take.

bot.yml's ``model.context_window`` is the default; the server's own window wins when Modex
knows it (``OPENAI_CONTEXT_WINDOW``, the server's model metadata, or a context-length error
that stated it: ``ChatModel.context_window``). The meter, the compression threshold, the
cleanup's kept tail and the memory sections' budgets then follow the real window.

An explicit ``compression_threshold``/``keep_tokens``/section budget in bot.yml was chosen for
the declared window: on a smaller real window it is scaled down in proportion (a threshold
above the window could never be reached), and a threshold that would then reach the usable
window (the reply's room is a larger share of a small window) is brought just under it, the
bound boot validation holds the declared one to; on a larger one it is kept as written.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from memory.assembly.assembler import tools_tokens
from memory.config import REPLY_RESERVE_CAP, MemoryConfig
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, count_text

logger = logging.getLogger("agents.runtime.sizing")

#: When an overflow error states no window, the server's window is assumed to be at most this
#: share of the request it refused, until OPENAI_CONTEXT_WINDOW says otherwise.
REFUSED_SHARE = 0.75
MIN_WINDOW = 256
MIN_MESSAGE_ROOM = 512


def model_window(model: Any) -> int | None:
    """The server's real window as the model knows it (None: unknown, use bot.yml's)."""
    window = getattr(model, "context_window", None)
    return window if isinstance(window, int) and not isinstance(window, bool) and window >= MIN_WINDOW else None


async def probe_window(model: Any) -> None:
    """Let ``model`` read its window and capabilities from the server's metadata (once; a model
    that cannot, like the offline one, is left alone)."""
    discover = getattr(model, "discover", None) or getattr(model, "discover_context_window", None)
    if discover is not None:
        await discover()


def sized_config(config: MemoryConfig, window: int | None) -> MemoryConfig:
    """``config`` for a model whose real window is ``window`` (unchanged when None or equal)."""
    if window is None or window == config.context_window:
        return config
    if window > config.context_window:
        return replace(config, context_window=window)
    ratio = window / config.context_window

    def scaled(value: int | None) -> int | None:
        return None if value is None else int(value * ratio)

    threshold = scaled(config.compression_threshold)
    if threshold is not None:
        threshold = min(threshold, window - min(REPLY_RESERVE_CAP, window // 8) - 1)
    keep = scaled(config.keep_tokens)
    if threshold is not None and keep is not None and keep >= threshold:
        keep = max(0, threshold - 1)
    return replace(
        config,
        context_window=window,
        compression_threshold=max(1, threshold) if threshold is not None else None,
        keep_tokens=keep,
        pruned_budget_tokens=int(config.pruned_budget_tokens * ratio),
        archive_budget_tokens=int(config.archive_budget_tokens * ratio),
    )


def sized_agent(agent: Any, model: Any) -> Any:
    """``agent`` (an AgentNode) with its memory sized to ``model``'s real window."""
    config = sized_config(agent.memory_config, model_window(model))
    return agent if config is agent.memory_config else replace(agent, memory_config=config)


def learn_window(model: Any, *, stated: int | None, request: Any) -> int | None:
    """After a context-length error: remember the server's window on ``model`` and return it.

    ``stated`` is what the error said (``ContextLengthExceeded.window``); without it the window
    is taken to be at most ``REFUSED_SHARE`` of the refused ``request`` (an AssembledContext),
    but never so small that the request's fixed parts (instructions, sections, tools) would
    leave less than ``MIN_MESSAGE_ROOM`` tokens for messages: then history is not what
    overflows, and shrinking would only break every later turn. Returns None (nothing learned)
    for a model that does not carry a window, or when the figure is no smaller than the known one.
    """
    if not hasattr(model, "context_window"):
        return None
    known = model_window(model)
    refused_tokens = request.total_tokens
    if stated:
        guess = max(MIN_WINDOW, stated)
    else:
        messages = sum(a.tokens for a in request.account if a.name == "messages")
        guess = int(refused_tokens * REFUSED_SHARE)
        if guess - (refused_tokens - messages) < MIN_MESSAGE_ROOM:
            return None
    if known is not None and guess >= known:
        return None
    model.context_window = guess
    logger.warning(
        "the model %s refused a request of about %d tokens; its context window is now taken to be %d tokens "
        "(%s). Set OPENAI_CONTEXT_WINDOW to the server's real window.",
        getattr(model, "name", "?"), refused_tokens, guess, "as the server stated" if stated else "estimated",
    )
    return guess


def input_limit(*, config: MemoryConfig, reply_reserve: int, instructions: str, tools: list[dict[str, Any]]) -> int:
    """The most tokens one user message may have and still be sent whole: the window less the
    reply's reserve, the instructions, the tool schemas and the message framing. May be zero or
    negative when the fixed parts alone overflow (context assembly reports that case)."""
    fixed = count_text(instructions) + tools_tokens(tools) + 2 * MESSAGE_OVERHEAD + REPLY_PRIMING
    return config.context_window - reply_reserve - fixed


def too_long(text: str, *, config: MemoryConfig, reply_reserve: int, instructions: str,
             tools: list[dict[str, Any]]) -> str | None:
    """Why ``text`` cannot reach the model whole beside the instructions, the tools and the
    reply's room (``input_limit``); None when it fits."""
    limit = input_limit(config=config, reply_reserve=reply_reserve, instructions=instructions, tools=tools)
    tokens = count_text(text)
    if limit > 0 and tokens > limit:
        return (
            f"the message is too long for the model's context window: {tokens} tokens, at most {limit} fit "
            f"(a {config.context_window}-token window, less room for the reply, the instructions and the tools); "
            "shorten it or split it into parts"
        )
    return None
