"""The model seam: the ``ChatModel`` protocol, its events and errors, and two implementations.

* ``OpenAIChatModel`` (``agents.llm.openai``): any OpenAI-compatible endpoint;
* ``OfflineChatModel`` (``agents.llm.offline``): built-in, deterministic, no network;
* ``model_from_settings()`` (``agents.llm.settings``): the one the environment configures (offline unless
  ``OPENAI_BASE_URL`` is set).
"""

from agents.llm.base import (
    ChatModel,
    Completion,
    CompletionBuilder,
    ContentDelta,
    Finish,
    ModelEvent,
    ReasoningDelta,
    TextCompletion,
    ToolCallReady,
    Usage,
    as_text_completion,
    complete,
)
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
from agents.llm.offline import (
    OFFLINE_CONSOLIDATION_MARKER,
    OFFLINE_MODEL_NAME,
    OFFLINE_SUMMARY_MARKER,
    SUMMARY_SECTIONS,
    OfflineChatModel,
    OfflineTools,
)
from agents.llm.openai import OpenAIChatModel
from agents.llm.settings import model_from_settings

__all__ = [
    "OFFLINE_CONSOLIDATION_MARKER",
    "OFFLINE_MODEL_NAME",
    "OFFLINE_SUMMARY_MARKER",
    "SUMMARY_SECTIONS",
    "ChatModel",
    "ChatTemplateRejected",
    "Completion",
    "CompletionBuilder",
    "ContentDelta",
    "ContextLengthExceeded",
    "Finish",
    "MalformedResponse",
    "ModelError",
    "ModelEvent",
    "ModelRejected",
    "ModelTimeout",
    "ModelUnavailable",
    "OfflineChatModel",
    "OfflineTools",
    "OpenAIChatModel",
    "RateLimited",
    "ReasoningDelta",
    "TextCompletion",
    "ToolCallReady",
    "Usage",
    "as_text_completion",
    "complete",
    "model_from_settings",
]
