"""Governance: a lens on the session, applied only to the copy sent to the LLM.

Compression edits persisted memory; governance never does. ``govern`` takes messages (frozen
values read from the store) and returns changed *copies*: huge tool outputs clipped, stale
``reasoning_content`` dropped, secrets redacted. Nothing here has a store to write to, so the
persisted session is byte-for-byte the same before and after a governed model call.

Governance never breaks a tool chain: it changes the text of messages, never their number,
order, roles or call ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from memory.assembly.base import RenderMemo
from memory.messages import Message, ToolCall
from memory.tokens import MESSAGE_OVERHEAD, count_text, truncate_text, with_tokens


class ReasoningPolicy(StrEnum):
    """Which ``reasoning_content`` survives into the request.

    Several OpenAI-compatible providers (DeepSeek, vLLM reasoning parsers) reject or mis-handle
    reasoning echoed back from earlier turns; the reasoning of the turn in progress (assistant
    messages after the last user message, i.e. the current tool loop) is what they accept.
    """

    AFTER_LAST_USER = "after_last_user"
    DROP_ALL = "drop_all"
    KEEP_ALL = "keep_all"


@dataclass(frozen=True, slots=True)
class SecretPattern:
    """A kind of secret and how to find it. ``keep_group`` names a group kept verbatim."""

    kind: str
    pattern: re.Pattern[str]
    keep_group: str | None = None


# Patterns never match quotes or backslashes (except the private-key block, handled with care
# in tool-call arguments), so redacting inside JSON text keeps it valid JSON.
DEFAULT_SECRET_PATTERNS: tuple[SecretPattern, ...] = (
    SecretPattern(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[A-Za-z0-9+/=\s]*)",
            re.DOTALL,
        ),
    ),
    SecretPattern("api_key", re.compile(r"\bsk-[A-Za-z0-9][A-Za-z0-9_-]{15,}")),
    SecretPattern("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    SecretPattern("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    SecretPattern("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    SecretPattern("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    SecretPattern(
        "bearer_token",
        re.compile(r"(?P<prefix>\b(?i:bearer)\s+)[A-Za-z0-9._~+/-]{16,}=*"),
        keep_group="prefix",
    ),
)


def _clip_marker(original_tokens: int, max_tokens: int) -> str:
    return (
        f"\n[… tool output clipped for the context: {original_tokens} tokens, only the first "
        f"~{max_tokens} are shown. The full output is kept in the session …]"
    )


@dataclass(frozen=True, slots=True)
class GovernancePolicy:
    """What governance does to the request copy. Every rule can be switched off.

    ``max_tool_result_tokens``: a tool result longer than this is clipped (None: never).
    ``reasoning``: which reasoning_content to keep (see ReasoningPolicy).
    ``redact_secrets``: replace API-key-like strings with ``[REDACTED:<kind>]``.
    """

    max_tool_result_tokens: int | None = 2000
    reasoning: ReasoningPolicy = ReasoningPolicy.AFTER_LAST_USER
    redact_secrets: bool = True
    secret_patterns: tuple[SecretPattern, ...] = field(default=DEFAULT_SECRET_PATTERNS)

    def __post_init__(self) -> None:
        if self.max_tool_result_tokens is not None and self.max_tool_result_tokens < 16:
            raise ValueError("max_tool_result_tokens must be at least 16 (or None to never clip)")
        object.__setattr__(self, "reasoning", ReasoningPolicy(self.reasoning))


@dataclass(frozen=True, slots=True)
class GovernanceReport:
    """What one ``govern`` call changed, counted per rule (for logs and tests)."""

    clipped: int = 0
    reasoning_dropped: int = 0
    redactions: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.clipped or self.reasoning_dropped or self.redactions)


def redact(text: str, *, patterns: Sequence[SecretPattern] = DEFAULT_SECRET_PATTERNS) -> tuple[str, int]:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``, and the number replaced."""
    total = 0
    for secret in patterns:

        def substitute(match: re.Match[str], secret: SecretPattern = secret) -> str:
            kept = match.group(secret.keep_group) if secret.keep_group else ""
            return f"{kept}[REDACTED:{secret.kind}]"

        text, count = secret.pattern.subn(substitute, text)
        total += count
    return text, total


def _redact_json_value(value: Any, patterns: Sequence[SecretPattern]) -> tuple[Any, int]:
    if isinstance(value, str):
        return redact(value, patterns=patterns)
    if isinstance(value, list):
        total, out = 0, []
        for item in value:
            new, count = _redact_json_value(item, patterns)
            out.append(new)
            total += count
        return out, total
    if isinstance(value, dict):
        total, mapping = 0, {}
        for key, item in value.items():
            new, count = _redact_json_value(item, patterns)
            mapping[key] = new
            total += count
        return mapping, total
    return value, 0


