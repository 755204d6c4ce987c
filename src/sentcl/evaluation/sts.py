"""STS evaluation with SimCSE's protocol.

For every pair the system score is the cosine similarity of the two sentence embeddings; per dataset we
report Pearson and Spearman against the gold scores, and per task the three aggregations of SimCSE's
SentEval copy (``senteval/sts.py``):

* ``all``   — one correlation over the concatenation of all datasets of the task (SimCSE's reported
  numbers for STS12–16);
* ``mean``  — the plain average of the per-dataset correlations;
* ``wmean`` — the average weighted by the number of scored pairs.

STS-B and SICK-R enter the 7-task table through their ``test`` split (SimCSE's evaluation.py).
Scores are ×100. Every sentence is encoded once, even when it occurs in several tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr, spearmanr

from sentcl.embedder import Embedder
from sentcl.evaluation.registry import TaskSpecError, parse_family
from sentcl.evaluation.sts_data import DISPLAY_NAMES, STS_TASKS, STSTask, load_task

AGGREGATIONS = ("all", "mean", "wmean")
_TABLE_SPLIT = {"STSBenchmark": "test", "SICKRelatedness": "test"}
#: the STS family's own names (the registry, evaluation/tasks.py, maps what users write onto them) → the
#: task and the splits to read (None: the task's every split)
STS_MEMBERS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    f"stsb-{split}": ("STSBenchmark", (split,)) for split in ("dev", "train", "test")
} | {task: (task, None) for task in STS_TASKS}


@dataclass
class Correlation:
    pearson: float
    spearman: float
    n: int


@dataclass
class TaskScores:
    name: str
    datasets: dict[str, Correlation]
    aggregated: dict[str, Correlation]  # "all" / "mean" / "wmean"

    def headline(self, aggregation: str = "all") -> float:
        """The task's number in SimCSE's table: Spearman ×100 (the test split for STS-B / SICK-R)."""
        split = _TABLE_SPLIT.get(self.name)
        if split is not None and split in self.datasets:
            return self.datasets[split].spearman
        return self.aggregated[aggregation].spearman


@dataclass
class STSReport:
    scores: dict[str, TaskScores] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # task → why
    #: task → dataset → (system scores, gold scores), pair by pair (what a paired bootstrap resamples)
    pairs: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)


def correlate(system: np.ndarray, gold: np.ndarray) -> Correlation:
    if len(system) < 2:
        raise ValueError("a correlation needs at least two scored pairs")
    return Correlation(
        pearson=float(pearsonr(system, gold)[0]) * 100,
        spearman=float(spearmanr(system, gold)[0]) * 100,
        n=len(system),
    )


def aggregate(name: str, per_dataset: dict[str, tuple[np.ndarray, np.ndarray]]) -> TaskScores:
    """SimCSE's per-task aggregation of (system, gold) score arrays keyed by dataset."""
    datasets = {key: correlate(sys, gold) for key, (sys, gold) in per_dataset.items()}
    weights = np.array([c.n for c in datasets.values()], dtype=np.float64)
    pearsons = np.array([c.pearson for c in datasets.values()])
    spearmans = np.array([c.spearman for c in datasets.values()])
    total = int(weights.sum())
    every_sys = np.concatenate([sys for sys, _ in per_dataset.values()])
    every_gold = np.concatenate([gold for _, gold in per_dataset.values()])
    aggregated = {
        "all": correlate(every_sys, every_gold),
        "mean": Correlation(float(np.mean(pearsons)), float(np.mean(spearmans)), total),
        "wmean": Correlation(
            float(np.average(pearsons, weights=weights)), float(np.average(spearmans, weights=weights)), total
        ),
    }
    return TaskScores(name, datasets, aggregated)


def cosine_scores(embeddings1: np.ndarray, embeddings2: np.ndarray) -> np.ndarray:
    a = embeddings1.astype(np.float64)
    b = embeddings2.astype(np.float64)
    denominator = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(denominator, 1e-12)


def score_tasks(embedder: Embedder, tasks: Sequence[STSTask]) -> STSReport:
    """Encode every distinct sentence once, then score every loaded task."""
    report = STSReport()
    loaded = []
    for task in tasks:
        if task.missing:
            report.missing[task.name] = task.missing
        else:
            loaded.append(task)
    sentences = sorted(
        {s for task in loaded for ps in task.datasets.values() for s in ps.sentences1 + ps.sentences2}
    )
    if not sentences:
        return report
    vectors = embedder.encode(sentences)
    row = {sentence: i for i, sentence in enumerate(sentences)}

    def embed(texts: list[str]) -> np.ndarray:
        return vectors[[row[t] for t in texts]]

    for task in loaded:
        per_dataset = {
            key: (cosine_scores(embed(ps.sentences1), embed(ps.sentences2)), ps.scores)
            for key, ps in task.datasets.items()
        }
        report.scores[task.name] = aggregate(task.name, per_dataset)
        report.pairs[task.name] = per_dataset
    return report


