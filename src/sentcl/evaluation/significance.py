"""Which differences between scores are real: intervals over seeds, a paired bootstrap over evaluation
pairs, and tie bands.

* **Over seeds** (``seed_interval``): mean, sample standard deviation (n − 1) and, from 3 seeds on, a 95 %
  interval of the mean by Student's t (mean ± t₀.₉₇₅,ₙ₋₁ · s / √n). It says how much the number moves with
  the training run's randomness, on the one evaluation set.
* **Over evaluation pairs** (``PairedBootstrap``): the evaluation set is a sample too. Every replicate draws
  n pairs with replacement from the n evaluation pairs and scores **every row on the same draw** (paired), so
  the noise both rows share cancels in their difference. A row measured with several seeds is scored as
  the mean over its seeds, and each replicate also draws the row's seeds with replacement (a two-level
  bootstrap: pairs shared by all rows, seeds per row), so one interval carries both sources of noise. The
  difference a − b is **distinguishable from zero** when its 95 % percentile interval excludes 0.
* **Between two rows over seeds** (``seed_difference``): Welch's interval of the difference of the means,
  where an untrained encoder's row is exact (no seed variance).
* **Tie bands** (``tie_bands``): rows in order of their score; a row joins the band of the row above when
  it cannot be told apart from that band's first (best) row, and opens a new band when it can.

Scores are Spearman ×100 between the system's scores (cosines) and the gold scores, as the STS tables.
The draws come from a seeded generator: the same inputs give the same intervals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata
from scipy.stats import t as student_t

CONFIDENCE = 0.95
RESAMPLES = 1000


@dataclass(frozen=True)
class SeedInterval:
    """A score over seeds: mean, sample standard deviation and, from 3 seeds on, the 95 % t interval."""

    mean: float
    std: float | None  # None: one value
    n: int
    low: float | None = None  # None: fewer than 3 values
    high: float | None = None

    def __str__(self) -> str:
        if self.std is None:
            return f"{self.mean:.2f}"
        text = f"{self.mean:.2f} ± {self.std:.2f}"
        return text + (f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None else "")


def seed_interval(given: Sequence[float], confidence: float = CONFIDENCE) -> SeedInterval:
    values = np.asarray(given, dtype=np.float64)
    if len(values) == 0:
        raise ValueError("no values")
    mean = float(values.mean())
    if len(values) < 2:
        return SeedInterval(mean, None, 1)
    std = float(values.std(ddof=1))
    if len(values) < 3:
        return SeedInterval(mean, std, len(values))
    half = float(student_t.ppf((1 + confidence) / 2, len(values) - 1)) * std / math.sqrt(len(values))
    return SeedInterval(mean, std, len(values), mean - half, mean + half)


@dataclass(frozen=True)
class Difference:
    """a − b: the point estimate (each row's mean over its seeds, on every pair) and its interval."""

    delta: float
    low: float
    high: float

    @property
    def distinguishable(self) -> bool:
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        return f"{self.delta:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def seed_difference(
    a: Sequence[float],
    b: Sequence[float],
    a_exact: bool = False,
    b_exact: bool = False,
    confidence: float = CONFIDENCE,
) -> Difference | None:
    """mean(a) − mean(b) over seeds, with Welch's 95 % interval (Welch–Satterthwaite degrees of freedom). An
    ``exact`` side is a deterministic measurement (an untrained encoder): no seed variance. None where a
    side that varies has fewer than 2 values (nothing to estimate its variance from)."""
    a_values, b_values = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    delta = float(a_values.mean() - b_values.mean())
    parts = []
    for values, exact in ((a_values, a_exact), (b_values, b_exact)):
        if exact:
            continue
        if len(values) < 2:
            return None
        parts.append((float(values.var(ddof=1)) / len(values), len(values) - 1))
    if not parts:
        return Difference(delta, delta, delta)
    variance = sum(v for v, _ in parts)
    if variance == 0:
        return Difference(delta, delta, delta)
    freedom = variance**2 / sum(v**2 / df for v, df in parts)
    half = float(student_t.ppf((1 + confidence) / 2, freedom)) * math.sqrt(variance)
    return Difference(delta, delta - half, delta + half)


