"""A ``--tasks`` list evaluates each name as itself: one combined call gives, metric for metric, the numbers
of separate calls, and the STS ``avg`` is the mean of exactly the 7-task table's entries (issue 59: two
STS-B splits in one list once scored one split for both, and the table's STS-B test counted again in
``avg``)."""

import hashlib
import itertools
import random

import numpy as np
import pytest

from sentcl.evaluation import STSEvaluator
from sentcl.evaluation.suite import EvaluationSuite
from sentcl.evaluation.tasks import TASKS
from sentcl.evaluation.transfer import TransferEvaluator
from tests.conftest import SENTENCES, write_stsb
from tests.evaluation.test_transfer import write_fixture as write_transfer

TABLE = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R")
YEARS = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}


def rows(n: int, shift: int) -> list[tuple[float, str, str]]:
    """``n`` scored pairs; each ``shift`` pairs other sentences with other scores, so every split and task
    has a Spearman of its own."""
    out = []
    for i in range(n):
        a = SENTENCES[(i + shift) % len(SENTENCES)]
        b = SENTENCES[(i * (shift + 2) + 1) % len(SENTENCES)]
        out.append((round(((i * (shift + 3)) % 50) / 10, 1), a, b))
    return out


@pytest.fixture(scope="module")
def every_task(tmp_path_factory):
    """A data folder with every registered task present: STS12–16, the three STS-B splits, SICK-R and the
    transfer tasks' fixtures (CR, SUBJ and MPQA missing, as a missing task must be handled in a list too)."""
    root = tmp_path_factory.mktemp("every-task")
    for shift, split in enumerate(("train", "dev", "test"), start=1):
        write_stsb(root / "stsb" / "senteval", split, rows(20 + 4 * shift, shift))
    for shift, (task, names) in enumerate(YEARS.items(), start=4):
        folder = root / f"{task}-en-test"
        folder.mkdir()
        for k, name in enumerate(names):
            pairs = rows(10 + k, shift + k)
            (folder / f"STS.input.{name}.txt").write_text("".join(f"{a}\t{b}\n" for _, a, b in pairs))
            (folder / f"STS.gs.{name}.txt").write_text("".join(f"{s}\n" for s, _, _ in pairs))
    (root / "SICK").mkdir()
    sick = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    sick += [f"{i}\t{a}\t{b}\t{1 + s * 0.8:.2f}\tNEUTRAL" for i, (s, a, b) in enumerate(rows(22, 11))]
    (root / "SICK" / "SICK_test_annotated.txt").write_text("\n".join(sick) + "\n")
    write_transfer(root)
    return root


class HashedEmbedder:
    """Each sentence's vector depends on the sentence alone (not on what else is encoded with it), with a
    word-count part that lets the transfer fixtures' classes be learned."""

    def encode(self, sentences):
        out = []
        for s in sentences:
            seed = int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little")
            noise = np.random.default_rng(seed).normal(size=6)
            words = s.split()
            out.append(np.r_[noise, words.count("good"), words.count("bad")])
        return np.asarray(out, dtype=np.float32)


def evaluate(root, names) -> dict[str, float]:
    metrics, _ = EvaluationSuite(root, list(names), transfer_protocol="senteval-sklearn").run(
        HashedEmbedder()
    )
    return metrics


def family_of(name: str) -> str:
    return TASKS.names[name.lower()][0]


@pytest.fixture(scope="module", autouse=True)
def quick_probe():
    """The transfer family's probes stand in by a number of each task's features (its classifier is tested
    in test_transfer.py; here only which tasks a list evaluates, and under which keys, is at stake): 300
    lists in seconds instead of minutes."""

    def probe(self, embedder, task):
        features = [self._features(embedder, split) for split in task.splits.values()]
        return {
            "acc": float(sum(np.abs(x).sum() + y.sum() for x, y in features)),
            "devacc": float(len(features)),
        }

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransferEvaluator, "evaluate_task", probe)
        yield


@pytest.fixture(scope="module")
def alone(every_task):
    return {name: evaluate(every_task, [name]) for name in TASKS.names}


def table_average(metrics: dict[str, float]) -> float:
    return float(np.mean([metrics[key] for key in TABLE]))


