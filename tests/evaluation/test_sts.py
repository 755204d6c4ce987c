import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from sentcl.evaluation import STSDataError, STSEvaluator, TaskSpecError, aggregate, load_task
from tests.conftest import stsb_rows, write_stsb


class LookupEmbedder:
    """Each sentence maps to a fixed 2-d vector; counts what it was asked to encode."""

    def __init__(self, vectors: dict[str, tuple[float, float]]):
        self.vectors = vectors
        self.calls: list[list[str]] = []

    def encode(self, sentences):
        self.calls.append(list(sentences))
        return np.array([self.vectors.get(s, (1.0, 0.0)) for s in sentences], dtype=np.float32)


def test_aggregations_against_hand_computation():
    a = (np.array([0.1, 0.5, 0.3, 0.9]), np.array([1.0, 2.0, 3.0, 4.0]))
    b = (np.array([0.2, 0.1, 0.8]), np.array([2.0, 1.0, 5.0]))
    scores = aggregate("T", {"a": a, "b": b})
    # per dataset: spearman(a) = 0.8, spearman(b) = 1.0
    assert scores.datasets["a"].spearman == pytest.approx(80.0)
    assert scores.datasets["b"].spearman == pytest.approx(100.0)
    assert scores.aggregated["mean"].spearman == pytest.approx(90.0)
    assert scores.aggregated["wmean"].spearman == pytest.approx((4 * 80.0 + 3 * 100.0) / 7)
    every_sys, every_gold = np.r_[a[0], b[0]], np.r_[a[1], b[1]]
    assert scores.aggregated["all"].spearman == pytest.approx(100 * spearmanr(every_sys, every_gold)[0])
    assert scores.aggregated["all"].pearson == pytest.approx(100 * pearsonr(every_sys, every_gold)[0])
    assert scores.aggregated["all"].n == 7


def write_senteval_year(root, folder, stem, names, rows):
    path = root / folder
    path.mkdir(parents=True)
    for name in names:
        (path / f"{stem}.input.{name}.txt").write_text("\n".join(f"{a}\t{b}" for a, b, _ in rows) + "\n")
        (path / f"{stem}.gs.{name}.txt").write_text("\n".join(g for _, _, g in rows) + "\n")


STS_ROWS = [
    ("a  dog runs", "a dog runs", "5.0"),
    ("a cat", "a car", ""),
    ("a man", "the sea", "0.4"),
    ("x", "y", "2"),
]


def test_senteval_sts_layouts_drop_unscored_pairs(tmp_path):
    write_senteval_year(tmp_path, "STS/STS13-en-test", "STS", ["FNWN", "headlines", "OnWN"], STS_ROWS)
    names = ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"]
    write_senteval_year(tmp_path, "STS16-en-test", "STS2016", names, STS_ROWS)
    for task in ("STS13", "STS16"):
        loaded = load_task(tmp_path, task)
        assert loaded.missing is None
        pairs = loaded.datasets["headlines"]
        assert len(pairs) == 3  # the empty gold line is dropped with its pair
        assert pairs.sentences1[0] == "a dog runs"  # whitespace normalised like SentEval
        assert pairs.scores.tolist() == [5.0, 0.4, 2.0]


def test_missing_tasks_are_reported_and_no_partial_average(stsb_data_dir):
    evaluator = STSEvaluator(stsb_data_dir, "sts")
    report = evaluator.report(LookupEmbedder({}))
    assert set(report.missing) == {
        "STS12",
        "STS13",
        "STS14",
        "STS15",
        "STS16",
        "STSBenchmark",
        "SICKRelatedness",
    }
    assert "sts-test.csv" in report.missing["STSBenchmark"]
    table = evaluator.format_report(report)
    assert [line.split()[1] for line in table.splitlines()[1:8]] == ["missing"] * 7
    assert "0/7 tasks present" in table
    assert "avg" not in evaluator.metrics(report)


def test_stsb_dev_and_sick_scored_with_cosine(tmp_path):
    rows = [(5.0, "s1", "s1"), (1.0, "s2", "s3"), (3.0, "s4", "s5"), (0.0, "s6", "s7")]
    write_stsb(tmp_path / "stsb" / "senteval", "dev", rows)
    (tmp_path / "SICK").mkdir()
    sick = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    sick += [f"{i}\t{a}\t{b}\t{1 + 0.8 * s}\tNEUTRAL" for i, (s, a, b) in enumerate(rows)]  # SICK's 1–5
    (tmp_path / "SICK" / "SICK_test_annotated.txt").write_text("\n".join(sick) + "\n")
    # cosines: s1·s1 = 1, s2·s3 = 0, s4·s5 = 0.6, s6·s7 = -1 → same order as gold
    vectors = {
        "s1": (1, 0),
        "s2": (1, 0),
        "s3": (0, 1),
        "s4": (1, 0),
        "s5": (0.6, 0.8),
        "s6": (1, 0),
        "s7": (-1, 0),
    }
    embedder = LookupEmbedder(vectors)
    dev = STSEvaluator(tmp_path, "stsb-dev")
    assert dev.primary == "stsb_dev_spearman"
    assert dev(embedder)["stsb_dev_spearman"] == pytest.approx(100.0)
    sick_eval = STSEvaluator(tmp_path, "SICK-R")
    assert sick_eval(embedder) == {"SICK-R": pytest.approx(100.0), "avg": pytest.approx(100.0)}