def _redact_arguments(arguments_json: str, patterns: Sequence[SecretPattern]) -> tuple[str, int]:
    # Redact inside decoded string values, so a secret that spans JSON escapes (a PEM block
    # with \n) is found whole and the result is still valid JSON the provider accepts.
    try:
        decoded = json.loads(arguments_json)
    except (json.JSONDecodeError, RecursionError):
        return redact(arguments_json, patterns=patterns)
    new, count = _redact_json_value(decoded, patterns)
    if not count:
        return arguments_json, 0
    return json.dumps(new, ensure_ascii=False), count


def _surely_within(message: Message, content: str, limit: int) -> bool:
    """Whether ``content`` has at most ``limit`` tokens, known without counting it: from the
    message's cached count (which includes the content's) when the content is unchanged, or
    from its UTF-8 length (a token is at least one byte)."""
    if content is message.content and message.tokens is not None and message.tokens - MESSAGE_OVERHEAD <= limit:
        return True
    return len(content) * 4 <= limit or len(content.encode("utf-8", "surrogatepass")) <= limit


def _last_user_index(messages: Sequence[Message]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return -1


def govern(messages: Sequence[Message], *, policy: GovernancePolicy) -> tuple[list[Message], GovernanceReport]:
    """Governed copies of ``messages`` (same length, order, roles and ids) and a report.

    Changed copies get a fresh token count; unchanged messages are returned as the same
    objects. The input is never modified (messages are frozen) and nothing is persisted.
    """
    last_user = _last_user_index(messages)
    clipped = dropped = redactions = 0
    out: list[Message] = []
    for index, message in enumerate(messages):
        drop = message.reasoning_content is not None and (
            policy.reasoning is ReasoningPolicy.DROP_ALL
            or (policy.reasoning is ReasoningPolicy.AFTER_LAST_USER and index < last_user)
        )
        # The inputs hold the policy, so its id cannot be reused while the entry lives.
        key = (id(policy), message.id, drop)
        memo = _memo.get(key, (policy, message))
        if memo is not None:
            governed, n_clipped, n_redacted = memo
        else:
            governed, n_clipped, n_redacted = _govern_one(message, drop=drop, policy=policy)
            _memo.put(key, (policy, message), (None if governed is message else governed, n_clipped, n_redacted))
        out.append(message if governed is None else governed)
        clipped += n_clipped
        redactions += n_redacted
        dropped += drop
    return out, GovernanceReport(clipped=clipped, reasoning_dropped=dropped, redactions=redactions)


#: The governed copies of recent messages, keyed by (policy id, message id, reasoning dropped).
#: Governance is a pure function of the message, the policy and whether its reasoning is
#: dropped, and a session's messages are the same frozen values turn after turn: without this,
#: every turn would redact and re-count the same few hundred messages again. An entry is used
#: only when its policy is the same object and its message equals the one given (an equal id is
#: not enough), so a different message under a reused id is governed afresh.
_memo = RenderMemo(16384)


def _govern_one(message: Message, *, drop: bool, policy: GovernancePolicy) -> tuple[Message, int, int]:
    """One message governed: (the copy, or ``message`` itself when unchanged; clipped; redactions)."""
    content = message.content
    reasoning = None if drop else message.reasoning_content
    calls = message.tool_calls
    clipped = redactions = 0

    if policy.redact_secrets:
        if content:
            content, n = redact(content, patterns=policy.secret_patterns)
            redactions += n
        if reasoning:
            reasoning, n = redact(reasoning, patterns=policy.secret_patterns)
            redactions += n
        if calls:
            new_calls = []
            for call in calls:
                arguments, n = _redact_arguments(call.arguments_json, policy.secret_patterns)
                redactions += n
                new_calls.append(call if not n else ToolCall(id=call.id, name=call.name, arguments_json=arguments))
            calls = tuple(new_calls)

    # Clip after redaction, so a secret is never cut in half and left partly readable.
    limit = policy.max_tool_result_tokens
    if message.role == "tool" and limit is not None and content and not _surely_within(message, content, limit):
        size = count_text(content)
        if size > limit:
            content = truncate_text(content, limit, marker=_clip_marker(size, limit))
            clipped = 1

    if (content, reasoning, calls) == (message.content, message.reasoning_content, message.tool_calls):
        return message, clipped, redactions
    if message.tokens is not None and reasoning is None and (content, calls) == (message.content, message.tool_calls):
        # Only the reasoning was dropped: a message's count is the sum of its fields' counts
        # (memory.tokens.compute_message_tokens), so take the reasoning's share off.
        tokens = message.tokens - count_text(message.reasoning_content)
        return replace(message, reasoning_content=None, tokens=tokens), clipped, redactions
    changed = replace(message, content=content, reasoning_content=reasoning, tool_calls=calls, tokens=None)
    return with_tokens(changed), clipped, redactions
