"""SentEval transfer tasks with a logistic-regression probe on frozen sentence embeddings.

Readers and protocol follow SentEval (``senteval/{binary,sst,trec,mrpc}.py``, scikit-learn path):

* MR, CR, SUBJ, MPQA — one sentence per line, the class is the file (files read as latin-1, empty lines
  kept as empty sentences, as SentEval does); 10-fold cross-validation (shuffled, seed 1111), and inside
  each training fold the L2 strength C ∈ {2⁻², …, 2³} is chosen by an inner k-fold;
* SST-2 — given train / dev / test: C chosen on dev, accuracy on test;
* TREC — train_5500 / TREC_10 (6 coarse classes): C chosen by k-fold on train, accuracy on test;
* MRPC — pairs; features [|u − v|, u ⊙ v]; C chosen by k-fold on train, accuracy (and F1) on test.

Accuracies are ×100. The inner selection uses ``LogisticRegressionCV`` (warm-started along the C path),
which computes the same choice as SentEval's loop over C, faster.
"""

from __future__ import annotations

import gzip
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.metrics import f1_score
from sklearn.model_selection import KFold, StratifiedKFold

from sentcl.embedder import CachedEmbedder, Embedder

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
C_GRID = [2.0**t for t in range(-2, 4)]
SEED = 1111
_BINARY_FILES = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
_TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}


class TransferDataError(ValueError):
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
    if path.is_file():
        raw = path.read_bytes()
    elif path.with_name(path.name + ".gz").is_file():
        raw = gzip.decompress(path.with_name(path.name + ".gz").read_bytes())
    else:
        raise FileNotFoundError(str(path))
    try:
        return raw.decode(encoding).splitlines()
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise TransferDataError(f"{path}:{line}: undecodable byte for {encoding}") from None


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


def _select_and_fit(x: np.ndarray, y: np.ndarray, folds: int, seed: int) -> LogisticRegressionCV:
    """C chosen by stratified k-fold over C_GRID, then refitted on all of (x, y)."""
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn's notices of its API transition
        return LogisticRegressionCV(
            Cs=C_GRID, cv=cv, scoring="accuracy", max_iter=1000, random_state=seed, n_jobs=-1
        ).fit(x, y)


def _fit(x: np.ndarray, y: np.ndarray, c: float, seed: int) -> LogisticRegression:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(C=c, max_iter=1000, random_state=seed).fit(x, y)


def cross_validated_accuracy(x: np.ndarray, y: np.ndarray, folds: int = 10, seed: int = SEED) -> float:
    """SentEval's InnerKFoldClassifier: outer k-fold, C chosen by an inner k-fold in each training fold."""
    scores = []
    for train, test in KFold(n_splits=folds, shuffle=True, random_state=seed).split(x):
        scores.append(_select_and_fit(x[train], y[train], folds, seed).score(x[test], y[test]))
    return 100 * float(np.mean(scores))


def split_accuracy(train: tuple, dev: tuple, test: tuple, seed: int = SEED) -> float:
    """SentEval's SplitClassifier: C chosen on dev, accuracy on test (the C grid fitted in parallel)."""
    models = Parallel(n_jobs=-1)(delayed(_fit)(*train, c, seed) for c in C_GRID)
    dev_scores = [model.score(*dev) for model in models]
    best = models[int(np.argmax(dev_scores))]  # first best C on ties, as max() over the grid
    return 100 * float(best.score(*test))


class TransferEvaluator:
    """``evaluator(embedder) → {task: accuracy, …, "avg"}``; missing tasks are reported, not averaged."""

    def __init__(self, data_dir: str | Path, tasks=TRANSFER_TASKS, folds: int = 10, seed: int = SEED):
        self.tasks = [load_transfer_task(Path(data_dir), name) for name in tasks]
        self.folds, self.seed = folds, seed
        self.primary = "avg"
        self.missing = {t.name: t.missing for t in self.tasks if t.missing}
        self.details: dict[str, dict[str, float]] = {}

    def _embed(self, embedder: Embedder, sentences) -> np.ndarray:
        if sentences and isinstance(sentences[0], tuple):
            u = embedder.encode([a for a, _ in sentences]).astype(np.float64)
            v = embedder.encode([b for _, b in sentences]).astype(np.float64)
            return np.c_[np.abs(u - v), u * v]
        return embedder.encode(sentences).astype(np.float64)

    def evaluate_task(self, embedder: Embedder, task: TransferTask) -> dict[str, float]:
        features = {split: (self._embed(embedder, s.sentences), s.labels) for split, s in task.splits.items()}
        if "all" in features:
            return {"acc": cross_validated_accuracy(*features["all"], self.folds, self.seed)}
        if "dev" in features:
            return {"acc": split_accuracy(features["train"], features["dev"], features["test"], self.seed)}
        model = _select_and_fit(*features["train"], self.folds, self.seed)
        x_test, y_test = features["test"]
        result = {"acc": 100 * float(model.score(x_test, y_test))}
        if task.name == "MRPC":
            result["f1"] = 100 * float(f1_score(y_test, model.predict(x_test)))
        return result

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        embedder = CachedEmbedder(embedder)  # the tasks share sentences (SST-2 and MR: the same reviews)
        self.details = {t.name: self.evaluate_task(embedder, t) for t in self.tasks if not t.missing}
        metrics = {name: result["acc"] for name, result in self.details.items()}
        if metrics and not self.missing:
            metrics["avg"] = float(np.mean(list(metrics.values())))
        return metrics

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
