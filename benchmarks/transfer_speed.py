"""SentEval's transfer tasks: the stacked probes against SentEval's classifier run one at a time.

    python benchmarks/transfer_speed.py [--model M] [--tasks MR,CR,...] [--protocol simcse]
        [--reference TREC,MRPC] [--jobs 1] [--features runs/transfer_features.npz] [--json out.json]

The features of each task are encoded once (as ``sentcl evaluate --tasks transfer`` encodes them: SentEval's
order, MRPC's [|u - v|, u * v]) and kept in ``--features``, so a rerun times the classifiers alone. Each task
is then evaluated with the procedures as they run by default (the simcse protocol's classifiers stacked) and,
for the tasks named in ``--reference``, with ``ProbeConfig(stacked=False)``: SentEval's classifier one after
another. It prints every task's numbers and seconds and, for the reference tasks, whether every number is
equal; exit 1 where one differs by more than 0.01. ``--jobs 1`` (the default) times one process, the fairest
ratio; ``sentcl evaluate`` itself uses every core.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from sentcl.embedder import CachedEmbedder
from sentcl.evaluation import resolve_data_dir
from sentcl.evaluation.senteval_protocols import inner_kfold, kfold, split
from sentcl.evaluation.transfer import TRANSFER_TASKS, TransferEvaluator
from sentcl.hardware import describe_machine
from sentcl.model import SentenceEncoder


def features(evaluator: TransferEvaluator, model: str, path: Path) -> dict[str, np.ndarray]:
    """{task/split/x|y: array} of every present task, from ``path`` when it holds them all."""
    wanted = [f"{t.name}/{s}" for t in evaluator.tasks if not t.missing for s in t.splits]
    if path.is_file():
        stored = dict(np.load(path))
        if stored.get("model", np.array("")).item() == model and all(f"{w}/x" in stored for w in wanted):
            return stored
    embedder = CachedEmbedder(SentenceEncoder.load(model))
    arrays: dict[str, np.ndarray] = {"model": np.array(model)}
    for task in evaluator.tasks:
        for name, part in task.splits.items():
            x, y = evaluator._features(embedder, part)
            arrays[f"{task.name}/{name}/x"], arrays[f"{task.name}/{name}/y"] = x, y
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return arrays


def run(config, task, arrays: dict[str, np.ndarray], jobs: int) -> tuple[dict[str, float], float]:
    def part(name: str) -> tuple[np.ndarray, np.ndarray]:
        return arrays[f"{task.name}/{name}/x"], arrays[f"{task.name}/{name}/y"]

    started = time.perf_counter()
    if "all" in task.splits:
        result = inner_kfold(config, *part("all"), jobs=jobs)
    elif "dev" in task.splits:
        result = split(config, part("train"), part("dev"), part("test"), jobs=jobs)
    else:
        result = kfold(config, part("train"), part("test"), jobs=jobs, f1=task.name == "MRPC")
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--tasks", default=",".join(TRANSFER_TASKS))
    parser.add_argument("--protocol", default="simcse", choices=["simcse", "senteval-sklearn"])
    parser.add_argument("--reference", default="", help="tasks also run one classifier at a time")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--features", default="runs/transfer_features.npz")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    evaluator = TransferEvaluator(resolve_data_dir(args.data_dir), tasks, protocol=args.protocol)
    missing = [t.name for t in evaluator.tasks if t.missing]
    if missing:
        print(f"missing: {', '.join(missing)}", file=sys.stderr)
        return 1
    arrays = features(evaluator, args.model, Path(args.features))
    reference = set(filter(None, args.reference.split(",")))
    print(f"machine: {describe_machine()}; protocol {args.protocol}; jobs {args.jobs}")
    print("| task | devacc / acc [/ F1] | s | one at a time | s | equal |")
    print("|---|---:|---:|---:|---:|---|")
    rows, worst = [], 0.0
    for task in evaluator.tasks:
        got, seconds = run(evaluator.config, task, arrays, args.jobs)
        row = {"task": task.name, "result": got, "seconds": seconds}
        cells = [" / ".join(f"{v:.2f}" for v in got.values()), f"{seconds:.1f}", "", "", ""]
        if task.name in reference:
            single = dataclasses.replace(evaluator.config, stacked=False)
            expected, reference_seconds = run(single, task, arrays, args.jobs)
            difference = max(abs(got[k] - expected[k]) for k in expected)
            worst = max(worst, difference)
            row |= {"reference": expected, "reference_seconds": reference_seconds}
            cells[2:] = [
                " / ".join(f"{v:.2f}" for v in expected.values()),
                f"{reference_seconds:.1f}",
                "yes" if difference <= 0.01 else f"no ({difference:.2f})",
            ]
        rows.append(row)
        print(f"| {task.name} | " + " | ".join(cells) + " |", flush=True)
    total = sum(r["seconds"] for r in rows)
    print(f"all {len(rows)} tasks: {total:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": describe_machine(), "rows": rows}, indent=2))
    return 1 if worst > 0.01 else 0


if __name__ == "__main__":
    sys.exit(main())
