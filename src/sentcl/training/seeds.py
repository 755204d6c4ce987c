"""Several seeds of one recipe, and the mean ± standard deviation of every evaluation metric.

SimCSE's issue tracker reports about two points of STS variance across seeds; comparing methods on one
seed each is comparing noise. ``train_seeds`` runs the recipe once per seed into ``output_dir/seed-N``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from sentcl import finite_json
from sentcl.atomic_write import atomic_file
from sentcl.training.contrastive import TrainResult, train
from sentcl.training.recipe import TrainConfig


def train_seeds(
    config: TrainConfig, seeds: list[int]
) -> tuple[list[TrainResult], dict[str, dict[str, float]]]:
    root = Path(config.training.output_dir)
    results = []
    for seed in seeds:
        loop = replace(config.training, seed=seed, output_dir=str(root / f"seed-{seed}"))
        results.append(train(replace(config, training=loop)))
    aggregate = aggregate_metrics([r.best_metrics for r in results if r.best_metrics is not None])
    with atomic_file(root / "seeds.json") as handle:
        finite_json.dump(
            {"seeds": seeds, "best": [r.best_metrics for r in results], "aggregate": aggregate},
            handle,
            indent=2,
        )
    return results, aggregate


def aggregate_metrics(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per metric: mean, sample standard deviation (ddof 1), min, max and n over the runs."""
    keys = sorted({k for run in runs for k in run})
    out = {}
    for key in keys:
        values = np.array([run[key] for run in runs if key in run], dtype=np.float64)
        std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        out[key] = {"mean": float(values.mean()), "std": std, "min": float(values.min()),
                    "max": float(values.max()), "n": len(values)}  # fmt: skip
    return out


def format_aggregate(aggregate: dict[str, dict[str, float]]) -> str:
    return "\n".join(f"{k}: {v['mean']:.2f} ± {v['std']:.2f} (n={v['n']})" for k, v in aggregate.items())
