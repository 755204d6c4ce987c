"""SentEval's three classifier procedures, each under two protocols, reproduced step for step.

The procedures (``senteval/tools/validation.py``):

* **inner k-fold** (MR, CR, SUBJ, MPQA): outer StratifiedKFold(k, shuffle, seed 1111); in each training
  fold every regularisation value is scored by an inner StratifiedKFold(k, shuffle, seed 1111) — the mean
  accuracy ×100 rounded to 2 decimals, the first best value kept — then refitted on the training fold and
  scored on the test fold (rounded); the result is the mean over the outer folds, rounded;
* **k-fold** (TREC, MRPC): the value is chosen by StratifiedKFold(k, shuffle, seed) over the training set,
  refitted on all of it, scored on the test set (and MRPC's F1 from its predictions);
* **split** (SST-2): the value is chosen on dev, the model scored on test.

The protocols:

* ``senteval-sklearn`` (``usepytorch: False``): scikit-learn's ``LogisticRegression(C, random_state=seed)``
  with its defaults; C ∈ {2⁻², …, 2³} for inner k-fold and split, {2⁻¹, …, 2⁵} for k-fold;
* ``simcse`` (``usepytorch: True``, SimCSE's ``evaluation.py``, mode ``test``): SentEval's PyTorch
  logistic regression — one ``nn.Linear``, Adam (lr 10⁻³) with weight decay l2 ∈ {10⁻⁵, …, 10⁻²}, batch
  64, epochs of ``epoch_size`` = 4 passes, early stopping after ``tenacity`` = 5 non-improving epochs
  (the counter is never reset, as in SentEval), the best epoch's model kept; the validation data is the
  held-out fold where the procedure has one, else a random 5 % of the training set. NumPy's and torch's
  seeds are set to ``seed`` when each classifier is built, as SentEval does, so every fit is
  reproducible on its own.

Speed without changing a number: every fit depends only on its inputs and its own seed, so the folds run
in parallel processes (joblib), each with one torch thread.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from torch import nn

Protocol = Literal["senteval-sklearn", "simcse"]
PROTOCOLS: tuple[str, ...] = ("simcse", "senteval-sklearn")
SEED = 1111


@dataclass(frozen=True)
class ProbeConfig:
    protocol: Protocol = "simcse"
    kfold: int = 10
    seed: int = SEED
    # SentEval's PyTorch classifier, as SimCSE's evaluation.py sets it (mode "test")
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200

    def grid(self, procedure: str) -> list[float]:
        if self.protocol == "simcse":
            return [10.0**t for t in range(-5, -1)]
        if procedure == "kfold":
            return [2.0**t for t in range(-1, 6)]
        return [2.0**t for t in range(-2, 4)]


class TorchLogisticRegression:
    """SentEval's ``MLP`` with ``nhid: 0`` (``senteval/tools/classifier.py``), on the CPU or a GPU."""

    def __init__(self, config: ProbeConfig, inputdim: int, nclasses: int, l2reg: float):
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.config = config
        self.model = nn.Sequential(nn.Linear(inputdim, nclasses))
        self.loss = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.Adam(self.model.parameters(), weight_decay=l2reg)
        self.epoch = 0

    def fit(self, x: np.ndarray, y: np.ndarray, validation: tuple[np.ndarray, np.ndarray] | None = None):
        if validation is None:  # a random 5 % of the training set, from the classifier's own seed
            permutation = np.random.permutation(len(x))
            cut = int(0.05 * len(x))
            validation = x[permutation[:cut]], y[permutation[:cut]]
            x, y = x[permutation[cut:]], y[permutation[cut:]]
        train_x, train_y = torch.from_numpy(x).float(), torch.from_numpy(y).long()
        dev_x, dev_y = torch.from_numpy(validation[0]).float(), torch.from_numpy(validation[1]).long()
        best, best_model, stale, stop = -1.0, None, 0, False
        c = self.config
        while not stop and self.epoch <= c.max_epoch:
            self.model.train()
            for _ in range(c.epoch_size):
                permutation = np.random.permutation(len(train_x))
                for start in range(0, len(train_x), c.batch_size):
                    index = torch.from_numpy(permutation[start : start + c.batch_size]).long()
                    loss = self.loss(self.model(train_x[index]), train_y[index])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            self.epoch += c.epoch_size
            accuracy = self._accuracy(dev_x, dev_y)
            if accuracy > best:
                best, best_model = accuracy, copy.deepcopy(self.model)
            else:
                if stale >= c.tenacity:
                    stop = True
                stale += 1
        self.model = best_model
        return self

    @torch.no_grad()
    def predict(self, x) -> np.ndarray:
        self.model.eval()
        x = torch.as_tensor(x).float()
        return self.model(x).argmax(1).numpy()

    def _accuracy(self, x: torch.Tensor, y: torch.Tensor) -> float:
        return float((torch.from_numpy(self.predict(x)) == y).float().mean())

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(x) == y))