def spearman_rows(system: np.ndarray, gold_ranks: np.ndarray) -> np.ndarray:
    """Spearman ×100 of each row of ``system`` [R, n] against the same row of ``gold_ranks`` [R, n] (the gold
    scores' average ranks): the Pearson correlation of the average ranks, as scipy.stats.spearmanr."""
    ranks = rankdata(system, axis=1)
    a = ranks - ranks.mean(axis=1, keepdims=True)
    b = gold_ranks - gold_ranks.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * (a * b).sum(axis=1) / denominator


class PairedBootstrap:
    """Rows scored on the same evaluation pairs (one ``gold`` array), compared on the same draws.

    ``add(name, scores)`` takes a row's system scores, [n] or [seeds, n]; ``compare(a, b)`` the difference
    of two added rows. Draws of pairs are made once, at construction; each row's draws of seeds once, when it
    is added (seeded by its position), so the result does not depend on which comparisons are asked.
    """

    def __init__(
        self, gold: np.ndarray, resamples: int = RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE
    ):
        gold = np.asarray(gold, dtype=np.float64)
        if gold.ndim != 1 or len(gold) < 3:
            raise ValueError("a paired bootstrap needs a 1-d array of at least 3 gold scores")
        self.gold, self.confidence, self.seed = gold, confidence, seed
        generator = np.random.default_rng(seed)
        self.indices = generator.integers(0, len(gold), size=(resamples, len(gold)))
        self.gold_ranks = rankdata(gold[self.indices], axis=1)
        self.full_gold_ranks = rankdata(gold)[None]  # [1, n]: the point estimates' gold, every pair once
        self.points: dict[str, float] = {}
        self.replicates: dict[str, np.ndarray] = {}  # name → [resamples]

    @classmethod
    def from_indices(cls, gold: np.ndarray, indices: np.ndarray, confidence: float = CONFIDENCE):
        """Explicit draws (``indices`` [R, n] of pair positions): for tests and hand computations."""
        made = cls(gold, resamples=1, confidence=confidence)
        made.indices = np.asarray(indices)
        made.gold_ranks = rankdata(made.gold[made.indices], axis=1)
        return made

    def add(self, name: str, scores: np.ndarray, seed_draws: np.ndarray | None = None) -> None:
        scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
        if scores.shape[1] != len(self.gold):
            raise ValueError(f"{name}: {scores.shape[1]} scores for {len(self.gold)} evaluation pairs")
        per_seed = np.stack([spearman_rows(s[self.indices], self.gold_ranks) for s in scores])  # [S, R]
        resamples = per_seed.shape[1]
        if seed_draws is None:
            generator = np.random.default_rng([self.seed, len(self.replicates) + 1])
            seed_draws = generator.integers(0, len(scores), size=(resamples, len(scores)))
        # replicate r: the mean over the seeds drawn for it, each scored on replicate r's pairs
        self.replicates[name] = per_seed[seed_draws, np.arange(resamples)[:, None]].mean(axis=1)
        self.points[name] = float(np.mean([spearman_rows(s[None], self.full_gold_ranks)[0] for s in scores]))

    def compare(self, a: str, b: str) -> Difference:
        differences = self.replicates[a] - self.replicates[b]
        tail = 100 * (1 - self.confidence) / 2
        low, high = np.percentile(differences, [tail, 100 - tail])
        return Difference(self.points[a] - self.points[b], float(low), float(high))


class MeanBootstrap:
    """Rows scored item by item on the same evaluation items (a retrieval task's queries), compared on the
    same draws of items: each replicate draws n items with replacement, scores every row by its mean over
    them (a row of several seeds: the mean over its seeds, drawn again per replicate, as PairedBootstrap)."""

    def __init__(self, items: int, resamples: int = RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE):
        if items < 3:
            raise ValueError("a bootstrap over items needs at least 3 of them")
        self.items, self.confidence, self.seed = items, confidence, seed
        self.indices = np.random.default_rng(seed).integers(0, items, size=(resamples, items))
        self.points: dict[str, float] = {}
        self.replicates: dict[str, np.ndarray] = {}

    def add(self, name: str, scores: np.ndarray) -> None:
        scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))  # [seeds, items]
        if scores.shape[1] != self.items:
            raise ValueError(f"{name}: {scores.shape[1]} scores for {self.items} evaluation items")
        per_seed = scores[:, self.indices].mean(axis=2)  # [S, R]
        resamples = per_seed.shape[1]
        generator = np.random.default_rng([self.seed, len(self.replicates) + 1])
        seed_draws = generator.integers(0, len(scores), size=(resamples, len(scores)))
        self.replicates[name] = per_seed[seed_draws, np.arange(resamples)[:, None]].mean(axis=1)
        self.points[name] = float(scores.mean())

    def compare(self, a: str, b: str) -> Difference:
        differences = self.replicates[a] - self.replicates[b]
        tail = 100 * (1 - self.confidence) / 2
        low, high = np.percentile(differences, [tail, 100 - tail])
        return Difference(self.points[a] - self.points[b], float(low), float(high))