def test_each_sentence_is_encoded_once(tmp_path):
    write_stsb(tmp_path / "stsb" / "senteval", "dev", [(5.0, "a", "b"), (1.0, "b", "c"), (2.0, "a", "c")])
    embedder = LookupEmbedder({"a": (1, 0), "b": (0, 1), "c": (1, 1)})
    STSEvaluator(tmp_path, "stsb-dev")(embedder)
    assert embedder.calls == [["a", "b", "c"]]


@pytest.mark.parametrize(
    "content,message",
    [
        ("g\tf\ty\tid\tnot-a-number\ta\tb\n", r"sts-dev\.csv:1: score 'not-a-number' is not a number"),
        ("g\tf\ty\tid\t1.0\ta\tb\ng\tf\n", r"sts-dev\.csv:2: expected at least 7 tab-separated fields"),
    ],
)
def test_malformed_stsb_names_file_and_line(tmp_path, content, message):
    (tmp_path / "stsb" / "senteval").mkdir(parents=True)
    (tmp_path / "stsb" / "senteval" / "sts-dev.csv").write_text(content)
    with pytest.raises(STSDataError, match=message):
        STSEvaluator(tmp_path, "stsb-dev")


def test_gold_and_input_length_mismatch(tmp_path):
    folder = tmp_path / "STS15-en-test"
    folder.mkdir()
    for name in ["answers-forums", "answers-students", "belief", "headlines", "images"]:
        (folder / f"STS.input.{name}.txt").write_text("a\tb\nc\td\n")
        (folder / f"STS.gs.{name}.txt").write_text("1\n")
    with pytest.raises(STSDataError, match=r"1 score lines but .* has 2 sentence pairs"):
        load_task(tmp_path, "STS15")


def test_unknown_task_and_transfer_are_clear_errors(stsb_data_dir):
    with pytest.raises(TaskSpecError, match=r"unknown evaluation task 'sts99'"):
        STSEvaluator(stsb_data_dir, "sts99")
    with pytest.raises(TaskSpecError, match=r"transfer tasks"):
        STSEvaluator(stsb_data_dir, "transfer")


def test_fixture_rows_are_valid(stsb_data_dir):
    assert len(load_task(stsb_data_dir, "STSBenchmark", ("dev",)).datasets["dev"]) == len(stsb_rows())


@pytest.mark.parametrize(
    ("score", "message"),
    [("99", "outside the gold scale 0–5"), ("-42", "outside the gold scale 0–5"), ("nan", "outside"),
     ("inf", "outside")],
)  # fmt: skip
def test_gold_scores_outside_the_scale_name_file_and_line(tmp_path, score, message):
    folder = tmp_path / "stsb" / "senteval"
    folder.mkdir(parents=True)
    rows = ["g\tf\t2012\t1\t3.0\ta b\tc d", f"g\tf\t2012\t2\t{score}\te f\tg h"]
    (folder / "sts-dev.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(STSDataError, match=f"sts-dev.csv:2: score '{score}' is {message}"):
        STSEvaluator(tmp_path, "stsb-dev")


def test_sick_scores_are_checked_against_its_own_scale(tmp_path):
    (tmp_path / "SICK").mkdir()
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    (tmp_path / "SICK" / "SICK_test_annotated.txt").write_text(header + "1\ta\tb\t0.5\tNEUTRAL\n")
    with pytest.raises(
        STSDataError, match=r"SICK_test_annotated.txt:2: score '0.5' is outside the gold scale 1–5"
    ):
        STSEvaluator(tmp_path, "SICK-R")


def test_an_empty_split_is_one_clear_error_when_the_evaluator_is_built(tmp_path):
    folder = tmp_path / "stsb" / "senteval"
    folder.mkdir(parents=True)
    (folder / "sts-dev.csv").write_text("")
    with pytest.raises(STSDataError, match=r"sts-dev.csv: no scored sentence pairs \(the file is empty\)"):
        STSEvaluator(tmp_path, "stsb-dev")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([(3.0, "a man", "a dog")], "one scored pair; a correlation needs at least two"),
        ([(3.0, "a man", "a dog"), (3.0, "a cat", "a car")], "every gold score is 3; a correlation"),
    ],
)
def test_a_split_no_correlation_can_be_computed_on_is_refused(tmp_path, rows, message):
    write_stsb(tmp_path / "stsb" / "senteval", "dev", rows)
    with pytest.raises(STSDataError, match=r"sts-dev\.csv: " + message):
        STSEvaluator(tmp_path, "stsb-dev")


def test_one_stsb_split_alone_is_its_own_table_row(stsb_data_dir):
    """stsb-train with no test split once raised KeyError 'test' while printing its table."""
    evaluator = STSEvaluator(stsb_data_dir, "stsb-train")

    class Hashed:
        def encode(self, sentences):
            return np.stack([np.random.default_rng(list(s.encode())).normal(size=4) for s in sentences])

    metrics = evaluator(Hashed())
    table = evaluator.format(metrics)
    row = table.splitlines()[1].split()
    assert row[0] == "STS-B" and row[1] == f"{metrics['stsb_train_spearman']:.2f}"
    assert row[2] == "12" and row[3:] == ["train", "split"]
