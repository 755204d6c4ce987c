"""Several seeds of one recipe, and the mean ± standard deviation of every evaluation metric.

SimCSE's issue tracker reports about two points of STS variance across seeds; comparing methods on one
seed each is comparing noise. ``train_seeds`` runs the recipe once per seed into ``output_dir/seed-N``;
the summary gives each metric's 95 % interval over the seeds from 3 on (``sentcl evaluate OUTPUT --seeds``
evaluates the same folders on any task, and ``--against`` compares two of them).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from sentcl import finite_json
from sentcl.atomic_write import atomic_file
from sentcl.evaluation.significance import summarize
from sentcl.hardware import map_large_allocations
from sentcl.training.contrastive import TrainResult, train
from sentcl.training.recipe import TrainConfig

#: the run folder of one seed inside the folder ``sentcl train --seeds`` writes
SEED_FOLDER = "seed-{seed}"
_SEED = re.compile(r"seed-(\d+)")


def seed_folder(root: str | Path, seed: int) -> Path:
    return Path(root) / SEED_FOLDER.format(seed=seed)


def seed_folders(root: str | Path) -> list[Path]:
    """The seed run folders ``train_seeds`` wrote in ``root``, in the order of their seeds (2 before 10)."""
    found = [
        (int(m.group(1)), p)
        for p in Path(root).glob("seed-*")
        if p.is_dir() and (m := _SEED.fullmatch(p.name))
    ]
    return [path for _, path in sorted(found)]


def train_seeds(
    config: TrainConfig, seeds: list[int]
) -> tuple[list[TrainResult], dict[str, dict[str, float]]]:
    root = Path(config.training.output_dir)
    results = []
    if len(seeds) > 1:
        map_large_allocations()  # one run after another: each one's large tensors go back when freed
    for seed in seeds:
        loop = replace(config.training, seed=seed, output_dir=str(seed_folder(root, seed)))
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
    """Per metric: mean, sample standard deviation (ddof 1), min, max and n over the runs, and from 3 runs on
    the 95 % interval of the mean (Student's t: ``low``, ``high``; evaluation/significance.py)."""
    out = {}
    for key, interval in summarize(runs).items():
        values = [run[key] for run in runs if key in run]
        out[key] = {"mean": interval.mean, "std": interval.std or 0.0, "min": float(min(values)),
                    "max": float(max(values)), "n": interval.n}  # fmt: skip
        if interval.low is not None and interval.high is not None:
            out[key] |= {"low": interval.low, "high": interval.high}
    return dict(sorted(out.items()))


def format_aggregate(aggregate: dict[str, dict[str, float]]) -> str:
    """One line per metric: mean ± std, the 95 % interval where there is one, and n."""
    lines = []
    for key, v in aggregate.items():
        interval = f" [{v['low']:.2f}, {v['high']:.2f}]" if "low" in v else ""
        lines.append(f"{key}: {v['mean']:.2f} ± {v['std']:.2f}{interval} (n={v['n']})")
    return "\n".join(lines)
