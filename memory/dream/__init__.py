"""The Dream Engine: archive -> core memory consolidation (engine, prompt, edits, values).

``memory.dream`` is the public surface: import the engine and its values from here.
"""

from memory.dream.engine import (
    DREAM_CONSUMER,
    FAILURE_KEY,
    LAST_RUN_KEY,
    LEASE_NAME,
    ConsolidationFailed,
    ConsolidationMode,
    ConsolidationModel,
    ConsolidationProgress,
    ConsolidationResult,
    ConsolidationStatus,
    DreamEngine,
    DreamOptions,
    FailureKind,
    FailureRecord,
    default_archive_scope,
    read_last_run,
)

__all__ = [
    "DREAM_CONSUMER",
    "FAILURE_KEY",
    "LAST_RUN_KEY",
    "LEASE_NAME",
    "ConsolidationFailed",
    "ConsolidationMode",
    "ConsolidationModel",
    "ConsolidationProgress",
    "ConsolidationResult",
    "ConsolidationStatus",
    "DreamEngine",
    "DreamOptions",
    "FailureKind",
    "FailureRecord",
    "default_archive_scope",
    "read_last_run",
]
