"""Alignment and uniformity (Wang & Isola, ICML 2020) on L2-normalised embeddings.

    ℓ_align(α)   = E_{(x, x⁺) ~ p_pos} ‖f(x) − f(x⁺)‖^α                         (lower = positives closer)
    ℓ_uniform(t) = log E_{x, y ~ p_data, x ≠ y} e^{−t ‖f(x) − f(y)‖²}             (lower = more uniform)

ℓ_uniform runs over all distinct pairs (Wang & Isola's ``pdist``) in row chunks with a streaming
log-sum-exp, so memory stays O(chunk · N) and there is no O(N²) matrix.

The default probe is SimCSE's (§5): STS-B pairs with gold score > 4 as positives, every STS-B sentence as
data. Any file of sentence pairs can be used instead.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sentcl.analysis.spectrum import spectrum_summary
from sentcl.analysis.unit_sphere import l2_normalize
from sentcl.embedder import Embedder
from sentcl.errors import MissingDataError
from sentcl.evaluation.sts_data import load_task


def alignment(x: np.ndarray, y: np.ndarray, alpha: float = 2.0) -> float:
    """ℓ_align over paired rows of x and y (each [N, D]); both are L2-normalised first."""
    distance = np.linalg.norm(l2_normalize(x) - l2_normalize(y), axis=1)
    return float(np.mean(distance**alpha))


def uniformity(x: np.ndarray, t: float = 2.0, chunk: int = 1024) -> float:
    """ℓ_uniform over the N(N−1)/2 distinct pairs of rows of x (L2-normalised first), chunked."""
    u = l2_normalize(x)
    n = len(u)
    if n < 2:
        raise ValueError("uniformity needs at least two embeddings")
    total = -np.inf
    for start in range(0, n - 1, chunk):
        rows = u[start : start + chunk]  # [c, D]
        squared = np.clip(2.0 - 2.0 * (rows @ u[start:].T), 0.0, None)  # [c, N − start]
        upper = np.triu(np.ones_like(squared, dtype=bool), k=1)  # j > i only
        exponents = -t * squared[upper]
        if exponents.size:
            peak = exponents.max()
            total = np.logaddexp(total, peak + np.log(np.exp(exponents - peak).sum()))
    return float(total - np.log(n * (n - 1) / 2))


@dataclass
class AlignUniformProbe:
    """Positive pairs for ℓ_align and data sentences for ℓ_uniform."""

    positives1: list[str]
    positives2: list[str]
    sentences: list[str]
    source: str


def stsb_probe(data_dir: str | Path, split: str = "dev", threshold: float = 4.0) -> AlignUniformProbe:
    """SimCSE's protocol on an STS-B split: pairs with gold > threshold, all sentences of the split."""
    task = load_task(Path(data_dir), "STSBenchmark", (split,))
    if task.missing:
        raise MissingDataError(f"alignment/uniformity probe: {task.missing}")
    pairs = task.datasets[split]
    keep = pairs.scores > threshold
    first = [s for s, k in zip(pairs.sentences1, keep, strict=True) if k]
    second = [s for s, k in zip(pairs.sentences2, keep, strict=True) if k]
    sentences = sorted(set(pairs.sentences1) | set(pairs.sentences2))
    return AlignUniformProbe(first, second, sentences, f"STS-B {split}, gold > {threshold:g}")


def pair_file_probe(path: str | Path) -> AlignUniformProbe:
    """A csv/tsv of positive pairs (first two columns); the data is every sentence in the file."""
    path = Path(path)
    delimiter = "\t" if path.suffix == ".tsv" else ","
    first, second = [], []
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter=delimiter), start=1):
            if not row:
                continue
            if len(row) < 2 or not row[0].strip() or not row[1].strip():
                raise ValueError(f"{path}:{number}: expected two non-empty sentences")
            first.append(row[0].strip())
            second.append(row[1].strip())
    if not first:
        raise ValueError(f"{path}:1: no pairs")
    return AlignUniformProbe(first, second, sorted(set(first) | set(second)), str(path))


def align_uniform(
    embedder: Embedder, probe: AlignUniformProbe, alpha: float = 2.0, t: float = 2.0
) -> dict[str, float]:
    """Encode the probe's sentences once and return {"align": …, "uniform": …}."""
    sentences = sorted(set(probe.sentences) | set(probe.positives1) | set(probe.positives2))
    vectors = embedder.encode(sentences)
    row = {s: i for i, s in enumerate(sentences)}
    x = vectors[[row[s] for s in probe.positives1]]
    y = vectors[[row[s] for s in probe.positives2]]
    data = vectors[[row[s] for s in probe.sentences]]
    return {"align": alignment(x, y, alpha), "uniform": uniformity(data, t)}


def geometry_snapshot(embedder: Embedder, probe: AlignUniformProbe) -> dict[str, float]:
    """ℓ_align, ℓ_uniform and the spectrum summary of the probe sentences — what a training run logs
    at each evaluation step to leave its trajectory on the alignment–uniformity plane."""
    snapshot = align_uniform(embedder, probe)
    spectrum = spectrum_summary(embedder.encode(probe.sentences))
    keys = ("avg_cos_random", "effective_rank", "gram_top_eigenvalue", "gram_sum", "sv10", "sv50")
    return snapshot | {k: spectrum[k] for k in keys if k in spectrum}
