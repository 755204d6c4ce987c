"""Intervals over seeds, the paired bootstrap over evaluation pairs and tie bands, against hand
computations."""

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from sentcl.evaluation.significance import PairedBootstrap, seed_interval, tie_bands

GOLD = np.array([0.0, 1.0, 2.5, 3.0, 4.0, 5.0])
A = np.array([0.1, 0.3, 0.2, 0.6, 0.9, 0.8])  # close to the gold order
B = np.array([0.5, 0.1, 0.4, 0.3, 0.2, 0.6])  # far from it


def by_hand(system, indices):
    rho = spearmanr(system[indices], GOLD[indices]).statistic
    return 100 * rho


def test_seed_interval_is_students_t_from_three_seeds_on():
    interval = seed_interval([77.0, 77.5, 76.4])
    mean, std = 76.96666666666667, math.sqrt(((0.0333) ** 2 + 0.5333**2 + 0.5667**2) / 2)
    half = 4.302652729911275 * std / math.sqrt(3)  # t(0.975, df=2)
    assert interval.mean == pytest.approx(mean)
    assert interval.std == pytest.approx(std, abs=1e-3)
    assert (interval.low, interval.high) == pytest.approx((mean - half, mean + half), abs=1e-3)
    assert str(interval) == f"76.97 ± {interval.std:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
    assert seed_interval([80.0, 81.0]).low is None and seed_interval([80.0]).std is None


def test_paired_bootstrap_equals_the_hand_computation_on_fixed_draws():
    draws = np.array([[0, 1, 2, 3, 4, 5], [0, 0, 2, 3, 5, 5], [1, 2, 2, 4, 4, 5], [5, 4, 3, 0, 1, 1]])
    boot = PairedBootstrap.from_indices(GOLD, draws)
    boot.add("a", A)
    boot.add("b", B)
    differences = np.array([by_hand(A, d) - by_hand(B, d) for d in draws])
    assert boot.replicates["a"] == pytest.approx([by_hand(A, d) for d in draws])
    difference = boot.compare("a", "b")
    assert difference.delta == pytest.approx(by_hand(A, np.arange(6)) - by_hand(B, np.arange(6)))
    assert (difference.low, difference.high) == pytest.approx(tuple(np.percentile(differences, [2.5, 97.5])))


def test_seeds_are_drawn_per_replicate_and_averaged():
    """Two seeds of a row; replicate r scores the seeds drawn for it on replicate r's pairs."""
    draws = np.array([[0, 1, 2, 3, 4, 5], [0, 0, 2, 3, 5, 5], [1, 2, 2, 4, 4, 5]])
    seeds = np.stack([A, B])  # seed 0 scores like A, seed 1 like B
    seed_draws = np.array([[0, 0], [1, 1], [0, 1]])
    boot = PairedBootstrap.from_indices(GOLD, draws)
    boot.add("row", seeds, seed_draws=seed_draws)
    expected = [
        by_hand(A, draws[0]),
        by_hand(B, draws[1]),
        (by_hand(A, draws[2]) + by_hand(B, draws[2])) / 2,
    ]
    assert boot.replicates["row"] == pytest.approx(expected)
    assert boot.points["row"] == pytest.approx((by_hand(A, np.arange(6)) + by_hand(B, np.arange(6))) / 2)


def test_a_real_difference_is_distinguishable_and_a_row_against_itself_is_not():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 800)
    good = gold + rng.normal(0, 1.0, 800)
    bad = gold + rng.normal(0, 3.0, 800)
    boot = PairedBootstrap(gold, resamples=300, seed=1)
    boot.add("good", good)
    boot.add("bad", bad)
    boot.add("good again", good)
    assert boot.compare("good", "bad").distinguishable and boot.compare("good", "bad").delta > 0
    same = boot.compare("good", "good again")
    assert not same.distinguishable and same.delta == 0 and same.low == same.high == 0
    again = PairedBootstrap(gold, resamples=300, seed=1)  # seeded: the same intervals again
    again.add("good", good)
    again.add("bad", bad)
    assert again.compare("good", "bad") == boot.compare("good", "bad")


def test_pairing_cancels_the_noise_both_rows_share():
    """Two rows that differ by a small constant improvement on every pair: told apart when paired, though
    each row's own interval is far wider than the difference."""
    rng = np.random.default_rng(3)
    gold = rng.uniform(0, 5, 1500)
    shared = gold + rng.normal(0, 2.0, 1500)
    better = shared + 0.15 * (gold - shared)  # a little closer to gold on every pair
    boot = PairedBootstrap(gold, resamples=400, seed=0)
    boot.add("shared", shared)
    boot.add("better", better)
    difference = boot.compare("better", "shared")
    own = np.percentile(boot.replicates["shared"], [2.5, 97.5])
    assert difference.distinguishable and difference.high - difference.low < own[1] - own[0]


def test_tie_bands_open_a_band_only_against_the_band_leader():
    scores = {"a": 80.0, "b": 79.6, "c": 79.1, "d": 77.0, "e": 76.8}

    def apart(x, y):  # told apart from 0.8 points on
        return abs(scores[x] - scores[y]) >= 0.8

    assert tie_bands(list(scores), apart) == [1, 1, 2, 3, 3]  # c is 0.9 below a, though 0.5 below b
    assert tie_bands([], apart) == []


def test_seed_difference_is_welchs_interval_and_an_exact_side_has_no_variance():
    from sentcl.evaluation.significance import seed_difference

    a, b = [77.0, 77.5, 76.4], [76.0, 76.9, 76.2, 75.8]
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    from scipy.stats import t

    half = t.ppf(0.975, df) * math.sqrt(va + vb)
    delta = np.mean(a) - np.mean(b)
    d = seed_difference(a, b)
    assert (d.delta, d.low, d.high) == pytest.approx((delta, delta - half, delta + half))
    exact = seed_difference(a, [75.0], b_exact=True)  # one-sample t against a fixed value
    half = t.ppf(0.975, 2) * math.sqrt(np.var(a, ddof=1) / 3)
    assert (exact.low, exact.high) == pytest.approx((np.mean(a) - 75 - half, np.mean(a) - 75 + half))
    assert seed_difference([70.0], [69.0], True, True).distinguishable
    assert seed_difference([77.0], b) is None  # one seed of a trained row: no variance to estimate


def test_the_bootstrap_over_items_resamples_the_queries_of_both_rows_together():
    """--against on a retrieval task (issue 56): per-query scores, the same draws of queries for both rows."""
    import numpy as np

    from sentcl.evaluation.significance import MeanBootstrap, compare

    a = np.array([80.0, 60.0, 70.0, 90.0, 50.0])
    b = a - 5.0  # the same queries, 5 points lower each: every draw differs by exactly 5
    boot = MeanBootstrap(len(a), resamples=200)
    boot.add("a", a)
    boot.add("b", b)
    difference = boot.compare("a", "b")
    assert difference.delta == pytest.approx(5.0) and difference.low == pytest.approx(5.0)
    assert difference.high == pytest.approx(5.0) and difference.distinguishable
    noisy = MeanBootstrap(len(a), resamples=200)
    noisy.add("a", a)
    noisy.add("b", a[::-1])  # the same scores on other queries: the mean equal, the draws not
    assert noisy.compare("a", "b").delta == pytest.approx(0.0) and not noisy.compare("a", "b").distinguishable
    found = compare([{"q": a.mean()}], [{"q": b.mean()}], items=[{"q": a}], against_items=[{"q": b}])
    assert set(found["q"].intervals) == {"queries"} and found["q"].told_apart
