import gzip

import numpy as np
import pytest

from sentcl.evaluation.suite import EvaluationSuite
from sentcl.evaluation.transfer import (
    TransferDataError,
    TransferEvaluator,
    cross_validated_accuracy,
    load_transfer_task,
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
    write_fixture(tmp_path)
    evaluator = TransferEvaluator(tmp_path, folds=3)
    metrics = evaluator(KeywordEmbedder())
    for name in ("MR", "SST2", "TREC", "MRPC"):
        assert metrics[name] == pytest.approx(100.0)
    assert evaluator.details["MRPC"]["f1"] == pytest.approx(100.0)
    assert set(evaluator.missing) == {"CR", "SUBJ", "MPQA"} and "avg" not in metrics
    assert "missing" in evaluator.format(metrics)


def test_cross_validation_is_at_chance_on_random_labels():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 5)), rng.integers(0, 2, 200)
    assert 30 < cross_validated_accuracy(x, y, folds=5) < 70


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
