"""Whitening (Su et al. 2021, "Whitening sentence representations for better semantics and faster
retrieval").

    x̃ = (x − μ) W,   W = U Λ^{-1/2} [:, :k],   Σ = U Λ Uᵀ the SVD of the fitted set's covariance.

The transformed fitting set has identity covariance; ``k`` < D keeps the top-k directions (their
dimensionality reduction).
"""

from __future__ import annotations

import numpy as np

from sentcl.postprocess.base import PostProcessor


class Whitening(PostProcessor):
    name = "whitening"

    def __init__(self, k: int | None = None, eps: float = 1e-12):
        self.k = k
        self.eps = eps
        self.mean: np.ndarray | None = None
        self.matrix: np.ndarray | None = None

    def fit(self, embeddings: np.ndarray) -> Whitening:
        x = np.asarray(embeddings, dtype=np.float64)
        self.mean = x.mean(axis=0)
        covariance = np.cov(x - self.mean, rowvar=False)
        u, s, _ = np.linalg.svd(covariance)
        w = u / np.sqrt(np.maximum(s, self.eps))
        self.matrix = w[:, : self.k] if self.k else w
        return self

    def _fitted(self) -> tuple[np.ndarray, np.ndarray]:
        if self.mean is None or self.matrix is None:
            raise RuntimeError("Whitening: fit before transform")
        return self.mean, self.matrix

    def transform(self, embeddings: np.ndarray) -> np.ndarray:
        mean, matrix = self._fitted()
        return (np.asarray(embeddings, dtype=np.float64) - mean) @ matrix

    def options(self) -> dict:
        return {"k": self.k, "eps": self.eps}

    def arrays(self) -> dict[str, np.ndarray]:
        mean, matrix = self._fitted()
        return {"mean": mean, "matrix": matrix}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.mean, self.matrix = arrays["mean"], arrays["matrix"]
