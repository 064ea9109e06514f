"""Embeddings for archive search: the configured endpoint's, or the embedded offline model.

``embedder_from_settings()`` chooses, from the environment:

* ``OPENAI_EMBEDDING_MODEL`` set: ``EndpointEmbedder``, the OpenAI-compatible
  ``/v1/embeddings`` of ``OPENAI_EMBEDDING_BASE_URL`` (default ``OPENAI_BASE_URL``), with
  ``OPENAI_API_KEY``. Vectors are made when history is archived and once per searched message;
  a failing endpoint makes search fall back to words, it never fails a turn.
* otherwise, unless ``MODEX_EMBEDDINGS=off``: the embedded WordLlama model
  (``memory.retrieval.embeddings.WordLlamaEmbedder``), offline, nothing to configure.

The memory layer sees only the ``memory.retrieval.embeddings.Embedder`` protocol.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from memory.retrieval.embeddings import Embedder, EmbeddingUnavailable, normalized, offline_embedder

logger = logging.getLogger("agents.llm.embeddings")

#: Texts per request (servers cap the batch; a long archive is embedded in several requests).
BATCH = 64


class EndpointEmbedder:
    """``/v1/embeddings`` of an OpenAI-compatible server. ``dimensions`` is learned from the
    server's first answer (a one-word probe when asked before any embedding)."""

    local = False

    def __init__(self, *, base_url: str, model: str, api_key: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url
        self.name = model
        self.model = f"endpoint:{model}"
        self._api_key = api_key
        self._timeout = timeout
        self._dimensions: int | None = None
        self._client = None
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            self.embed(["dimensions"])
        return self._dimensions or 0

    def _client_once(self):
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(
                    base_url=self.base_url, api_key=self._api_key or "not-needed", timeout=self._timeout, max_retries=1
                )
            return self._client

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        rows: list[np.ndarray] = []
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            present = [i for i, text in enumerate(batch) if text and text.strip()]
            answer = None
            if present:
                try:
                    answer = self._client_once().embeddings.create(model=self.name, input=[batch[i] for i in present])
                except Exception as exc:  # connection, status, malformed answer: search goes on by words
                    raise EmbeddingUnavailable(f"the embedding endpoint {self.base_url} failed: {exc}") from exc
            vectors = [np.asarray(item.embedding, dtype=np.float32) for item in (answer.data if answer else [])]
            if vectors:
                width = len(vectors[0])
                if any(len(v) != width for v in vectors) or (self._dimensions and width != self._dimensions):
                    raise EmbeddingUnavailable("the embedding endpoint answered vectors of varying sizes")
                self._dimensions = width
            block = np.zeros((len(batch), self._dimensions or 0), dtype=np.float32)
            for i, vector in zip(present, vectors, strict=False):
                block[i] = vector
            rows.append(block)
        if not rows:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        return normalized(np.concatenate(rows))


def embedder_from_settings() -> tuple[Embedder | None, bool]:
    """(the embedder the environment configures or None, whether it is local and cheap)."""
    model = os.environ.get("OPENAI_EMBEDDING_MODEL", "").strip()
    if model:
        base_url = (os.environ.get("OPENAI_EMBEDDING_BASE_URL", "").strip()
                    or os.environ.get("OPENAI_BASE_URL", "").strip())
        if not base_url:
            raise ImproperlyConfigured(
                "OPENAI_EMBEDDING_MODEL is set but neither OPENAI_EMBEDDING_BASE_URL nor OPENAI_BASE_URL says "
                "which server to ask."
            )
        return EndpointEmbedder(base_url=base_url, model=model,
                                api_key=os.environ.get("OPENAI_API_KEY", "").strip() or None), False
    if getattr(settings, "MODEX_EMBEDDINGS", "offline") == "off":
        return None, False
    return offline_embedder(), True
