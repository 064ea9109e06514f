"""The process-wide memory services the runtime, the consumer and the commands share.

Built once from settings and the booted declaration: the store bundle of the declared backend,
the pruned catalog, the memory hook dispatcher (with the built-in TodoReorientationHook), the
archive retrieval (message search and automatic recall, with the configured embeddings), the
context assembler, the configured chat model, the completion-token caps of each kind of model
call (``caps``, ``MODEX_MAX_TOKENS_*``) and the model-call gate over the stores
(``gate``, ``agents.runtime.gate``: chat first, background memory work when chat is idle).
"""

from __future__ import annotations

import contextlib

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.llm import ChatModel, OfflineChatModel, model_from_settings
from agents.llm.embeddings import embedder_from_settings
from agents.llm.settings import ModelCaps, model_caps
from agents.runtime import gated
from agents.runtime.gate import BACKGROUND, FOREGROUND, ModelGate
from memory.assembly.assembler import RECALL_IN_SYSTEM, ContextAssembler, default_pipeline
from memory.compression.pruned import PrunedCatalog
from memory.hooks import MemoryHookDispatcher, MemoryHookPoint, TodoReorientationHook
from memory.retrieval.service import Retrieval, retrieval_for
from memory.stores.base import MemoryStoreBundle
from memory.stores.registry import open_bundle


@dataclass(frozen=True)
class MemoryServices:
    bundle: MemoryStoreBundle
    catalog: PrunedCatalog
    hooks: MemoryHookDispatcher
    assembler: ContextAssembler
    model: ChatModel
    workspace: Path
    retrieval: Retrieval
    caps: ModelCaps = field(default_factory=ModelCaps)
    gate: ModelGate | None = None

    @property
    def offline(self) -> bool:
        return isinstance(self.model, OfflineChatModel)

    def calls(self, model: Any | None = None, *, background: bool = False, label: str = "",
              stop_when: Callable[[], bool] | None = None, urgent: bool = False) -> Any:
        """``model`` (default: the services' model) as its callers use it: through the gate
        with chat or background priority (``stop_when``, ``urgent``: ``agents.runtime.gated.calls``); the
        model itself without a gate."""
        model = model if model is not None else self.model
        if self.gate is None:
            return model
        return gated.calls(self.gate, model, priority=BACKGROUND if background else FOREGROUND, label=label,
                           stop_when=stop_when, urgent=urgent)

    def urgent_work(self, label: str) -> Any:
        """An async context in which background work of the services' model is urgent (the
        gate's ``hold_urgent``; nothing without a gate): its calls must be made ``urgent``."""
        if self.gate is None:
            return contextlib.nullcontext()
        return self.gate.hold_urgent(self.model, label=label)

    def background_timeout(self, seconds: float) -> float:
        """A time limit around a whole background call (the Dream Engine's, a summary's): its
        ``seconds`` of model time plus what the call may wait for chat at the gate first
        (``MODEX_BACKGROUND_MAX_WAIT``), so time spent queued behind a turn is never counted as
        the model's."""
        return seconds + (self.gate.background_max_wait if self.gated else 0.0)

    @property
    def gated(self) -> bool:
        """Whether calls to the services' model wait at a gate (a local server's; a remote one
        has none: ``ModelGate.limit``)."""
        return self.gate is not None and self.gate.limit(self.model) is not None


