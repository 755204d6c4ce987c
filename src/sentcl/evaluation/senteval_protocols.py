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

Speed without changing a number: every fit depends only on its inputs and its own seed. A procedure first
lists all its fits (:class:`Fit`: training rows, validation rows, value), then fits them together. Under
``simcse`` the fits whose training sets have the same size draw the very same batches (each classifier
reseeds NumPy with ``seed``, so equal sizes give equal permutations) and start from the very same weights
(torch reseeded, one ``nn.Linear`` of the same shape): they are trained as one stacked model (one batched
matrix product and one Adam update per step for all of them, each with its own weight decay, its own
validation rows, its own early stop), which is SentEval's arithmetic for each, done once per step instead
of once per classifier per step. :class:`TorchLogisticRegression` is SentEval's classifier one at a time,
kept as the reference the stacked one is tested against (``ProbeConfig(stacked=False)`` runs the procedures
with it). Groups, and scikit-learn's fits, run in parallel processes (joblib), each with one torch thread.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections import defaultdict
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
    # the simcse protocol's classifiers trained together (same numbers; False: one after another, SentEval's
    # own loop, the reference the stacked one is tested against)
    stacked: bool = True

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
        if best_model is not None:  # (one epoch at least ran)
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


@dataclass(frozen=True)
class Fit:
    """One classifier a procedure needs: its training rows and, for the PyTorch probe, its validation rows
    (None: SentEval's seeded 5 % of the training rows), both indices into the procedure's features."""

    train: np.ndarray
    reg: float
    validation: np.ndarray | None = None


class StackedLinear:
    """The kept (best-epoch) weights of one classifier of a stacked group: predicts as ``nn.Linear`` does."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray):
        self.weight, self.bias = torch.from_numpy(weight), torch.from_numpy(bias)

    @torch.no_grad()
    def predict(self, x) -> np.ndarray:
        with _one_thread():  # small products: threads only wait on each other
            return nn.functional.linear(torch.as_tensor(x).float(), self.weight, self.bias).argmax(1).numpy()

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(x) == y))


def _padded(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ragged index lists as one [G, longest] index tensor (padding: row 0), its mask and the lengths."""
    longest = max(len(r) for r in rows)
    index = np.zeros((len(rows), longest), dtype=np.int64)
    mask = np.zeros((len(rows), longest), dtype=bool)
    for i, r in enumerate(rows):
        index[i, : len(r)] = r
        mask[i, : len(r)] = True
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.float32)
    return torch.from_numpy(index), torch.from_numpy(mask), lengths


class _Adam:
    """``torch.optim.Adam`` (its single-tensor path, lr 10⁻³) on stacked parameters, one decay per member."""

    def __init__(self, params: list[torch.Tensor], decay: torch.Tensor):
        self.params, self.decay, self.step_count = params, decay, 0
        self.first = [torch.zeros_like(p) for p in params]
        self.second = [torch.zeros_like(p) for p in params]

    def step(self, grads: list[torch.Tensor]) -> None:
        lr, beta1, beta2, eps = 1e-3, 0.9, 0.999, 1e-8
        self.step_count += 1
        correction1 = 1 - beta1**self.step_count
        correction2 = math.sqrt(1 - beta2**self.step_count)
        for param, grad, first, second in zip(self.params, grads, self.first, self.second, strict=True):
            decay = self.decay.view(-1, *([1] * (param.dim() - 1)))
            grad = grad + decay * param
            first.lerp_(grad, 1 - beta1)
            second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            param.addcdiv_(first, (second.sqrt() / correction2).add_(eps), value=-lr / correction1)

    def keep(self, alive: torch.Tensor) -> None:
        """Drop the members that stopped."""
        self.params = [p[alive] for p in self.params]
        self.first = [m[alive] for m in self.first]
        self.second = [v[alive] for v in self.second]
        self.decay = self.decay[alive]


