"""Session compression: the prune boundary, the compact summary, the pruned catalog, the pipeline.

Modules, in the order cleanup uses them:

* ``boundary``: ``choose_boundary`` picks the tool-chain-safe cut (``PruneBoundary``).
* ``summary`` (with ``summary_input``, ``answers``, ``sections``, ``fallback``, ``statements``
  and ``dates``): the ``Summarizer`` protocol and ``compose_summary``, which never fails because
  of the model, takes what a small model writes and fills the rest, keeps every user statement
  of fact or preference with its date, and cuts to its budget by whole items only.
* ``pruned`` (with ``pruned_format``): ``PrunedCatalog``, the grep-able immutable record of
  every evicted message.
* ``cleanup`` (with ``steps``): ``run_cleanup`` / ``arun_cleanup``, the crash-safe pipeline.

The names below are the public surface; import them from here or from their modules.
"""

from memory.compression.boundary import PruneBoundary, choose_boundary
from memory.compression.cleanup import (
    CleanupFailed,
    CleanupResult,
    CleanupStatus,
    arun_cleanup,
    run_cleanup,
)
from memory.compression.pruned import PrunedCatalog, PrunedEntry, first_uncommitted_seq
from memory.compression.summary import (
    SUMMARY_PREFIX,
    Summarizer,
    SummaryOptions,
    SummaryOutcome,
    compose_summary,
    default_options,
    summary_budget,
)

__all__ = [
    "SUMMARY_PREFIX",
    "CleanupFailed",
    "CleanupResult",
    "CleanupStatus",
    "PruneBoundary",
    "PrunedCatalog",
    "PrunedEntry",
    "Summarizer",
    "SummaryOptions",
    "SummaryOutcome",
    "arun_cleanup",
    "choose_boundary",
    "compose_summary",
    "default_options",
    "first_uncommitted_seq",
    "run_cleanup",
    "summary_budget",
]