def check_combined(root, names, alone) -> None:
    combined = evaluate(root, names)
    expected: dict[str, float] = {}
    for name in names:
        for key, value in alone[name].items():
            if key == "avg" or key.endswith("_avg"):
                continue  # an average depends on what else the list holds: checked below
            assert expected.setdefault(key, value) == value, (names, key)
    for key, value in expected.items():
        assert combined[key] == value, (names, key, combined[key], value)  # to the digit
    extra = {k for k in combined if k not in expected and k != "avg" and not k.endswith("_avg")}
    assert not extra, (names, extra)
    if all(key in combined for key in TABLE) and "avg" in combined:
        table_names = [n for n in names if family_of(n) == "sts"]
        shown = {k for n in table_names for k in alone[n] if k in TABLE}
        if shown == set(TABLE):
            assert combined["avg"] == pytest.approx(table_average(combined), abs=1e-9), names


def test_stsb_splits_keep_their_own_numbers(every_task, alone):
    dev, train, test = (alone[n] for n in ("stsb-dev", "stsb-train", "stsb-test"))
    assert len({dev["stsb_dev_spearman"], train["stsb_train_spearman"], test["STS-B"]}) == 3
    combined = evaluate(every_task, ["stsb-dev", "stsb-train", "sts"])
    assert combined["stsb_dev_spearman"] == dev["stsb_dev_spearman"]
    assert combined["stsb_train_spearman"] == train["stsb_train_spearman"]
    assert combined["STS-B"] == test["STS-B"]
    assert combined["avg"] == alone["sts"]["avg"] == pytest.approx(table_average(combined), abs=1e-9)


@pytest.mark.parametrize("first", sorted(TASKS.names))
def test_every_pair_of_registered_names_equals_separate_calls(every_task, alone, first):
    for second in sorted(TASKS.names):
        if second > first:
            check_combined(every_task, [first, second], alone)


def test_triples_with_the_table_equal_separate_calls(every_task, alone):
    pool = sorted(set(TASKS.names) - {"sts"})
    picks = random.Random(59).sample(list(itertools.combinations(pool, 2)), 40)
    for a, b in picks:
        for names in ([a, b, "sts"], [a, "sts", b], ["sts", a, b]):
            check_combined(every_task, names, alone)


def test_the_table_counts_each_entry_once_in_avg(every_task, alone):
    """``stsb-test``, ``STSBenchmark``, ``STS-B`` and ``stsb`` name one table entry: listed together with
    ``sts`` they add no row and leave ``avg`` the 7-task mean."""
    evaluator = STSEvaluator(every_task, ["sts", "stsb-test", "STS-B", "stsb", "sickr", "stsb-dev"])
    metrics = evaluator(HashedEmbedder())
    assert metrics["avg"] == alone["sts"]["avg"]
    table = evaluator.format(metrics).splitlines()
    assert [line.split()[0] for line in table[1:]] == [*TABLE, "STS-B", "avg"]
    assert sum("test split" in line for line in table) == 2  # STS-B's and SICK-R's
    assert sum("dev split" in line for line in table) == 1


def test_the_table_rows_name_their_splits(every_task):
    evaluator = STSEvaluator(every_task, "stsb-dev,stsb-train")
    metrics = evaluator(HashedEmbedder())
    lines = evaluator.format(metrics).splitlines()
    assert lines[1].split()[1:] == [f"{metrics['stsb_dev_spearman']:.2f}", "28", "dev", "split"]
    assert lines[2].split()[1:] == [f"{metrics['stsb_train_spearman']:.2f}", "24", "train", "split"]
    assert "avg" not in metrics and evaluator.primary == "stsb_dev_spearman" and len(lines) == 3
    pairs = evaluator.metric_pairs(evaluator.last_report)
    assert set(pairs) == {"stsb_dev_spearman", "stsb_train_spearman"}
    assert len(pairs["stsb_dev_spearman"][0]) == 28 and len(pairs["stsb_train_spearman"][0]) == 24


def test_a_local_file_named_twice_is_evaluated_once(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    lines = [f"{a}\t{b}\t{s}" for s, a, b in rows(12, 3)]
    pairs.write_text("\n".join(["sentence1\tsentence2\tscore", *lines]) + "\n")
    once = evaluate(tmp_path, [str(pairs)])
    assert evaluate(tmp_path, [str(pairs), f"{tmp_path}/./pairs.tsv"]) == once