def _stacked_group(config: ProbeConfig, x: np.ndarray, y: np.ndarray, fits: list[Fit], nclasses: int):
    """SentEval's PyTorch logistic regression for every fit of ``fits`` (equal training sizes, all with or
    all without validation rows), trained together: [(weight, bias)] of each one's best epoch. The bias is
    the last column of one [G, C, D + 1] parameter, the features carry a constant 1 there."""
    with _one_thread():
        c = config
        rng = np.random.RandomState(c.seed)  # what np.random.seed(seed) makes of the global generator
        torch.manual_seed(c.seed)
        init = nn.Linear(x.shape[1], nclasses)  # the same first weights for every member
        members = len(fits)
        first = torch.cat([init.weight.detach(), init.bias.detach().unsqueeze(1)], dim=1)  # [C, D + 1]
        weight = first.unsqueeze(0).repeat(members, 1, 1).contiguous()  # [G, C, D + 1]
        train = np.stack([f.train for f in fits])
        if fits[0].validation is None:  # a random 5 % of each training set: the same positions for all
            permutation = rng.permutation(train.shape[1])
            cut = int(0.05 * train.shape[1])
            validation = list(train[:, permutation[:cut]])
            train = train[:, permutation[cut:]]
        else:
            validation = [f.validation for f in fits]
        features = torch.ones(len(x), x.shape[1] + 1)  # a copy: joblib hands workers read-only memory maps
        features[:, :-1] = torch.as_tensor(np.asarray(x, dtype=np.float32))
        labels = torch.tensor(y, dtype=torch.long)
        train_index = torch.from_numpy(train)
        dev_index, dev_mask, dev_size = _padded(validation)
        optimizer = _Adam([weight], torch.tensor([f.reg for f in fits], dtype=torch.float32))
        best = torch.full((members,), -1.0)
        best_weight = weight.clone()
        stale = torch.zeros(members, dtype=torch.long)
        alive = torch.arange(members)  # the members still training
        epoch = 0
        while len(alive) and epoch <= c.max_epoch:
            (weight,) = optimizer.params
            minus_one = torch.full((len(alive), 1, c.batch_size), -1.0)
            for _ in range(c.epoch_size):
                order = train_index[:, torch.from_numpy(rng.permutation(train_index.shape[1]))]
                for start in range(0, order.shape[1], c.batch_size):
                    rows = order[:, start : start + c.batch_size].reshape(-1)
                    size = len(rows) // len(alive)
                    batch = features.index_select(0, rows).view(len(alive), size, -1)  # [G, b, D + 1]
                    target = labels.index_select(0, rows).view(len(alive), 1, size)
                    # logits as [G, C, b]: the layout in which both products and the softmax run fastest
                    delta = torch.softmax(torch.bmm(weight, batch.transpose(1, 2)), dim=1)
                    delta.scatter_add_(1, target, minus_one[..., :size])  # softmax - one-hot: cross-entropy's
                    delta /= size  # gradient, for the mean over the batch
                    optimizer.step([torch.bmm(delta, batch)])
            epoch += c.epoch_size
            logits = torch.bmm(weight, features[dev_index].transpose(1, 2))  # [G, C, V]
            right = ((logits.argmax(1) == labels[dev_index]) & dev_mask).sum(1).float()
            accuracy = right / dev_size  # float32, as SentEval's mean of a float tensor
            improved = accuracy > best
            best = torch.where(improved, accuracy, best)
            best_weight[alive[improved]] = weight[improved]
            stop = ~improved & (stale >= c.tenacity)  # SentEval's never-reset counter
            stale += (~improved).long()
            if stop.any():
                keep = ~stop
                alive, best, stale = alive[keep], best[keep], stale[keep]
                train_index, dev_index, dev_mask, dev_size = (
                    train_index[keep],
                    dev_index[keep],
                    dev_mask[keep],
                    dev_size[keep],
                )
                optimizer.keep(keep)
        return [(w[:, :-1].contiguous().numpy(), w[:, -1].contiguous().numpy()) for w in best_weight]


#: members of one stacked model at most (a fixed size, so no number depends on the parallelism)
STACK = 32


def fit_all(config: ProbeConfig, x: np.ndarray, y: np.ndarray, fits: list[Fit], nclasses: int, jobs: int):
    """Every fit, in order, as a model with ``predict`` and ``score``."""
    if config.protocol != "simcse" or not config.stacked:
        return Parallel(n_jobs=jobs)(delayed(_single)(config, x, y, fit, nclasses) for fit in fits)
    groups: dict[tuple[int, bool], list[int]] = defaultdict(list)
    for i, fit in enumerate(fits):
        groups[(len(fit.train), fit.validation is None)].append(i)
    chunks = [members[i : i + STACK] for members in groups.values() for i in range(0, len(members), STACK)]
    fitted = Parallel(n_jobs=jobs)(
        delayed(_stacked_group)(config, x, y, [fits[i] for i in chunk], nclasses) for chunk in chunks
    )
    models: list = [None] * len(fits)
    for chunk, weights in zip(chunks, fitted, strict=True):
        for i, (weight, bias) in zip(chunk, weights, strict=True):
            models[i] = StackedLinear(weight, bias)
    return models


