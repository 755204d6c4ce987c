"""Measure models side by side and write a Markdown report with tables and figures.

For each model (an Embedder, possibly post-processed) on an STS-B split: Spearman of cosine vs gold,
ℓ_align / ℓ_uniform with SimCSE's probe, the spectrum summary of the split's sentence embeddings, and the
cosine/gold pairs for the density figure. A training run's folder adds its trajectory (logged at every
evaluation step) to the alignment–uniformity figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentcl import finite_json
from sentcl.analysis.alignment_uniformity import align_uniform, stsb_probe
from sentcl.analysis.plots import (
    PlanePoint,
    plot_alignment_uniformity,
    plot_cosine_density,
    plot_singular_values,
)
from sentcl.analysis.spectrum import normalized_singular_values, spectrum_summary
from sentcl.analysis.unit_sphere import l2_normalize
from sentcl.atomic_write import atomic_file
from sentcl.embedder import CachedEmbedder, Embedder
from sentcl.errors import MissingDataError
from sentcl.evaluation.sts import correlate, cosine_scores
from sentcl.evaluation.sts_data import load_task


@dataclass
class ModelAnalysis:
    label: str
    spearman: float
    align: float
    uniform: float
    spectrum: dict[str, float]
    singular_values: np.ndarray
    cosines: np.ndarray
    gold: np.ndarray
    trajectory: list[tuple[int, float, float]] = field(default_factory=list)


def analyze(label: str, embedder: Embedder, data_dir: str | Path, split: str = "dev") -> ModelAnalysis:
    cached = CachedEmbedder(embedder)
    task = load_task(Path(data_dir), "STSBenchmark", (split,))
    if task.missing:
        raise MissingDataError(f"STS-B {split}: {task.missing}")
    pairs = task.datasets[split]
    cosines = cosine_scores(cached.encode(pairs.sentences1), cached.encode(pairs.sentences2))
    probe = stsb_probe(data_dir, split)
    geometry = align_uniform(cached, probe)
    vectors = cached.encode(probe.sentences)
    return ModelAnalysis(
        label=label,
        spearman=correlate(cosines, pairs.scores).spearman,
        align=geometry["align"],
        uniform=geometry["uniform"],
        spectrum=spectrum_summary(vectors),
        singular_values=normalized_singular_values(l2_normalize(vectors)),
        cosines=cosines,
        gold=pairs.scores,
    )


def read_trajectory(run_dir: str | Path) -> list[tuple[int, float, float]]:
    """(step, align, uniform) from a run's metrics.jsonl (the ``geometry`` of each evaluation)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    points = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "geometry" in record:
            points.append((record["step"], record["geometry"]["align"], record["geometry"]["uniform"]))
    return points


COLUMNS = [
    ("STS-B ρ", lambda a: a.spearman, "{:.2f}"),
    ("ℓ_align", lambda a: a.align, "{:.3f}"),
    ("ℓ_uniform", lambda a: a.uniform, "{:.3f}"),
    ("avg cos", lambda a: a.spectrum["avg_cos_random"], "{:.3f}"),
    ("sv10", lambda a: a.spectrum.get("sv10", float("nan")), "{:.3f}"),
    ("sv50", lambda a: a.spectrum.get("sv50", float("nan")), "{:.3f}"),
    ("eff. rank", lambda a: a.spectrum["effective_rank"], "{:.1f}"),
    ("λmax(WWᵀ)", lambda a: a.spectrum["gram_top_eigenvalue"], "{:.1f}"),
    ("Sum(WWᵀ)", lambda a: a.spectrum["gram_sum"], "{:.1f}"),
    ("WWᵀ>0", lambda a: a.spectrum["gram_positive_share"], "{:.3f}"),
]


def markdown_table(analyses: list[ModelAnalysis]) -> str:
    header = "| model | " + " | ".join(name for name, _, _ in COLUMNS) + " |"
    rule = "|---|" + "---|" * len(COLUMNS)
    rows = [
        f"| {a.label} | " + " | ".join(fmt.format(get(a)) for _, get, fmt in COLUMNS) + " |" for a in analyses
    ]
    return "\n".join([header, rule, *rows])


def write_report(
    analyses: list[ModelAnalysis], out_dir: str | Path, split: str = "dev", notes: str = ""
) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = [PlanePoint(a.label, a.align, a.uniform, a.trajectory) for a in analyses]
    plot_alignment_uniformity(points, out / "alignment_uniformity.png")
    plot_singular_values({a.label: a.singular_values for a in analyses}, out / "singular_values.png")
    plot_cosine_density({a.label: (a.cosines, a.gold) for a in analyses}, out / "cosine_density.png")
    bound = [
        f"- {a.label}: {a.spectrum['gram_positive_share']:.1%} of the off-diagonal entries of WWᵀ are "
        "positive, so "
        + (
            "the bound λmax ≤ Sum(WWᵀ) applies"
            if a.spectrum["bound_condition_holds"]
            else "the condition of the bound λmax ≤ Sum(WWᵀ) does not hold"
        )
        + f" (λmax {a.spectrum['gram_top_eigenvalue']:.1f}, Sum {a.spectrum['gram_sum']:.1f})."
        for a in analyses
    ]
    text = f"""# Embedding geometry report

Probe: STS-B {split} — Spearman of cosine vs gold ×100; ℓ_align (α = 2) over pairs with gold > 4 and
ℓ_uniform (t = 2) over all the split's sentences, on L2-normalised embeddings (Wang & Isola; SimCSE §5);
spectrum of the matrix W of normalised sentence embeddings (sv10/sv50: 10th/50th singular value over the
largest; avg cos: mean cosine of random sentence pairs; effective rank: Roy & Vetterli).

{markdown_table(analyses)}

Lower ℓ_align means positives are closer; lower ℓ_uniform means a more uniform spread; a flatter spectrum
(higher sv10/sv50, higher effective rank) and a lower average cosine mean less anisotropy.

## Sum(WWᵀ) and the top eigenvalue

{chr(10).join(bound)}

## Figures

![alignment and uniformity](alignment_uniformity.png)

![singular values](singular_values.png)

![cosine density per gold bucket](cosine_density.png)
{notes}"""
    with atomic_file(out / "report.md") as handle:
        handle.write(text)
    results = {
        a.label: {"stsb_spearman": a.spearman, "align": a.align, "uniform": a.uniform, **a.spectrum}
        for a in analyses
    }
    with atomic_file(out / "results.json") as handle:
        finite_json.dump(results, handle, indent=2)
    return out / "report.md"
