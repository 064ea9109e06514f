"""Embeddings for archive retrieval: the seam, the embedded offline model, the stored form.

An ``Embedder`` turns texts into unit vectors. Its ``model`` string names the model *and* the
dimensions (vectors of different models are never compared: a change of model re-embeds what is
stored). Two implementations exist:

* ``WordLlamaEmbedder`` (this module): WordLlama's ``l2_supercat`` static token embeddings, which
  ship inside the ``wordllama`` wheel and load offline in about 0.1 s; a query embeds in about
  0.03 ms and 1,000 short messages in about 25 ms on one core. It is a bag of token vectors (no
  attention), trained to mimic a large model's token space: good at "relocated" ~ "moved", weak
  at negation and word order. That is the job here: the vector side of a hybrid search whose
  other side (BM25) matches exact words. Its Matryoshka training lets the first 64 of its 256
  dimensions stand alone, which keeps an exact search over 100,000 messages within a few
  milliseconds and their vectors at 128 bytes each.
* ``agents.llm.embeddings.EndpointEmbedder``: the configured OpenAI-compatible endpoint's
  ``/v1/embeddings`` (``OPENAI_EMBEDDING_MODEL``), for users who run an embedding model.

Stored vectors are float16 bytes (``encode``/``decode``), one row per archived message.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

WORDLLAMA_DIMENSIONS = 64


class EmbeddingUnavailable(RuntimeError):
    """The embedding model cannot be loaded or reached; retrieval falls back to words alone."""


@runtime_checkable
class Embedder(Protocol):
    """Texts in, unit vectors out (float32, shape ``(len(texts), dimensions)``)."""

    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length row per text, in order; an empty text gives a zero row.

        Raises EmbeddingUnavailable when the model cannot answer (the caller searches without
        vectors, never fails the turn)."""
        ...


def normalized(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def encode(vectors: np.ndarray) -> bytes:
    """The stored form: float16, row after row."""
    return np.ascontiguousarray(vectors, dtype=np.float16).tobytes()


def decode(data: bytes, dimensions: int) -> np.ndarray:
    """``encode``'s inverse, as float32 rows of ``dimensions``."""
    flat = np.frombuffer(data, dtype=np.float16)
    if dimensions <= 0 or flat.size % dimensions:
        raise ValueError(f"{len(data)} bytes are not rows of {dimensions} float16 values")
    return flat.reshape(-1, dimensions).astype(np.float32)


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat``, truncated to ``dimensions`` (Matryoshka), loaded from its wheel."""

    def __init__(self, *, dimensions: int = WORDLLAMA_DIMENSIONS) -> None:
        if dimensions not in (64, 128, 256):
            raise ValueError("WordLlama dimensions must be 64, 128 or 256")
        self.dimensions = dimensions
        self.model = f"wordllama-l2_supercat-{dimensions}"
        self._model = None
        self._lock = threading.Lock()

    def _loaded(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    try:
                        import wordllama
                        from wordllama import WordLlama

                        # The wheel carries the weights and the tokenizer; pointing the cache at
                        # the package itself finds both, and disable_download makes a missing
                        # file an error instead of a network call.
                        self._model = WordLlama.load(
                            cache_dir=Path(wordllama.__file__).parent,
                            trunc_dim=None if self.dimensions == 256 else self.dimensions,
                            disable_download=True,
                        )
                    except Exception as exc:  # ImportError, FileNotFoundError, a damaged wheel
                        raise EmbeddingUnavailable(f"the embedded WordLlama model cannot be loaded: {exc}") from exc
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        model = self._loaded()
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        present = [i for i, text in enumerate(texts) if text and text.strip()]
        if present:
            vectors = model.embed([texts[i] for i in present], norm=False)
            out[present] = np.asarray(vectors, dtype=np.float32)[:, : self.dimensions]
        return normalized(out)


_default: Embedder | None = None
_default_lock = threading.Lock()


def offline_embedder() -> Embedder:
    """The process's embedded offline model (loaded on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = WordLlamaEmbedder()
        return _default