def _single(config: ProbeConfig, x, y, fit: Fit, nclasses: int):
    """One fit on its own (scikit-learn's, or SentEval's PyTorch classifier one at a time)."""
    held_out = None if fit.validation is None else (x[fit.validation], y[fit.validation])
    with _one_thread():
        return _classifier(config, x[fit.train], y[fit.train], fit.reg, nclasses, held_out)


def _scores(models, x, y, fits: list[Fit]) -> list[float]:
    return [
        model.score(x[fit.validation], y[fit.validation]) for model, fit in zip(models, fits, strict=True)
    ]


def inner_kfold(config: ProbeConfig, x: np.ndarray, y: np.ndarray, jobs: int = -1) -> dict[str, float]:
    """SentEval's InnerKFoldClassifier: {"devacc", "acc"}."""
    nclasses = int(y.max()) + 1
    grid = config.grid("inner")
    outer = list(StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=SEED).split(x, y))
    inner = StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=SEED)
    fits = []  # per outer fold, per value, per inner fold
    for train, _ in outer:
        folds = list(inner.split(x[train], y[train]))
        fits += [Fit(train[a], reg, train[b]) for reg in grid for a, b in folds]
    scores = np.array(_scores(fit_all(config, x, y, fits, nclasses, jobs), x, y, fits))
    scores = scores.reshape(len(outer), len(grid), config.kfold)
    chosen = []
    for per_value in scores:
        rounded = [round(100 * float(np.mean(fold_scores)), 2) for fold_scores in per_value]
        chosen.append(_choose(grid, rounded))
    refits = [Fit(train, reg) for (train, _), (reg, _) in zip(outer, chosen, strict=True)]
    models = fit_all(config, x, y, refits, nclasses, jobs)
    tests = [_percent(model.score(x[test], y[test])) for model, (_, test) in zip(models, outer, strict=True)]
    return {
        "devacc": round(float(np.mean([dev for _, dev in chosen])), 2),
        "acc": round(float(np.mean(tests)), 2),
    }


def kfold(
    config: ProbeConfig, train: tuple, test: tuple, jobs: int = -1, f1: bool = False
) -> dict[str, float]:
    """SentEval's KFoldClassifier: the value by k-fold on train, then test: {"devacc", "acc"[, "f1"]}."""
    (x, y), (x_test, y_test) = train, test
    nclasses = int(y.max()) + 1
    grid = config.grid("kfold")
    folds = list(StratifiedKFold(n_splits=config.kfold, shuffle=True, random_state=config.seed).split(x, y))
    fits = [Fit(a, reg, b) for reg in grid for a, b in folds]
    scores = np.array(_scores(fit_all(config, x, y, fits, nclasses, jobs), x, y, fits))
    rounded = [round(100 * float(np.mean(s)), 2) for s in scores.reshape(len(grid), len(folds))]
    reg, dev = _choose(grid, rounded)
    (model,) = fit_all(config, x, y, [Fit(np.arange(len(x)), reg)], nclasses, jobs=1)
    result = {"devacc": dev, "acc": _percent(model.score(x_test, y_test))}
    if f1:
        result["f1"] = _percent(f1_score(y_test, model.predict(x_test)))
    return result


def split(config: ProbeConfig, train: tuple, dev: tuple, test: tuple, jobs: int = -1) -> dict[str, float]:
    """SentEval's SplitClassifier: the value chosen on dev, then test: {"devacc", "acc"}. (SentEval refits
    the chosen value from the same seed, which gives the very model already fitted.)"""
    nclasses = int(train[1].max()) + 1
    grid = config.grid("split")
    x, y = np.concatenate([train[0], dev[0]]), np.concatenate([train[1], dev[1]])
    rows, held_out = np.arange(len(train[0])), np.arange(len(train[0]), len(x))
    fits = [Fit(rows, reg, held_out) for reg in grid]
    models = fit_all(config, x, y, fits, nclasses, jobs)
    scores = [_percent(s) for s in _scores(models, x, y, fits)]
    best = int(np.argmax(scores))
    return {"devacc": scores[best], "acc": _percent(models[best].score(*test))}
