"""Anisotropy of an embedding matrix: singular spectrum, average cosine, effective rank, the Sum(WWᵀ) bound.

With W the matrix whose rows are the L2-normalised embeddings h_i, the uniformity side of the contrastive
loss is bounded below by Sum(WWᵀ)/(τm²) = Σ_ij h_iᵀh_j/(τm²) (SimCSE §5). When every entry of WWᵀ is
positive, Sum(WWᵀ) bounds the top eigenvalue of WWᵀ (Merikoski 1984), so minimising it flattens the
singular spectrum. ``spectrum_summary`` reports both numbers and whether the condition holds.
"""

from __future__ import annotations

import numpy as np

from sentcl.analysis.unit_sphere import l2_normalize


def normalized_singular_values(x: np.ndarray, center: bool = False) -> np.ndarray:
    """Singular values of x (rows = embeddings; centred first if asked) divided by the largest."""
    x = np.asarray(x, dtype=np.float64)
    if center:
        x = x - x.mean(axis=0, keepdims=True)
    values = np.linalg.svd(x, compute_uv=False)
    return values / values[0]


def effective_rank(singular_values: np.ndarray) -> float:
    """Roy & Vetterli (2007): exp of the entropy of the singular values as a distribution."""
    p = singular_values / singular_values.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def average_cosine_all_pairs(x: np.ndarray) -> float:
    """Mean cosine over all i ≠ j pairs, in O(N·D): (‖Σ u_i‖² − N) / (N(N−1))."""
    u = l2_normalize(x)
    n = len(u)
    total = u.sum(axis=0)
    return float((total @ total - n) / (n * (n - 1)))


def average_cosine_random_pairs(x: np.ndarray, n_pairs: int = 100_000, seed: int = 0) -> float:
    """Mean cosine between random pairs of distinct rows (the usual anisotropy probe)."""
    u = l2_normalize(x)
    rng = np.random.default_rng(seed)
    i = rng.integers(0, len(u), n_pairs)
    j = (i + rng.integers(1, len(u), n_pairs)) % len(u)  # never i
    return float(np.mean(np.sum(u[i] * u[j], axis=1)))


def positive_share(x: np.ndarray, chunk: int = 2048) -> float:
    """Share of the off-diagonal entries of WWᵀ (W = normalised rows) that are positive, chunked."""
    u = l2_normalize(x)
    n = len(u)
    positive = 0
    for start in range(0, n, chunk):
        block = u[start : start + chunk] @ u.T
        positive += int((block > 0).sum()) - int((np.diagonal(block[:, start:]) > 0).sum())
    return positive / (n * (n - 1))


def spectrum_summary(x: np.ndarray, center: bool = False) -> dict[str, float]:
    u = l2_normalize(x)
    singular = normalized_singular_values(u, center=center)
    top_eigenvalue = float(np.linalg.svd(u, compute_uv=False)[0] ** 2)  # λ_max(WWᵀ) = σ_max(W)²
    total = u.sum(axis=0)
    share = positive_share(u)
    summary = {
        "avg_cos_random": average_cosine_random_pairs(u),
        "avg_cos_all": average_cosine_all_pairs(u),
        "effective_rank": effective_rank(singular),
        "gram_top_eigenvalue": top_eigenvalue,
        "gram_sum": float(total @ total),  # Sum(WWᵀ) = ‖Σ h_i‖²
        "gram_positive_share": share,
        "bound_condition_holds": float(share == 1.0),  # all entries positive → λ_max ≤ Sum(WWᵀ)
    }
    for k in (10, 50, 100):
        if len(singular) >= k:
            summary[f"sv{k}"] = float(singular[k - 1])
    return summary
