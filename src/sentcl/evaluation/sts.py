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
from sentcl.errors import MissingDataError
from sentcl.evaluation.registry import AGGREGATIONS, TaskSpecError, parse_family
from sentcl.evaluation.sts_data import DISPLAY_NAMES, STS_DATASETS, STS_TASKS, STSTask, load_task

#: the split of a task that enters SimCSE's 7-task table (STS12–16: every dataset, aggregated)
_TABLE_SPLIT = {"STSBenchmark": "test", "SICKRelatedness": "test"}


@dataclass(frozen=True)
class Entry:
    """One row an STS request can hold: a task, the one split it scores (None: every dataset of the task
    under the request's aggregation), the metric keys it writes and whether it is one of SimCSE's seven."""

    task: str
    split: str | None
    metric: str  # the Spearman key (the primary metric of a request for this entry alone)
    pearson: str | None = None  # a Pearson key beside it (the STS-B dev and train splits)
    in_table: bool = False

    @property
    def label(self) -> str:
        return DISPLAY_NAMES.get(self.task, self.task)


#: the STS family's own names (the registry, evaluation/tasks.py, maps what users write onto them) → the
#: entry each stands for. ``stsb-test`` is registered as a name of the table's STS-B entry, so one request
#: never scores the same split twice; the dev and train splits keep keys of their own.
STS_MEMBERS: dict[str, Entry] = {
    f"stsb-{split}": Entry("STSBenchmark", split, f"stsb_{split}_spearman", f"stsb_{split}_pearson")
    for split in ("dev", "train")
} | {  # every dataset of the table in sts_data.py, by its name: in SimCSE's table or not
    task: Entry(
        task, spec.default_splits[0] if spec.files else None, DISPLAY_NAMES.get(task, task),
        in_table=task in STS_TASKS,
    )
    for task, spec in STS_DATASETS.items()
}  # fmt: skip


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


def score_tasks(embedder: Embedder, tasks: dict[str, STSTask]) -> STSReport:
    """Encode every distinct sentence once, then score every loaded task; the report is keyed as ``tasks``
    (an STS request's entry names, so two splits of one task never share a key)."""
    report = STSReport()
    loaded = {}
    for key, task in tasks.items():
        if task.missing:
            report.missing[key] = task.missing
        else:
            loaded[key] = task
    sentences = sorted(
        {
            s
            for task in loaded.values()
            for ps in task.datasets.values()
            for s in ps.sentences1 + ps.sentences2
        }
    )
    if not sentences:
        return report
    vectors = embedder.encode(sentences)
    row = {sentence: i for i, sentence in enumerate(sentences)}

    def embed(texts: list[str]) -> np.ndarray:
        return vectors[[row[t] for t in texts]]

    for key, task in loaded.items():
        per_dataset = {
            name: (cosine_scores(embed(ps.sentences1), embed(ps.sentences2)), ps.scores)
            for name, ps in task.datasets.items()
        }
        report.scores[key] = aggregate(task.name, per_dataset)
        report.pairs[key] = per_dataset
    return report