class STSEvaluator:
    """Callable evaluator: ``evaluator(embedder) → dict[str, float]`` with one primary metric.

    ``tasks`` is read by the registry's grammar (evaluation/registry.py): ``sts`` (the 7-task table),
    ``stsb-dev`` (or ``-train``/``-test``: one split of STS-B), or a comma-separated list of STS task names.

    Data files are read once, at construction, so repeated evaluation during training costs only the
    encoding.
    """

    def __init__(self, data_dir: str | Path, tasks: str | Sequence[str] = "sts", aggregation: str = "all"):
        if aggregation not in AGGREGATIONS:
            raise TaskSpecError(f"aggregation {aggregation!r} is not one of {', '.join(AGGREGATIONS)}")
        self.aggregation = aggregation
        self.requests = [STS_MEMBERS[name] for name in parse_family(tasks, "sts")]
        root = Path(data_dir)
        self.tasks = [load_task(root, name, splits) for name, splits in self.requests]
        self.missing = {task.name: task.missing for task in self.tasks if task.missing}
        self.dev_only = self.requests == [("STSBenchmark", ("dev",))]
        self.primary = "stsb_dev_spearman" if self.dev_only else "avg"
        self.last_report: STSReport | None = None

    def report(self, embedder: Embedder) -> STSReport:
        self.last_report = score_tasks(embedder, self.tasks)
        return self.last_report

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        return self.metrics(self.report(embedder))

    def metrics(self, report: STSReport) -> dict[str, float]:
        if self.dev_only:
            if "STSBenchmark" not in report.scores:
                raise FileNotFoundError(f"STS-B dev split missing: {report.missing.get('STSBenchmark')}")
            dev = report.scores["STSBenchmark"].datasets["dev"]
            return {"stsb_dev_spearman": dev.spearman, "stsb_dev_pearson": dev.pearson}
        metrics = {
            DISPLAY_NAMES.get(name, name): scores.headline(self.aggregation)
            for name, scores in report.scores.items()
        }
        requested = [name for name, _ in self.requests]
        if metrics and not report.missing:
            metrics["avg"] = float(np.mean([metrics[DISPLAY_NAMES.get(n, n)] for n in requested]))
        return metrics

    def metric_pairs(self, report: STSReport) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each metric that is one Spearman over one set of pairs → those pairs (system, gold): one split,
        or the concatenation of a task's datasets under the ``all`` aggregation. ``mean`` / ``wmean`` and
        ``avg`` average several correlations and have none."""
        if self.dev_only:
            pairs = report.pairs.get("STSBenchmark", {})
            return {"stsb_dev_spearman": pairs["dev"]} if "dev" in pairs else {}
        out = {}
        for name, per_dataset in report.pairs.items():
            split = _TABLE_SPLIT.get(name)
            if split is None and len(per_dataset) == 1:
                split = next(iter(per_dataset))
            if split is not None and split in per_dataset:
                out[DISPLAY_NAMES.get(name, name)] = per_dataset[split]
            elif self.aggregation == "all":
                out[DISPLAY_NAMES.get(name, name)] = (
                    np.concatenate([system for system, _ in per_dataset.values()]),
                    np.concatenate([gold for _, gold in per_dataset.values()]),
                )
        return out

    def format(self, metrics: dict[str, float] | None = None) -> str:
        """The last evaluation as a plain-text table (the evaluation contract, evaluation/tasks.py)."""
        if self.last_report is None:
            raise RuntimeError("nothing evaluated yet")
        return self.format_report(self.last_report)

    def results(self) -> dict:
        """The last evaluation, JSON-ready: every dataset's and aggregation's correlations."""
        report = self.last_report or STSReport()
        return {
            "metrics": self.metrics(report) if report.scores or report.missing else {},
            "missing": report.missing,
            "tasks": {
                name: {
                    "datasets": {k: asdict(v) for k, v in scores.datasets.items()},
                    "aggregated": {k: asdict(v) for k, v in scores.aggregated.items()},
                }
                for name, scores in report.scores.items()
            },
        }

    def format_report(self, report: STSReport) -> str:
        """A plain-text table: one row per requested task, missing tasks named, then the average."""
        metrics = self.metrics(report)
        if self.dev_only:
            spearman, pearson = metrics["stsb_dev_spearman"], metrics["stsb_dev_pearson"]
            return f"STS-B dev  Spearman {spearman:.2f}  Pearson {pearson:.2f}"
        lines = [f"{'task':<8} {'Spearman':>9}  {'pairs':>6}  aggregation"]
        for name, _ in self.requests:
            label = DISPLAY_NAMES.get(name, name)
            if name in report.scores:
                scores = report.scores[name]
                split = _TABLE_SPLIT.get(name)
                if split not in scores.datasets:  # e.g. stsb-train alone: its one split
                    split = next(iter(scores.datasets)) if len(scores.datasets) == 1 else None
                n = scores.datasets[split].n if split else scores.aggregated[self.aggregation].n
                how = f"{split} split" if split else self.aggregation
                lines.append(f"{label:<8} {metrics[label]:>9.2f}  {n:>6}  {how}")
            else:
                lines.append(f"{label:<8} {'missing':>9}  {'':>6}  {report.missing.get(name, '')}")
        if "avg" in metrics:
            lines.append(f"{'avg':<8} {metrics['avg']:>9.2f}")
        else:
            present = len(report.scores)
            lines.append(
                f"{'avg':<8} {'n/a':>9}  ({present}/{len(self.requests)} tasks present; no partial average)"
            )
        return "\n".join(lines)
