"""The one interface evaluation, analysis and post-processing depend on: texts → vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


class EmbeddingError(ValueError):
    """A model gave vectors that are not numbers (NaN or infinity): never written, indexed or served."""


def require_finite(vectors: np.ndarray, sentences: Sequence[str], source: str | None) -> np.ndarray:
    """``vectors`` as they are when every value is finite; else one EmbeddingError naming the first
    sentence whose vector is not (a model with broken weights, or an overflow in low precision)."""
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise EmbeddingError(
            f"{source or 'the model'}: NaN or infinite embedding values for {int(bad.sum())} of "
            f"{len(vectors)} sentences (the first is #{first}: {sentences[first][:80]!r}); the model's "
            f"weights or its precision are broken, so nothing is written"
        )
    return vectors


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Every row scaled to unit L2 norm (a zero row stays zero), in ``x``'s dtype."""
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@runtime_checkable
class Embedder(Protocol):
    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Return one row per sentence, shape [N, D]."""
        ...


class CachedEmbedder:
    """Remembers the vector of every sentence it has encoded: several measurements of one model at one
    moment (STS, alignment/uniformity, spectrum) then encode each sentence once."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        new = sorted({s for s in sentences if s not in self.cache})
        if new:
            self.cache.update(zip(new, self.embedder.encode(new), strict=True))
        return (
            np.stack([self.cache[s] for s in sentences]) if len(sentences) else np.zeros((0, 0), np.float32)
        )
