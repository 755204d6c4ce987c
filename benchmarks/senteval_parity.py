"""Cross-check sentcl's SentEval protocols against SentEval's own classifier code, on fixed random data.

    python benchmarks/senteval_parity.py PATH/TO/SimCSE/SentEval [--n 240] [--kfold 5]

SentEval is not a dependency: point this at a copy of it (SimCSE's repository carries one in SentEval/).
Its PyTorch classifier is written for CUDA; here it runs on the CPU (``.cuda()`` made a no-op and its
device forced to the CPU) — the same arithmetic as sentcl's. For each protocol (senteval-sklearn, simcse)
and each procedure (inner k-fold as MR/CR/SUBJ/MPQA, k-fold with F1 as MRPC, dev split as SST-2) it prints
SentEval's (devacc, acc[, f1]) beside sentcl's and exits 1 on any difference above 0.01.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types

import numpy as np
import torch
from sklearn.metrics import f1_score

from sentcl.evaluation import senteval_protocols as protocols


def load_senteval(path: str):
    sys.path.insert(0, path)
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.cuda.manual_seed = lambda *args, **kwargs: None  # type: ignore[assignment]
    if not hasattr(inspect, "getargspec"):  # SentEval's utils use the pre-3.11 name
        inspect.getargspec = inspect.getfullargspec  # type: ignore[attr-defined]
    from senteval.tools import classifier, validation

    cpu = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    cpu.device = lambda *args, **kwargs: torch.device("cpu")
    classifier.torch = cpu
    return validation


def data(n: int, d: int = 12, seed: int = 0):
    """n training and 100 test examples of one noisy linear rule."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    x = rng.normal(size=(n + 100, d)).astype(np.float32)
    y = ((x @ w + rng.normal(scale=2.0, size=n + 100)) > 0).astype(int)
    return (x[:n], y[:n]), (x[n:], y[n:])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("senteval")
    parser.add_argument("--n", type=int, default=240)
    parser.add_argument("--kfold", type=int, default=5)
    args = parser.parse_args()
    validation = load_senteval(args.senteval)
    torch.set_num_threads(1)
    (x, y), (x_test, y_test) = data(args.n)
    worst = 0.0
    for protocol in ("senteval-sklearn", "simcse"):
        classifier = {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4}
        config = {"nclasses": 2, "seed": 1111, "usepytorch": protocol == "simcse", "classifier": classifier,
                  "nhid": 0, "kfold": args.kfold}  # fmt: skip
        mine = protocols.ProbeConfig(protocol=protocol, kfold=args.kfold)  # type: ignore[arg-type]
        rows = []
        theirs = validation.InnerKFoldClassifier(x, y, config).run()
        ours = protocols.inner_kfold(mine, x, y, jobs=1)
        rows.append(("inner k-fold", theirs, (ours["devacc"], ours["acc"])))
        dev, acc, yhat = validation.KFoldClassifier(
            {"X": x, "y": y}, {"X": x_test, "y": y_test}, config
        ).run()
        ours = protocols.kfold(mine, (x, y), (x_test, y_test), jobs=1, f1=True)
        f1 = round(100 * f1_score(y_test, np.ravel(yhat)), 2)
        rows.append(("k-fold", (dev, acc, f1), (ours["devacc"], ours["acc"], ours["f1"])))
        sets = {"train": x, "valid": x_test[:50], "test": x_test[50:]}
        labels = {"train": y, "valid": y_test[:50], "test": y_test[50:]}
        theirs = validation.SplitClassifier(sets, labels, config).run()
        ours = protocols.split(mine, (x, y), (x_test[:50], y_test[:50]), (x_test[50:], y_test[50:]), jobs=1)
        rows.append(("dev split", theirs, (ours["devacc"], ours["acc"])))
        for name, theirs, ours in rows:
            difference = max(abs(float(a) - float(b)) for a, b in zip(theirs, ours, strict=True))
            worst = max(worst, difference)
            print(f"{protocol:<17} {name:<13} SentEval {tuple(float(v) for v in theirs)}  sentcl {ours}")
    print(f"largest difference: {worst:.2f}")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
