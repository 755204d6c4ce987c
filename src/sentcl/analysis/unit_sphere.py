"""Embeddings on the unit sphere: the normalisation every geometry measure (alignment, uniformity, the
spectrum) starts from."""

from __future__ import annotations

import numpy as np


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