def _classifier(config: ProbeConfig, x, y, reg: float, nclasses: int, validation=None):
    """A fitted classifier of the protocol; ``validation`` is the held-out data the PyTorch one stops
    on (None: 5 % of the training data)."""
    if config.protocol == "simcse":
        return TorchLogisticRegression(config, x.shape[1], nclasses, reg).fit(x, y, validation)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # SentEval keeps scikit-learn's max_iter
        return LogisticRegression(C=reg, random_state=config.seed).fit(x, y)


def _percent(value: float) -> float:
    return round(100 * value, 2)


def _choose(grid: list[float], scores: list[float]) -> tuple[float, float]:
    """SentEval's choice: the first value with the best (rounded) score."""
    best = int(np.argmax(scores))
    return grid[best], scores[best]


@contextlib.contextmanager
def _one_thread():
    """Each fit on one torch thread, in a worker process or in this one (jobs=1) alike, so the numbers do
    not depend on the parallelism; the caller's thread count is restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _outer_fold(config: ProbeConfig, x, y, train, test, nclasses: int) -> tuple[float, float]:
    with _one_thread():
        return _outer_fold_fits(config, x, y, train, test, nclasses)


def _outer_fold_fits(config: ProbeConfig, x, y, train, test, nclasses: int) -> tuple[float, float]:
    grid = config.grid("inner")
    x_train, y_train = x[train], y[train]
    inner = StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=SEED)
    scores = []
    for reg in grid:
        fold_scores = []
        for inner_train, inner_test in inner.split(x_train, y_train):
            held_out = (x_train[inner_test], y_train[inner_test])
            model = _classifier(config, x_train[inner_train], y_train[inner_train], reg, nclasses, held_out)
            fold_scores.append(model.score(*held_out))
        scores.append(round(100 * float(np.mean(fold_scores)), 2))
    reg, dev = _choose(grid, scores)
    model = _classifier(config, x_train, y_train, reg, nclasses)
    return dev, _percent(model.score(x[test], y[test]))


def inner_kfold(config: ProbeConfig, x: np.ndarray, y: np.ndarray, jobs: int = -1) -> dict[str, float]:
    """SentEval's InnerKFoldClassifier: {"devacc", "acc"}."""
    nclasses = int(y.max()) + 1
    outer = StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=SEED)
    results = Parallel(n_jobs=jobs)(
        delayed(_outer_fold)(config, x, y, train, test, nclasses) for train, test in outer.split(x, y)
    )
    return {
        "devacc": round(float(np.mean([r[0] for r in results])), 2),
        "acc": round(float(np.mean([r[1] for r in results])), 2),
    }


def _scan(config: ProbeConfig, x, y, reg: float, nclasses: int) -> float:
    folds = StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=config.seed)
    scores = []
    with _one_thread():
        for train, test in folds.split(x, y):
            held_out = (x[test], y[test])
            scores.append(_classifier(config, x[train], y[train], reg, nclasses, held_out).score(*held_out))
    return round(100 * float(np.mean(scores)), 2)


def kfold(
    config: ProbeConfig, train: tuple, test: tuple, jobs: int = -1, f1: bool = False
) -> dict[str, float]:
    """SentEval's KFoldClassifier: the value by k-fold on train, then test: {"devacc", "acc"[, "f1"]}."""
    (x, y), (x_test, y_test) = train, test
    nclasses = int(y.max()) + 1
    grid = config.grid("kfold")
    scores = Parallel(n_jobs=jobs)(delayed(_scan)(config, x, y, reg, nclasses) for reg in grid)
    reg, dev = _choose(grid, scores)
    with _one_thread():
        model = _classifier(config, x, y, reg, nclasses)
    result = {"devacc": dev, "acc": _percent(model.score(x_test, y_test))}
    if f1:
        result["f1"] = _percent(f1_score(y_test, model.predict(x_test)))
    return result


def _split_fit(config: ProbeConfig, train, dev, reg: float, nclasses: int):
    with _one_thread():
        model = _classifier(config, *train, reg, nclasses, dev)
        return model, _percent(model.score(*dev))


def split(config: ProbeConfig, train: tuple, dev: tuple, test: tuple, jobs: int = -1) -> dict[str, float]:
    """SentEval's SplitClassifier: the value chosen on dev, then test: {"devacc", "acc"}. (SentEval refits
    the chosen value from the same seed, which gives the very model already fitted.)"""
    nclasses = int(train[1].max()) + 1
    grid = config.grid("split")
    fitted = Parallel(n_jobs=jobs)(delayed(_split_fit)(config, train, dev, reg, nclasses) for reg in grid)
    best = int(np.argmax([score for _, score in fitted]))
    return {"devacc": fitted[best][1], "acc": _percent(fitted[best][0].score(*test))}
