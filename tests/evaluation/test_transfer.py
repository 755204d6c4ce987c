import gzip

import numpy as np
import pytest

from sentcl.evaluation import senteval_protocols as protocols
from sentcl.evaluation.suite import EvaluationSuite
from sentcl.evaluation.transfer import (
    TransferDataError,
    TransferEvaluator,
    load_transfer_task,
    senteval_order,
)


class KeywordEmbedder:
    """2-d features that separate the fixtures' classes perfectly: counts of 'good' and 'bad'."""

    def encode(self, sentences):
        words = [s.split() for s in sentences]  # the length term keeps STS similarities from being constant
        return np.array([[w.count("good") + 0.01, w.count("bad") + 0.01 + 0.001 * len(w)] for w in words])


def write_fixture(root):
    t = root / "transfer"
    (t / "MR").mkdir(parents=True)
    (t / "MR" / "rt-polarity.pos").write_text(
        "\n".join(f"good film {i}" for i in range(30)) + "\n", encoding="latin-1"
    )
    (t / "MR" / "rt-polarity.neg").write_text(
        "\n".join(f"bad film {i}" for i in range(30)) + "\n", encoding="latin-1"
    )
    sst = t / "SST" / "binary"
    sst.mkdir(parents=True)
    rows = "\n".join(f"{'good' if i % 2 else 'bad'} movie {i}\t{i % 2}" for i in range(40)) + "\n"
    (sst / "sentiment-train.gz").write_bytes(gzip.compress(rows.encode()))  # the shared copy gzips train
    (sst / "sentiment-dev").write_text(rows)
    (sst / "sentiment-test").write_text(rows)
    (t / "TREC").mkdir()
    trec = "\n".join(
        f"{'HUM:ind Who is good' if i % 2 else 'LOC:city Where is bad'} {i} ?" for i in range(40)
    )
    (t / "TREC" / "train_5500.label").write_text(trec + "\n", encoding="latin-1")
    (t / "TREC" / "TREC_10.label").write_text(trec + "\n", encoding="latin-1")
    (t / "MRPC").mkdir()
    mrpc = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    mrpc += [f"{i % 2}\t{i}\t{i}\tgood day\t{'good day' if i % 2 else 'bad bad night'}" for i in range(40)]
    (t / "MRPC" / "msr_paraphrase_train.txt").write_text("\n".join(mrpc) + "\n")
    (t / "MRPC" / "msr_paraphrase_test.txt").write_text("\n".join(mrpc) + "\n")


def test_readers_follow_senteval_layouts(tmp_path):
    write_fixture(tmp_path)
    mr = load_transfer_task(tmp_path, "MR")
    assert len(mr.splits["all"].sentences) == 60 and mr.splits["all"].labels.sum() == 30
    sst = load_transfer_task(tmp_path, "SST2")
    assert set(sst.splits) == {"train", "dev", "test"} and len(sst.splits["train"].labels) == 40
    trec = load_transfer_task(tmp_path, "TREC")
    assert trec.splits["train"].sentences[1].startswith("Who is")
    assert set(trec.splits["test"].labels) == {3, 4}
    mrpc = load_transfer_task(tmp_path, "MRPC")
    assert mrpc.splits["train"].sentences[0] == ("good day", "bad bad night")
    assert load_transfer_task(tmp_path, "CR").missing


def test_separable_fixtures_reach_full_accuracy_and_missing_tasks_are_named(tmp_path):
    """The readers and the wiring, on the scikit-learn path (the PyTorch probe needs more than the
    fixtures' few batches per epoch to move: see the protocol tests below)."""
    write_fixture(tmp_path)
    evaluator = TransferEvaluator(tmp_path, protocol="senteval-sklearn", folds=3)
    metrics = evaluator(KeywordEmbedder())
    for name in ("MR", "SST2", "TREC", "MRPC"):
        assert metrics[name] == pytest.approx(100.0)
    assert evaluator.details["MRPC"]["f1"] == pytest.approx(100.0)
    assert set(evaluator.missing) == {"CR", "SUBJ", "MPQA"} and "avg" not in metrics
    assert "missing" in evaluator.format(metrics)


def test_cross_validation_is_at_chance_on_random_labels():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 5)).astype(np.float32), rng.integers(0, 2, 200)
    config = protocols.ProbeConfig(protocol="senteval-sklearn", kfold=5)
    assert 30 < protocols.inner_kfold(config, x, y)["acc"] < 70


