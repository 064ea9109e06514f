"""Request and response schemas of the agents JSON router (agents/api.py), and their builders.

Builders turn domain values (Message, CoreFileState, AgentNode, ...) into plain dicts the
schemas validate, so endpoints stay one call and one conversion.
"""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema

from agents.runtime.outcomes import CUT_OFF_KINDS, KIND_TURN_FAILED
from memory.messages import Message

MAX_CORE_TEXT = 200_000  # characters; the token cap is the real limit, this only bounds the body


class Error(Schema):
    detail: str


class ToolCallOut(Schema):
    id: str
    name: str
    arguments: str


class MessageOut(Schema):
    id: str
    seq: int | None
    role: str
    kind: str
    content: str | None
    reasoning_content: str | None
    tool_calls: list[ToolCallOut]
    tool_call_id: str | None
    name: str | None
    created_at: datetime
    tokens: int | None
    truncated: bool = Field(description="the server cut this reply off (kind truncated or content_filtered)")
    failed: bool = Field(description="the marked reply of a turn whose model call failed (kind turn_failed); content is the error")


def message_out(message: Message) -> dict:
    return {
        "id": message.id, "seq": message.seq, "role": message.role, "kind": message.kind,
        "content": message.content, "reasoning_content": message.reasoning_content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in message.tool_calls],
        "tool_call_id": message.tool_call_id, "name": message.name, "created_at": message.created_at,
        "tokens": message.tokens,
        "truncated": message.kind in CUT_OFF_KINDS, "failed": message.kind == KIND_TURN_FAILED,
    }


class ConversationOut(Schema):
    id: str
    title: str
    agent: str
    created_at: datetime
    updated_at: datetime


class SessionOut(Schema):
    version: int
    last_seq: int
    count: int
    tokens: int
    catalogued: int


class ConversationDetailOut(ConversationOut):
    session: SessionOut


class MessagesOut(Schema):
    conversation: str
    messages: list[MessageOut]
    session: SessionOut


class TocLineOut(Schema):
    file: str
    line: int
    seq: int
    heading: str


class CatalogOut(Schema):
    conversation: str
    total: int
    toc: list[TocLineOut]
    entries: list[MessageOut]


class AgentOut(Schema):
    name: str
    description: str
    archive_enabled: bool
    core_enabled: bool
    experience_enabled: bool


class CoreFileOut(Schema):
    file: str
    scope: str
    text: str
    version: int
    tokens: int
    cap: int
    updated_at: datetime | None
    editable: bool


class CoreOut(Schema):
    agent: str
    enabled: bool
    how_to_enable: str | None
    files: list[CoreFileOut]


class CoreFileIn(Schema):
    text: str = Field(..., max_length=MAX_CORE_TEXT)
    expected_version: int = Field(..., ge=0, le=2**53, description="The version you read (0: the file was never written)")


class ChangeOut(Schema):
    version: int
    at: datetime
    source: str
    who: str
    action: str
    tokens: int
    detail: str


class ExperienceOut(Schema):
    slug: str
    name: str
    description: str
    body: str
    updated_at: datetime
    version: int


class NodeOut(Schema):
    name: str
    path: str
    depth: int
    parent: str | None
    is_main: bool
    archive_enabled: bool
    core_enabled: bool
    experience_enabled: bool
    compression_threshold: int | None = Field(description="The explicit override, null for the preset default")
    effective_threshold: int
    context_window: int


class ProblemOut(Schema):
    path: str
    line: int | None
    message: str


class ScopeTreeOut(Schema):
    file: str | None = Field(None, description="The declaration's path on the server (staff only; null for others)")
    sha256: str
    pending_restart: bool
    problems: list[ProblemOut]
    nodes: list[NodeOut]


class NodeUpdate(Schema):
    archive_enabled: bool | None = None
    core_enabled: bool | None = None
    compression_threshold: int | None = Field(None, ge=1, le=10**9)
    reset_threshold: bool = Field(False, description="Remove the override: back to the preset default")


class ScopeUpdateIn(Schema):
    sha256: str = Field(..., max_length=64, description="The sha256 of the file you read (GET /scopes)")
    nodes: dict[str, NodeUpdate]


class ScopeUpdateOut(Schema):
    status: str
    message: str
    diff: list[str]
    tree: ScopeTreeOut