class STSEvaluator:
    """Callable evaluator: ``evaluator(embedder) → dict[str, float]`` with one primary metric.

    ``tasks`` is read by the registry's grammar (evaluation/registry.py): ``sts`` (the 7-task table),
    ``stsb-dev`` / ``stsb-train`` / ``stsb-test`` (one split of STS-B), any STS task's name, or a list of
    them. Each name is its own entry (``STS_MEMBERS``), scored on its own split with its own metric keys
    (``stsb_dev_spearman``, ``stsb_train_spearman``, ``STS-B`` for the table's test split), however many
    the list holds; ``avg`` is the mean of the table's entries the request names (all seven for ``sts``),
    never of another split. A request with no table entry has no ``avg``: its primary metric is its first
    entry's Spearman.

    Data files are read once, at construction, so repeated evaluation during training costs only the
    encoding.
    """

    def __init__(self, data_dir: str | Path, tasks: str | Sequence[str] = "sts", aggregation: str = "all"):
        if aggregation not in AGGREGATIONS:
            raise TaskSpecError(f"aggregation {aggregation!r} is not one of {', '.join(AGGREGATIONS)}")
        self.aggregation = aggregation
        self.requests = {name: STS_MEMBERS[name] for name in parse_family(tasks, "sts")}
        root = Path(data_dir)
        self.tasks = {
            name: load_task(root, entry.task, (entry.split,) if entry.split else None)
            for name, entry in self.requests.items()
        }
        self.missing = {name: task.missing for name, task in self.tasks.items() if task.missing}
        self.table = [name for name, entry in self.requests.items() if entry.in_table]
        first = next(iter(self.requests.values()))
        self.primary = "avg" if self.table else first.metric

        self.dev_only = list(self.requests) == ["stsb-dev"]
        self.last_report: STSReport | None = None

    def report(self, embedder: Embedder) -> STSReport:
        self.last_report = score_tasks(embedder, self.tasks)
        return self.last_report

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        return self.metrics(self.report(embedder))

    def _spearman(self, entry: Entry, scores: TaskScores) -> Correlation:
        if entry.split is not None:
            return scores.datasets[entry.split]
        return scores.aggregated[self.aggregation]

    def require_primary(self) -> None:
        """A MissingDataError when the primary metric's entry (a request without the table: its first) has
        no data: what a command checks before it loads a model."""
        name = next(iter(self.requests))
        if self.primary != "avg" and name in self.missing:
            raise MissingDataError(f"{name}: {self.missing[name]}")

    def metrics(self, report: STSReport) -> dict[str, float]:
        if self.primary != "avg":
            name = next(iter(self.requests))
            if name not in report.scores:
                raise MissingDataError(f"{name}: {report.missing.get(name, 'not evaluated')}")
        metrics: dict[str, float] = {}
        for name, entry in self.requests.items():
            if name not in report.scores:
                continue
            correlation = self._spearman(entry, report.scores[name])
            metrics[entry.metric] = correlation.spearman
            if entry.pearson is not None:
                metrics[entry.pearson] = correlation.pearson
        if self.table and all(name in report.scores for name in self.table):
            metrics["avg"] = float(np.mean([metrics[self.requests[name].metric] for name in self.table]))
        return metrics

    def metric_pairs(self, report: STSReport) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each metric that is one Spearman over one set of pairs → those pairs (system, gold): one split,
        or the concatenation of a task's datasets under the ``all`` aggregation. ``mean`` / ``wmean`` and
        ``avg`` average several correlations and have none."""
        out = {}
        for name, entry in self.requests.items():
            per_dataset = report.pairs.get(name)
            if not per_dataset:
                continue
            split = entry.split
            if split is None and len(per_dataset) == 1:
                split = next(iter(per_dataset))
            if split is not None:
                out[entry.metric] = per_dataset[split]
            elif self.aggregation == "all":
                out[entry.metric] = (
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
        """The last evaluation, JSON-ready: every entry's datasets' and aggregations' correlations."""
        report = self.last_report or STSReport()
        return {
            "metrics": self.metrics(report) if report.scores or report.missing else {},
            "missing": report.missing,
            "tasks": {
                name: {
                    "task": self.requests[name].task,
                    "datasets": {k: asdict(v) for k, v in scores.datasets.items()},
                    "aggregated": {k: asdict(v) for k, v in scores.aggregated.items()},
                }
                for name, scores in report.scores.items()
            },
        }

    def format_report(self, report: STSReport) -> str:
        """A plain-text table: one row per requested entry with its split, missing ones named, then the
        average of the table's entries."""
        metrics = self.metrics(report)
        if self.dev_only:
            spearman, pearson = metrics["stsb_dev_spearman"], metrics["stsb_dev_pearson"]
            return f"STS-B dev  Spearman {spearman:.2f}  Pearson {pearson:.2f}"
        lines = [f"{'task':<8} {'Spearman':>9}  {'pairs':>6}  aggregation"]
        for name, entry in self.requests.items():
            if name in report.scores:
                scores = report.scores[name]
                n = self._spearman(entry, scores).n
                how = f"{entry.split} split" if entry.split else self.aggregation
                lines.append(f"{entry.label:<8} {metrics[entry.metric]:>9.2f}  {n:>6}  {how}")
            else:
                lines.append(f"{entry.label:<8} {'missing':>9}  {'':>6}  {report.missing.get(name, '')}")
        if "avg" in metrics:
            lines.append(
                f"{'avg':<8} {metrics['avg']:>9.2f}  {'':>6}  mean of the {len(self.table)} table rows"
            )
        elif self.table:
            present = sum(name in report.scores for name in self.table)
            lines.append(
                f"{'avg':<8} {'n/a':>9}  ({present}/{len(self.table)} tasks present; no partial average)"
            )
        return "\n".join(lines)