def noisy_linear(n, d=8, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    scores = x @ rng.normal(size=(d, classes)) + rng.normal(scale=1.5, size=(n, classes))
    return x, scores.argmax(1)


# A re-derivation of SentEval's scikit-learn path (senteval/tools/validation.py), written as plain loops:
# the protocol module must give the very same numbers.
def _logreg(c, x, y):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(C=c, random_state=1111).fit(x, y)


def naive_inner_kfold(x, y, k):
    from sklearn.model_selection import StratifiedKFold

    grid = [2**t for t in range(-2, 4)]
    folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=1111)
    dev, test = [], []
    for train, held in folds.split(x, y):
        scores = []
        for c in grid:
            inner = StratifiedKFold(n_splits=k, shuffle=True, random_state=1111)
            fold_scores = [
                _logreg(c, x[train][a], y[train][a]).score(x[train][b], y[train][b])
                for a, b in inner.split(x[train], y[train])
            ]
            scores.append(round(100 * np.mean(fold_scores), 2))
        dev.append(max(scores))
        test.append(
            round(100 * _logreg(grid[int(np.argmax(scores))], x[train], y[train]).score(x[held], y[held]), 2)
        )
    return round(np.mean(dev), 2), round(np.mean(test), 2)


def naive_kfold(x, y, x_test, y_test, k):
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedKFold

    grid = [2**t for t in range(-1, 6)]
    folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=1111)
    scores = [
        round(100 * np.mean([_logreg(c, x[a], y[a]).score(x[b], y[b]) for a, b in folds.split(x, y)]), 2)
        for c in grid
    ]
    model = _logreg(grid[int(np.argmax(scores))], x, y)
    result = (max(scores), round(100 * model.score(x_test, y_test), 2))
    return (*result, round(100 * f1_score(y_test, model.predict(x_test)), 2)) if y.max() == 1 else result


def naive_split(train, dev, test):
    grid = [2**t for t in range(-2, 4)]
    scores = [round(100 * _logreg(c, *train).score(*dev), 2) for c in grid]
    return max(scores), round(100 * _logreg(grid[int(np.argmax(scores))], *train).score(*test), 2)


def test_senteval_sklearn_equals_its_reference_loops():
    config = protocols.ProbeConfig(protocol="senteval-sklearn", kfold=4)
    x, y = noisy_linear(160)
    got = protocols.inner_kfold(config, x, y, jobs=2)
    assert (got["devacc"], got["acc"]) == pytest.approx(naive_inner_kfold(x, y, 4), abs=0.01)
    x6, y6 = noisy_linear(200, classes=3, seed=1)  # TREC-style: several classes
    x_test, y_test = noisy_linear(80, classes=3, seed=2)
    got = protocols.kfold(config, (x6, y6), (x_test, y_test))
    expected = naive_kfold(x6, y6, x_test, y_test, 4)
    assert (got["devacc"], got["acc"]) == pytest.approx(expected[:2], abs=0.01)
    xp, yp = noisy_linear(200, seed=3)  # MRPC-style: binary with F1
    xt, yt = noisy_linear(90, seed=4)
    assert tuple(protocols.kfold(config, (xp, yp), (xt, yt), f1=True).values()) == pytest.approx(
        naive_kfold(xp, yp, xt, yt, 4), abs=0.01
    )
    got = protocols.split(config, (x, y), (xt[:45], yt[:45]), (xt[45:], yt[45:]))
    assert (got["devacc"], got["acc"]) == pytest.approx(
        naive_split((x, y), (xt[:45], yt[:45]), (xt[45:], yt[45:]))
    )


def test_simcse_protocol_is_reproducible_and_parallelism_changes_no_number():
    config = protocols.ProbeConfig(protocol="simcse", kfold=3, max_epoch=40)
    x, y = noisy_linear(150)
    one = protocols.inner_kfold(config, x, y, jobs=1)
    assert one == protocols.inner_kfold(config, x, y, jobs=2)
    xt, yt = noisy_linear(60, seed=5)
    assert protocols.kfold(config, (x, y), (xt, yt), jobs=1, f1=True) == protocols.kfold(
        config, (x, y), (xt, yt), jobs=2, f1=True
    )
    assert 50 < one["acc"] <= 100


