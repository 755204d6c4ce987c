import numpy as np
import pytest

from sentcl.analysis.spectrum import (
    average_cosine_all_pairs,
    average_cosine_random_pairs,
    effective_rank,
    normalized_singular_values,
    positive_share,
    spectrum_summary,
)


def test_isotropic_gaussian_has_a_flat_spectrum():
    x = np.random.default_rng(0).normal(size=(20_000, 16))
    values = normalized_singular_values(x)
    # Marchenko–Pastur: the singular values of an n×d Gaussian sample lie within √n (1 ± √(d/n));
    # allow twice that spread for the smallest/largest ratio.
    edge = np.sqrt(16 / 20_000)
    assert values.min() > (1 - 2 * edge) / (1 + 2 * edge)
    assert effective_rank(values) == pytest.approx(16, rel=0.01)


def test_anisotropic_cone_is_detected():
    rng = np.random.default_rng(1)
    cone = rng.normal(size=(500, 32)) * 0.2 + 3.0  # every vector near the same direction
    summary = spectrum_summary(cone)
    assert summary["avg_cos_all"] > 0.9
    assert summary["sv10"] < 0.1
    assert summary["gram_positive_share"] == 1.0 and summary["bound_condition_holds"] == 1.0
    assert summary["gram_top_eigenvalue"] <= summary["gram_sum"]


def test_average_cosines_against_direct_computation():
    x = np.random.default_rng(2).normal(size=(40, 6)) + 0.5
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    gram = u @ u.T
    off_diagonal = gram[~np.eye(40, dtype=bool)]
    assert average_cosine_all_pairs(x) == pytest.approx(off_diagonal.mean())
    assert average_cosine_random_pairs(x, n_pairs=200_000) == pytest.approx(off_diagonal.mean(), abs=0.01)
    assert positive_share(x, chunk=7) == pytest.approx((off_diagonal > 0).mean())


def test_top_eigenvalue_matches_gram_matrix():
    x = np.random.default_rng(3).normal(size=(30, 5))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    summary = spectrum_summary(x)
    assert summary["gram_top_eigenvalue"] == pytest.approx(np.linalg.eigvalsh(u @ u.T).max())
    assert summary["gram_sum"] == pytest.approx((u @ u.T).sum())