def build_services(
    *,
    backend: str,
    workspace: Path,
    model: ChatModel | None = None,
    hooks: MemoryHookDispatcher | None = None,
    bundle: MemoryStoreBundle | None = None,
    caps: ModelCaps | None = None,
    gated: bool = False,
) -> MemoryServices:
    """Wire a set of services over ``workspace`` (tests build their own with this); ``bundle``,
    when given, is used instead of opening ``backend`` (e.g. the SQL adapters on PostgreSQL).
    ``caps`` default to the settings'; ``gated`` puts the model-call gate over the bundle's KV
    store (``MODEX_MODEL_CONCURRENCY``, ``MODEX_BACKGROUND_MAX_WAIT``), as the process's own
    services have it."""
    bundle = bundle or open_bundle(backend, root=workspace / "memory")
    catalog = PrunedCatalog(workspace / "pruned")
    hooks = hooks or MemoryHookDispatcher()
    hooks.register(MemoryHookPoint.CLEANUP_FINISHED, TodoReorientationHook(kv=bundle.kv))
    retrieval = retrieval_for(bundle.archive, factory=retrieval_from_settings)
    assembler = ContextAssembler(
        stores=bundle,
        pipeline=default_pipeline(catalog=catalog, retrieval=retrieval),
        hooks=hooks,
        recall_placement=str(getattr(settings, "MODEX_RECALL_PLACEMENT", RECALL_IN_SYSTEM)),
    )
    services = MemoryServices(
        bundle=bundle,
        catalog=catalog,
        hooks=hooks,
        assembler=assembler,
        model=model or model_from_settings(),
        workspace=workspace,
        retrieval=retrieval,
        caps=caps or model_caps(),
        gate=_gate(bundle) if gated else None,
    )
    for initializer in list(_initializers):
        initializer(services)
    return services


def retrieval_from_settings(archive) -> Retrieval:
    """Retrieval over ``archive`` with the configured embeddings and bounds (``retrieval_for``
    shares it between every set of services over the same store)."""
    embedder, local = embedder_from_settings()
    return Retrieval(
        archive=archive,
        embedder=embedder,
        local_embedding=local,
        min_similarity=float(getattr(settings, "MODEX_RECALL_MIN_SIMILARITY", 0.25)),
        max_messages=int(getattr(settings, "MODEX_RECALL_CACHE_MESSAGES", 300_000)),
    )


def _gate(bundle: MemoryStoreBundle) -> ModelGate:
    return ModelGate(
        kv=bundle.kv,
        concurrency=int(getattr(settings, "MODEX_MODEL_CONCURRENCY", 0)),
        background_max_wait=float(getattr(settings, "MODEX_BACKGROUND_MAX_WAIT", 300.0)),
        after_turn=float(getattr(settings, "MODEX_BACKGROUND_AFTER_TURN", 5.0)),
    )


_initializers: list[Callable[[MemoryServices], None]] = []


def on_build(initializer: Callable[[MemoryServices], None]) -> None:
    """Run ``initializer(services)`` on every set of services built from now on (the app
    registers the Dream Engine's cleanup trigger this way at ready); idempotent per function."""
    if initializer not in _initializers:
        _initializers.append(initializer)


_lock = threading.Lock()
_services: MemoryServices | None = None


def get_services() -> MemoryServices:
    """The process's services, on the declaration's backend (``MODEX_PERSISTENCE_BACKEND`` wins)."""
    global _services
    with _lock:
        if _services is None:
            from agents.declarations import get_declaration

            backend = settings.MODEX_PERSISTENCE_BACKEND or get_declaration().persistence.backend
            _services = build_services(backend=backend, workspace=Path(settings.MODEX_WORKSPACE), gated=True)
        return _services


def reset_services() -> None:
    """Forget the process's services (tests that change settings)."""
    global _services
    with _lock:
        _services = None


def inspection_source():
    """What ``memory.inspection`` reads: the process's stores, at the moment of each request.

    memory/ never imports agents/, so ``AgentsConfig.ready()`` hands this function over; tests
    that swap the services are seen at once.
    """
    from memory import inspection

    services = get_services()
    return inspection.InspectionSource(
        bundle=services.bundle,
        catalog=services.catalog,
        workspace=services.workspace,
        sessions_of_user=_sessions_of_user,
    )


def _sessions_of_user(user_id: str) -> list[str]:
    from agents.models import Conversation

    if not str(user_id).isdigit():
        return []
    return list(Conversation.objects.filter(owner_id=int(user_id)).order_by("created_at").values_list("pk", flat=True))