def test_simcse_classifier_keeps_the_best_epoch_and_stops_after_tenacity():
    config = protocols.ProbeConfig(protocol="simcse", tenacity=2, epoch_size=1, max_epoch=200)
    x, y = noisy_linear(120)
    model = protocols.TorchLogisticRegression(config, 8, 2, l2reg=1e-4)
    seen = []
    real = model._accuracy
    model._accuracy = lambda a, b: seen.append(real(a, b)) or seen[-1]
    model.fit(x[:100], y[:100], (x[100:], y[100:]))
    # stops on the first epoch after the counter (never reset) passed the tenacity
    stale = [i for i in range(1, len(seen)) if seen[i] <= max(seen[:i])]
    assert len(stale) == config.tenacity + 1 and len(seen) - 1 == stale[-1]
    assert model.score(x[100:], y[100:]) == pytest.approx(max(seen))


def test_sets_are_ordered_as_senteval_orders_them():
    sentences = ["a b c", "a", "b c", "x", "y z"]
    labels = np.array([0, 1, 0, 0, 1])
    assert senteval_order(sentences, labels).tolist() == [3, 1, 2, 4, 0]  # (words, label), stable
    pairs = [("a b", "c"), ("a", "b c d"), ("a", "b")]
    assert senteval_order(pairs, np.array([1, 0, 0])).tolist() == [2, 1, 0]


def test_an_unknown_protocol_is_refused(tmp_path):
    from sentcl.evaluation import TaskSpecError

    with pytest.raises(
        TaskSpecError, match="transfer protocol 'pytorch' is not one of simcse, senteval-sklearn"
    ):
        TransferEvaluator(tmp_path, protocol="pytorch")


def test_malformed_rows_name_file_and_line(tmp_path):
    write_fixture(tmp_path)
    (tmp_path / "transfer" / "TREC" / "TREC_10.label").write_text("HUM:ind Who ?\nnot a label line\n")
    with pytest.raises(TransferDataError, match=r"TREC_10\.label:2"):
        load_transfer_task(tmp_path, "TREC")


def test_suite_routes_sts_and_transfer(tmp_path):
    write_fixture(tmp_path)
    from tests.conftest import stsb_rows, write_stsb

    write_stsb(tmp_path / "stsb" / "senteval", "dev", stsb_rows())
    suite = EvaluationSuite(tmp_path, "stsb-dev,MR")
    assert suite.sts is not None and [t.name for t in suite.transfer.tasks] == ["MR"]
    metrics, tables = suite.run(KeywordEmbedder())
    assert "stsb_dev_spearman" in metrics and metrics["MR"] == pytest.approx(100.0)
    assert "STS-B dev" in tables and "MR" in tables


def test_the_probes_leave_the_callers_torch_threads_as_they_were():
    """A fit pins itself to one thread; the process's own setting (what training uses) is restored."""
    import torch

    before = torch.get_num_threads()
    x, y = noisy_linear(60)
    protocols.inner_kfold(protocols.ProbeConfig(protocol="simcse", kfold=2, max_epoch=4), x, y, jobs=1)
    assert torch.get_num_threads() == before


def test_the_stacked_probes_give_the_numbers_of_senteval_one_classifier_at_a_time():
    """The simcse protocol's classifiers trained together (one stacked model per training-set size) give
    every procedure's numbers of SentEval's classifier run one after another, and each kept model is the
    one-at-a-time model's best epoch (weights equal to float rounding)."""
    x, y = noisy_linear(180, seed=11)
    xt, yt = noisy_linear(70, seed=12)
    x3, y3 = noisy_linear(150, classes=3, seed=13)
    results = []
    for stacked in (False, True):
        config = protocols.ProbeConfig(protocol="simcse", kfold=3, tenacity=2, stacked=stacked)
        results.append(
            (
                protocols.inner_kfold(config, x, y, jobs=1),
                protocols.kfold(config, (x, y), (xt, yt), jobs=1, f1=True),
                protocols.kfold(config, (x3, y3), (xt, yt % 3), jobs=1),
                protocols.split(config, (x, y), (xt[:35], yt[:35]), (xt[35:], yt[35:]), jobs=1),
            )
        )
    assert results[0] == results[1]
    config = protocols.ProbeConfig(protocol="simcse", tenacity=2)
    fits = [protocols.Fit(np.arange(120), reg, np.arange(120, 180)) for reg in config.grid("inner")]
    fits.append(protocols.Fit(np.arange(121), 1e-3))  # another size, and SentEval's own 5 % validation
    stacked = protocols.fit_all(config, x, y, fits, 2, jobs=1)
    for fit, model in zip(fits, stacked, strict=True):
        single = protocols._single(config, x, y, fit, 2).model[0]
        np.testing.assert_allclose(model.weight.numpy(), single.weight.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(model.bias.numpy(), single.bias.detach().numpy(), atol=1e-5)