def tie_bands(names: Sequence[str], apart: Callable[[str, str], bool]) -> list[int]:
    """Band numbers (1 = the top) for ``names`` in order, best first: a row opens a new band when
    ``apart(leader, row)`` says it can be told apart from the first row of the current band."""
    bands: list[int] = []
    leader = None
    for name in names:
        if leader is None or apart(leader, name):
            leader = name
            bands.append(bands[-1] + 1 if bands else 1)
        else:
            bands.append(bands[-1])
    return bands


def summarize(runs: Sequence[Mapping[str, float]]) -> dict[str, SeedInterval]:
    """Per metric of several runs (seeds, or models): its interval over them."""
    keys = list(dict.fromkeys(k for run in runs for k in run))
    return {key: seed_interval([run[key] for run in runs if key in run]) for key in keys}


@dataclass(frozen=True)
class Comparison:
    """One metric of two groups of runs: the difference of their means and its 95 % intervals (``models``:
    Welch's over the runs; ``pairs``: the paired bootstrap over the evaluation pairs)."""

    difference: float
    intervals: dict[str, Difference]

    @property
    def told_apart(self) -> bool:
        return bool(self.intervals) and all(i.distinguishable for i in self.intervals.values())

    def __str__(self) -> str:
        said = ", ".join(f"{name} {i}" for name, i in self.intervals.items()) or "no interval (one run each)"
        return f"{self.difference:+.2f}  {said}  {'told apart' if self.told_apart else 'not distinguishable'}"


def compare(
    runs: Sequence[Mapping[str, float]],
    against: Sequence[Mapping[str, float]],
    pairs: Sequence[Mapping[str, tuple[np.ndarray, np.ndarray]]] = (),
    against_pairs: Sequence[Mapping[str, tuple[np.ndarray, np.ndarray]]] = (),
    items: Sequence[Mapping[str, np.ndarray]] = (),
    against_items: Sequence[Mapping[str, np.ndarray]] = (),
) -> dict[str, Comparison]:
    """Every metric both groups have: mean(runs) − mean(against), with Welch's interval over the runs and,
    where every run kept the metric's evaluation pairs (system scores, gold) on the same gold, the paired
    bootstrap over those pairs with each group's runs drawn again in every draw; where every run kept the
    metric's value per item instead (a retrieval task's per-query nDCG@10), the paired bootstrap over the
    items (``queries``)."""
    every, kept, scored = [*runs, *against], [*pairs, *against_pairs], [*items, *against_items]
    out = {}
    for key in (k for k in runs[0] if all(k in r for r in every)):
        a, b = [r[key] for r in runs], [r[key] for r in against]
        over_runs = seed_difference(a, b)
        intervals = {"models": over_runs} if over_runs is not None else {}
        if len(kept) == len(every) and all(key in p for p in kept):
            gold = kept[0][key][1]
            if all(np.array_equal(p[key][1], gold) for p in kept):
                bootstrap = PairedBootstrap(gold)
                bootstrap.add("a", np.stack([p[key][0] for p in pairs]))
                bootstrap.add("b", np.stack([p[key][0] for p in against_pairs]))
                intervals["pairs"] = bootstrap.compare("a", "b")
        if len(scored) == len(every) and all(key in s for s in scored):
            count = len(scored[0][key])
            if all(len(s[key]) == count for s in scored) and count >= 3:
                means = MeanBootstrap(count)
                means.add("a", np.stack([s[key] for s in items]))
                means.add("b", np.stack([s[key] for s in against_items]))
                intervals["queries"] = means.compare("a", "b")
        out[key] = Comparison(float(np.mean(a) - np.mean(b)), intervals)
    return out
