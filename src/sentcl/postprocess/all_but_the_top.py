"""All-but-the-top (Mu & Viswanath, ICLR 2018): remove the mean and the top D principal directions.

    x' = x̃ − Σ_{i≤D} (u_iᵀ x̃) u_i,   x̃ = x − μ,   u_i the top principal directions of the fitted set.

D defaults to ≈ dimension / 100 (their recommendation), at least 1.
"""

from __future__ import annotations

import numpy as np

from sentcl.postprocess.base import PostProcessor


class AllButTheTop(PostProcessor):
    name = "abtt"

    def __init__(self, n_components: int | None = None):
        self.n_components = n_components
        self.mean: np.ndarray | None = None
        self.directions: np.ndarray | None = None  # [D, dim], orthonormal rows

    def fit(self, embeddings: np.ndarray) -> AllButTheTop:
        x = np.asarray(embeddings, dtype=np.float64)
        self.mean = x.mean(axis=0)
        d = self.n_components or max(1, round(x.shape[1] / 100))
        _, _, vt = np.linalg.svd(x - self.mean, full_matrices=False)
        self.directions = vt[:d]
        return self

    def _fitted(self) -> tuple[np.ndarray, np.ndarray]:
        if self.mean is None or self.directions is None:
            raise RuntimeError("AllButTheTop: fit before transform")
        return self.mean, self.directions

    def transform(self, embeddings: np.ndarray) -> np.ndarray:
        mean, directions = self._fitted()
        centered = np.asarray(embeddings, dtype=np.float64) - mean
        return centered - (centered @ directions.T) @ directions

    def options(self) -> dict:
        return {"n_components": self.n_components}

    def arrays(self) -> dict[str, np.ndarray]:
        mean, directions = self._fitted()
        return {"mean": mean, "directions": directions}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.mean, self.directions = arrays["mean"], arrays["directions"]
