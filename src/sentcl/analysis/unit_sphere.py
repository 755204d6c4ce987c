"""Embeddings on the unit sphere: the normalisation every geometry measure (alignment, uniformity, the
spectrum) starts from."""

from __future__ import annotations

import numpy as np

from sentcl.embedder import unit_rows


def l2_normalize(x: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(x, dtype=np.float64))
