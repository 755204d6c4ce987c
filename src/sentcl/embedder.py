"""The one interface evaluation, analysis and post-processing depend on: texts → vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


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
