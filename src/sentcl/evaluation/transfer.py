"""SentEval transfer tasks: a linear probe on frozen sentence embeddings, by SentEval's own procedure.

Readers follow SentEval (``senteval/{binary,sst,trec,mrpc}.py``): MR, CR, SUBJ, MPQA are one sentence per
line, the class is the file (latin-1, empty lines kept as empty sentences); SST-2 has train / dev / test;
TREC train_5500 / TREC_10 with the 6 coarse classes; MRPC pairs with features [|u − v|, u ⊙ v]. As in
SentEval, each set is ordered by (number of words, label) — a stable sort, which fixes which examples
the shuffled folds put together — and sentences are their words joined by single spaces.

The classifier procedures and the two protocols (``senteval-sklearn``; ``simcse``, the PyTorch logistic
regression SimCSE's paper reports with, the default) are in ``senteval_protocols.py``: inner k-fold for
MR, CR, SUBJ, MPQA; k-fold for TREC and MRPC; dev selection for SST-2. Accuracies are ×100 and rounded
to 2 decimals as SentEval rounds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentcl.embedder import CachedEmbedder, Embedder
from sentcl.errors import UserError
from sentcl.evaluation.registry import TaskSpecError
from sentcl.evaluation.senteval_protocols import PROTOCOLS, SEED, ProbeConfig, inner_kfold, kfold, split
from sentcl.text_files import read_text

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
_BINARY_FILES = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
_TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}


class TransferDataError(UserError, ValueError):
    """A malformed transfer-task file; the message names file:line."""


@dataclass
class TransferSplit:
    sentences: list[str] | list[tuple[str, str]]
    labels: np.ndarray


@dataclass
class TransferTask:
    name: str
    splits: dict[str, TransferSplit] = field(default_factory=dict)
    missing: str | None = None


def _open_text(path: Path, encoding: str) -> list[str]:
    """Lines of ``path`` or of ``path.gz`` (the shared copy gzips the two largest files)."""
    gzipped = path.with_name(path.name + ".gz")
    if not path.is_file() and not gzipped.is_file():
        raise FileNotFoundError(str(path))
    return read_text(path if path.is_file() else gzipped, TransferDataError, encoding).splitlines()


def _tokens(text: str) -> str:
    return " ".join(text.split())


def _find(root: Path, folder: str) -> Path | None:
    for prefix in ("", "transfer", "downstream", "SentEval/data/downstream"):
        candidate = root / prefix / folder
        if candidate.is_dir():
            return candidate
    return None


def load_transfer_task(root: Path, name: str) -> TransferTask:
    folder_name = {"SST2": "SST/binary"}.get(name, _BINARY_FILES.get(name, (name,))[0])
    folder = _find(root, folder_name)
    if folder is None:
        return TransferTask(name, missing=f"no {folder_name} folder under {root}")
    try:
        if name in _BINARY_FILES:
            _, positive, negative = _BINARY_FILES[name]
            pos = [_tokens(x) for x in _open_text(folder / positive, "latin-1")]
            neg = [_tokens(x) for x in _open_text(folder / negative, "latin-1")]
            labels = np.r_[np.ones(len(pos), dtype=int), np.zeros(len(neg), dtype=int)]
            return TransferTask(name, {"all": TransferSplit(pos + neg, labels)})
        if name == "SST2":
            return TransferTask(
                name, {s: _read_sst(folder / f"sentiment-{s}") for s in ("train", "dev", "test")}
            )
        if name == "TREC":
            return TransferTask(
                name,
                {
                    "train": _read_trec(folder / "train_5500.label"),
                    "test": _read_trec(folder / "TREC_10.label"),
                },
            )
        if name == "MRPC":
            return TransferTask(
                name,
                {
                    "train": _read_mrpc(folder / "msr_paraphrase_train.txt"),
                    "test": _read_mrpc(folder / "msr_paraphrase_test.txt"),
                },
            )
    except FileNotFoundError as exc:
        return TransferTask(name, missing=f"{exc} not found")
    raise ValueError(f"unknown transfer task {name!r}")


def _read_sst(path: Path) -> TransferSplit:
    sentences, labels = [], []
    for number, line in enumerate(_open_text(path, "utf-8"), start=1):
        fields = line.strip().split("\t")
        if len(fields) != 2 or fields[1] not in ("0", "1"):
            raise TransferDataError(f"{path}:{number}: expected 'sentence<TAB>0|1'")
        sentences.append(_tokens(fields[0]))
        labels.append(int(fields[1]))
    return TransferSplit(sentences, np.array(labels))


def _read_trec(path: Path) -> TransferSplit:
    sentences, labels = [], []
    for number, line in enumerate(_open_text(path, "latin-1"), start=1):
        target, _, rest = line.strip().partition(":")
        if target not in _TREC_CLASSES or " " not in rest:
            raise TransferDataError(f"{path}:{number}: expected 'COARSE:fine question'")
        sentences.append(_tokens(rest.split(" ", 1)[1]))
        labels.append(_TREC_CLASSES[target])
    return TransferSplit(sentences, np.array(labels))


def _read_mrpc(path: Path) -> TransferSplit:
    pairs, labels = [], []
    lines = _open_text(path, "utf-8-sig")
    for number, line in enumerate(lines[1:], start=2):  # header row
        fields = line.strip().split("\t")
        if len(fields) < 5 or fields[0] not in ("0", "1"):
            raise TransferDataError(f"{path}:{number}: expected 'Quality<TAB>id<TAB>id<TAB>s1<TAB>s2'")
        pairs.append((_tokens(fields[3]), _tokens(fields[4])))
        labels.append(int(fields[0]))
    return TransferSplit(pairs, np.array(labels))


def senteval_order(sentences: list, labels: np.ndarray) -> np.ndarray:
    """The order SentEval encodes and folds a set in: by (words of each sentence, label), stable; for
    pairs by (words of the first, words of the second, label)."""

    def key(i: int):
        item = sentences[i]
        lengths = tuple(len(s.split()) for s in item) if isinstance(item, tuple) else (len(item.split()),)
        return (*lengths, int(labels[i]))

    return np.array(sorted(range(len(labels)), key=key), dtype=int)


class TransferEvaluator:
    """``evaluator(embedder) → {task: accuracy, …, "avg"}``; missing tasks are reported, not averaged.
    ``details`` holds SentEval's numbers per task (devacc, acc, and MRPC's f1)."""

    def __init__(
        self,
        data_dir: str | Path,
        tasks=TRANSFER_TASKS,
        protocol: str = "simcse",
        folds: int = 10,
        seed: int = SEED,
        jobs: int = -1,
    ):
        if protocol not in PROTOCOLS:
            raise TaskSpecError(f"transfer protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        self.tasks = [load_transfer_task(Path(data_dir), name) for name in tasks]
        self.config = ProbeConfig(protocol=protocol, kfold=folds, seed=seed)  # type: ignore[arg-type]
        self.jobs = jobs
        self.primary = "avg"
        self.missing = {t.name: t.missing for t in self.tasks if t.missing}
        self.details: dict[str, dict[str, float]] = {}

    def _features(self, embedder: Embedder, split: TransferSplit) -> tuple[np.ndarray, np.ndarray]:
        order = senteval_order(split.sentences, split.labels)
        sentences = [split.sentences[i] for i in order]
        if sentences and isinstance(sentences[0], tuple):
            u = np.asarray(embedder.encode([a for a, _ in sentences]), dtype=np.float32)
            v = np.asarray(embedder.encode([b for _, b in sentences]), dtype=np.float32)
            return np.c_[np.abs(u - v), u * v], split.labels[order]
        return np.asarray(embedder.encode(sentences), dtype=np.float32), split.labels[order]

    def evaluate_task(self, embedder: Embedder, task: TransferTask) -> dict[str, float]:
        features = {name: self._features(embedder, s) for name, s in task.splits.items()}
        if "all" in features:
            return inner_kfold(self.config, *features["all"], jobs=self.jobs)
        if "dev" in features:
            return split(self.config, features["train"], features["dev"], features["test"], jobs=self.jobs)
        return kfold(self.config, features["train"], features["test"], jobs=self.jobs, f1=task.name == "MRPC")

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        embedder = CachedEmbedder(embedder)  # the tasks share sentences (SST-2 and MR: the same reviews)
        self.details = {t.name: self.evaluate_task(embedder, t) for t in self.tasks if not t.missing}
        metrics = {name: result["acc"] for name, result in self.details.items()}
        if metrics and not self.missing:
            metrics["avg"] = float(np.mean(list(metrics.values())))
        return metrics

    def results(self) -> dict:
        """The last evaluation, JSON-ready: SentEval's numbers per task (devacc, acc, MRPC's f1)."""
        metrics = {name: result["acc"] for name, result in self.details.items()}
        if metrics and not self.missing:
            metrics["avg"] = float(np.mean(list(metrics.values())))
        return {"metrics": metrics, "details": self.details, "missing": self.missing}

    def format(self, metrics: dict[str, float]) -> str:
        lines = [f"{'task':<6} {'accuracy':>9}"]
        for task in self.tasks:
            if task.missing:
                lines.append(f"{task.name:<6} {'missing':>9}  {task.missing}")
            else:
                extra = (
                    f"  F1 {self.details[task.name]['f1']:.2f}"
                    if "f1" in self.details.get(task.name, {})
                    else ""
                )
                lines.append(f"{task.name:<6} {metrics[task.name]:>9.2f}{extra}")
        if "avg" in metrics:
            lines.append(f"{'avg':<6} {metrics['avg']:>9.2f}")
        return "\n".join(lines)
