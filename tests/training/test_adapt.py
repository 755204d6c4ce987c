"""sentcl adapt: a model trained on a domain's corpus, chosen on one split's judgements, reported on another's
with paired intervals; bad requests refused in one line before anything is trained or written."""

import json
import random
import shutil

import pytest
import torch

from sentcl.cli.main import main
from sentcl.config import ConfigError
from sentcl.training.adapt import METHODS, AdaptRequest, adapt, recipe

from ..conftest import SENTENCES


@pytest.fixture
def domain(tmp_path):
    """A BEIR folder: 30 documents of the tiny vocabulary, 12 queries, train and test judgements."""
    rng = random.Random(0)
    folder = tmp_path / "domain"
    (folder / "qrels").mkdir(parents=True)
    docs = [
        {
            "_id": f"d{i}",
            "title": "",
            "text": " ".join(s.capitalize() + "." for s in rng.sample(SENTENCES, 3)),
        }
        for i in range(30)
    ]
    queries = [{"_id": f"q{i}", "text": SENTENCES[i % len(SENTENCES)]} for i in range(12)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    for split, rows in (("train", range(0, 6)), ("test", range(6, 12))):
        lines = ["query-id\tcorpus-id\tscore"]
        for q in rows:
            relevant = [d["_id"] for d in docs if queries[q]["text"] in d["text"].lower()] or ["d0"]
            lines += [f"q{q}\t{d}\t1" for d in relevant]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def request(tiny_model_dir, domain, output, **changes) -> AdaptRequest:
    base = dict(
        model=str(tiny_model_dir), corpus=str(domain), output=str(output), steps=4, batch_size=4,
        eval_steps=2, choose=str(domain / "qrels" / "train.tsv"), report=str(domain / "qrels" / "test.tsv"),
        pooler="avg", learning_rate=1e-3,
    )  # fmt: skip
    return AdaptRequest(**(base | changes))


def test_adapt_chooses_on_train_and_reports_on_test(tmp_path, tiny_model_dir, domain):
    result = adapt(request(tiny_model_dir, domain, tmp_path / "run"))
    assert result.steps == 4 and (tmp_path / "run" / "model").is_dir()
    assert result.chosen_step in (0, 2, 4)
    report = json.loads((tmp_path / "run" / "adapt.json").read_text())
    assert report["queries"] == 6 and set(report["metrics"]) == {"start", "adapted"}
    assert report["task"] == "domain"
    assert all("threads" in where for where in report["measured_on"].values())  # where it was measured
    assert report["metrics"]["start"] != report["metrics"]["adapted"] or result.chosen_step == 0
    for key in ("domain_ndcg@10", "domain_hybrid_ndcg@10", "adapted_vs_bm25"):
        d = report["differences"][key]
        assert d["low"] <= d["delta"] <= d["high"]
    table = (tmp_path / "run" / "adapt.md").read_text()
    assert (
        "| start |" in table
        and "| adapted |" in table
        and "| BM25 |" in table
        and "paired bootstrap" in table
    )
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    chosen_on = {key for r in metrics for key in r.get("eval", {})}
    assert "domain-train_ndcg@10" in chosen_on  # the choice: train.tsv (the folder and split name it)
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "qrels/train.tsv" in config and "qrels/test.tsv" not in config  # never chosen on test


def test_the_command_and_its_documents(tmp_path, tiny_model_dir, domain, capsys):
    code = main(["adapt", str(tiny_model_dir), "--corpus", str(domain / "corpus.jsonl"), "--output",
                 str(tmp_path / "run"), "--method", "cropping", "--steps", "2", "--batch-size", "4",
                 "--pooler", "avg"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "2 steps of cropping" in out and "kept step" not in out  # nothing to choose on: the last step
    assert (
        recipe(request(tiny_model_dir, domain, tmp_path, method="cropping"))["data"]["corpus_unit"]
        == "document"
    )


def test_overwrite_keeps_a_users_file_in_the_model_folder(tmp_path, tiny_model_dir, domain):
    """Issue 70 item 2: `adapt --overwrite` deleted OUTPUT/model/mine.txt without a word."""
    out = tmp_path / "o"
    (out / "model").mkdir(parents=True)
    (out / "model" / "mine.txt").write_text("mine")
    argv = ["adapt", str(tiny_model_dir), "--corpus", str(domain / "corpus.jsonl"), "--output", str(out),
            "--steps", "2", "--batch-size", "4", "--pooler", "avg", "--overwrite"]  # fmt: skip
    assert main(argv) == 0 and main(argv) == 0  # a second --overwrite run replaces only its own model
    assert (out / "model" / "mine.txt").read_text() == "mine" and (out / "model" / "config.json").is_file()


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_from_its_recipe(tmp_path, tiny_model_dir, domain, method):
    judged = {"train": str(domain / "qrels" / "train.tsv")} if method == "supervised" else {}
    result = adapt(request(tiny_model_dir, domain, tmp_path / "run", method=method, choose=None, report=None,
                           steps=1, **judged))  # fmt: skip
    assert result.steps == 1 and (tmp_path / "run" / "model").is_dir()


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"method": "bert"}, r"--method: 'bert' is not one of tsdae"),
        (
            {"report": "TRAIN"},
            r"--report .*: the judgements the checkpoint is chosen on cannot also report it",
        ),
        ({"report": "stsb-dev"}, r"--report stsb-dev: judgements are a BEIR folder's qrels file"),
        ({"choose": "MISSING"}, r"qrels/dev\.tsv: no such split; .*qrels holds: test, train"),
    ],
)
def test_bad_requests_are_one_line_and_write_nothing(tmp_path, tiny_model_dir, domain, changes, message):
    changes = {
        k: {"TRAIN": str(domain / "qrels" / "train.tsv"), "MISSING": str(domain / "qrels" / "dev.tsv")}.get(
            v, v
        )
        for k, v in changes.items()
    }
    with pytest.raises((ConfigError, Exception), match=message) as error:
        adapt(request(tiny_model_dir, domain, tmp_path / "run", **changes))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_a_corpus_without_text_is_refused_before_anything_is_written(tmp_path, tiny_model_dir, domain):
    empty = tmp_path / "empty"
    shutil.copytree(domain, empty)
    (empty / "corpus.jsonl").write_text("")
    with pytest.raises(Exception, match=r"corpus\.jsonl:1: the corpus has no documents"):
        adapt(request(tiny_model_dir, empty, tmp_path / "run", choose=None, report=None))
    assert not (tmp_path / "run").exists()


def test_a_models_report_is_measured_once(tmp_path, tiny_model_dir, domain, monkeypatch):
    from sentcl.training import adapt as adapt_module

    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    report = str(domain / "qrels" / "test.tsv")
    first = adapt_module.report_scores(report, str(tiny_model_dir), "avg")
    assert len(first["per_query"]["domain_ndcg@10"]) == first["queries"] == 6

    def never(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(adapt_module, "build_evaluator", never)
    assert adapt_module.report_scores(report, str(tiny_model_dir), "avg") == first  # read back
    with pytest.raises(AssertionError, match="measured again"):  # another pooler is another model
        adapt_module.report_scores(report, str(tiny_model_dir), "cls_before_pooler")
    with pytest.raises(AssertionError, match="measured again"):  # another precision, another report
        adapt_module.report_scores(report, str(tiny_model_dir), "avg", "bf16")
    encoder = adapt_module.load_encoder(str(tiny_model_dir), pooler="avg")
    keys = {adapt_module.report_key(encoder, report, "fp32", torch.device(kind)) for kind in ("cpu", "cuda")}
    assert len(keys) == 2  # a GPU's report is not a CPU's


def test_the_report_says_its_precision_and_a_row_its_length(tmp_path, tiny_model_dir, domain, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    made = request(tiny_model_dir, domain, tmp_path / "run", report_dtype="bf16", max_length=12, steps=2)
    result = adapt(made)
    assert json.loads((tmp_path / "run" / "adapt.json").read_text())["dtype"] == {"start": "bf16",
                                                                              "adapted": "bf16"}  # fmt: skip
    assert "encoded in bf16" in result.table.splitlines()[0]
    assert "max_length: 12" in (tmp_path / "run" / "config.yaml").read_text()  # the method's 64 cut
    with pytest.raises(ConfigError, match="--report-dtype: 'int8' is not one of fp32, bf16, auto"):
        adapt(request(tiny_model_dir, domain, tmp_path / "other", report_dtype="int8"))
    assert not (tmp_path / "other").exists()


def test_an_interrupted_adapt_resumes_to_the_same_model(tmp_path, tiny_model_dir, domain, monkeypatch):
    import torch

    from sentcl.model import SentenceEncoder

    from .crash import crash_after_a_checkpoint

    changes = dict(method="tsdae", choose=None, report=None, steps=4, eval_steps=2)
    adapt(request(tiny_model_dir, domain, tmp_path / "straight", **changes))
    with crash_after_a_checkpoint(monkeypatch):
        adapt(request(tiny_model_dir, domain, tmp_path / "half", **changes))
    adapt(request(tiny_model_dir, domain, tmp_path / "half", resume=True, **changes))
    a = SentenceEncoder.load(str(tmp_path / "straight" / "model")).state_dict()
    b = SentenceEncoder.load(str(tmp_path / "half" / "model")).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def losses(run):  # the loss lines: the last one averages steps 1-4 in both, not only the resumed ones
        lines = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [(x["step"], x["loss"], x["tokens"]) for x in lines if "loss" in x]

    assert losses("half") == losses("straight") and losses("half")


def test_the_starts_choice_metric_is_measured_once_per_model_and_task(
    tmp_path, tiny_model_dir, domain, monkeypatch
):
    import json as json_module

    from sentcl.evaluation.local import RetrievalFolderEvaluator

    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    calls = []
    real = RetrievalFolderEvaluator.__call__

    def counted(self, embedder):
        calls.append(self.names[0])
        return real(self, embedder)

    monkeypatch.setattr(RetrievalFolderEvaluator, "__call__", counted)
    changes = dict(steps=2, eval_steps=2, report=None)
    adapt(request(tiny_model_dir, domain, tmp_path / "a", **changes))
    assert len(calls) == 2  # the start, then step 2
    adapt(request(tiny_model_dir, domain, tmp_path / "b", seed=7, **changes))
    assert len(calls) == 3  # step 2 only: the start's read back
    starts = [json_module.loads((tmp_path / run / "metrics.jsonl").read_text().splitlines()[0])["eval"]
              for run in ("a", "b")]  # fmt: skip
    assert starts[0] == starts[1]
    adapt(request(tiny_model_dir, domain, tmp_path / "c", pooler="cls_before_pooler", **changes))
    assert len(calls) == 5  # another model (its pooler): measured


# ------------------------------------------------------------------ the supervised stage: your judgements
def supervised(tiny_model_dir, domain, output, **changes) -> AdaptRequest:
    base = dict(method="supervised", train=str(domain / "qrels" / "train.tsv"), choose=None, steps=None,
                eval_steps=1, learning_rate=1e-3)  # fmt: skip
    return request(tiny_model_dir, domain, output, **(base | changes))


def test_the_supervised_stage_fits_on_some_queries_and_chooses_on_the_others(
    tmp_path, tiny_model_dir, domain, monkeypatch
):
    """(query, relevant document, mined negative) rows of the fit queries, three epochs, the checkpoint
    chosen at each epoch's end on the held-out training queries, the report on test."""
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    result = adapt(supervised(tiny_model_dir, domain, tmp_path / "run", eval_steps=None))  # the defaults
    (data,) = (tmp_path / "cache" / "adapt-judgements").iterdir()
    (rows_folder,) = data.glob("fit-*")
    rows = [json.loads(line) for line in (rows_folder / "train.jsonl").read_text().splitlines()]
    chosen_on = {line.split("\t")[0] for line in (data / "qrels" / "choose.tsv").read_text().splitlines()[1:]}
    queries = {json.loads(q)["text"]: json.loads(q)["_id"] for q in (domain / "queries.jsonl").open()}
    fit = {queries[row["anchor"]] for row in rows}
    assert len(chosen_on) == 1 and len(fit) == 5 and not fit & chosen_on  # 6 queries: 1 chooses, 5 fit
    assert all(
        set(row) == {"anchor", "positive", "negative"} and row["negative"] != row["positive"] for row in rows
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    epoch = -(-len(rows) // 4)  # the rows in batches of 4
    assert result.steps == summary["steps"] == 3 * epoch
    chosen_at = [
        row["step"]
        for row in map(json.loads, (tmp_path / "run" / "metrics.jsonl").open())
        if isinstance(row.get("eval"), dict)
    ]
    assert chosen_at == [0, epoch, 2 * epoch, 3 * epoch]  # the start, then each epoch's end
    assert "adapted − start, nDCG@10" in result.table
    again = adapt(supervised(tiny_model_dir, domain, tmp_path / "again"))  # the rows are made once
    assert len(list((tmp_path / "cache" / "adapt-judgements").iterdir())) == 1 and again.steps == result.steps
    in_batch = adapt(supervised(tiny_model_dir, domain, tmp_path / "in-batch", hard_negatives=0))
    assert in_batch.steps == result.steps
    pairs = next(d for d in (tmp_path / "cache" / "adapt-judgements").iterdir() if d != data)
    lines = next(pairs.glob("fit-*/train.jsonl")).read_text().splitlines()
    assert all(set(json.loads(line)) == {"anchor", "positive"} for line in lines)
    smaller = adapt(supervised(tiny_model_dir, domain, tmp_path / "four", fit_queries=4))  # mined once
    assert len(list(data.glob("fit-*"))) == 2 and smaller.steps <= result.steps


def test_fit_subsets_are_nested_and_seeded():
    from sentcl.training.judgements import split_queries

    ids = [f"q{i}" for i in range(50)]
    fit, choose = split_queries(ids, 0.2, seed=7)
    assert len(choose) == 10 and sorted(fit + choose) == sorted(ids)
    assert split_queries(list(reversed(ids)), 0.2, seed=7) == (
        fit,
        choose,
    )  # the file's order does not matter
    assert split_queries(ids, 0.2, seed=8)[1] != choose


def qrels(domain, name: str, lines: list[str]) -> str:
    path = domain / "qrels" / name
    path.write_text("\n".join(["query-id\tcorpus-id\tscore", *lines]) + "\n")
    return str(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("shared", r"--report .*report.tsv: query 'q0' is also in --train .*; judgements that train a model "
                   r"cannot report it"),
        ("unknown-document", r"--train .*bad.tsv: .*bad.tsv:2: corpus-id 'nope' is not in .*corpus.jsonl"),
        ("unknown-query", r"--train .*bad.tsv: .*bad.tsv:2: query-id 'q99' is not in .*queries.jsonl"),
        ("nothing-relevant", r"--train .*bad.tsv: .*bad.tsv: no query has a relevant document"),
        ("one-batch", r"--train .*train.tsv: 5 queries to fit on, fewer than one batch of 8"),
        ("no-train", r"--train: the supervised stage trains on judgements"),
        ("train-without-supervised", r"--train .*: judgements train the supervised stage"),
    ],
)  # fmt: skip
def test_bad_judgements_are_one_line_and_write_nothing(tmp_path, tiny_model_dir, domain, case, message):
    """Issue 71 item 2: each refusal before anything is trained or written."""
    out = tmp_path / "run"
    changes = {
        "shared": lambda: {"report": qrels(domain, "report.tsv", ["q0\td0\t1", "q7\td1\t1"])},
        "unknown-document": lambda: {"train": qrels(domain, "bad.tsv", ["q0\tnope\t1"])},
        "unknown-query": lambda: {"train": qrels(domain, "bad.tsv", ["q99\td0\t1"])},
        "nothing-relevant": lambda: {"train": qrels(domain, "bad.tsv", ["q0\td0\t0", "q1\td1\t0"])},
        "one-batch": lambda: {"batch_size": 8},
        "no-train": lambda: {"train": None},
        "train-without-supervised": lambda: {"method": "simcse"},
    }[case]()
    with pytest.raises(ConfigError, match=message) as refused:
        adapt(supervised(tiny_model_dir, domain, out, **changes))
    assert "\n" not in str(refused.value) and not out.exists()


def test_label_free_then_supervised_resumes_and_keeps_both_stages(
    tmp_path, tiny_model_dir, domain, monkeypatch
):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "two"
    argv = ["adapt", str(tiny_model_dir), "--corpus", str(domain), "--output", str(out), "--method",
            "cropping", "--then", "supervised", "--train", str(domain / "qrels" / "train.tsv"),
            "--steps", "2", "--batch-size", "4", "--eval-steps", "1", "--pooler", "avg"]  # fmt: skip
    assert main(argv) == 0
    assert (out / "first-stage" / "model" / "config.json").is_file() and (
        out / "model" / "config.json"
    ).is_file()
    first = json.loads((out / "first-stage" / "summary.json").read_text())
    assert first["steps"] == 2
    recipe_of = (out / "config.yaml").read_text()
    assert "first-stage/model" in recipe_of and "train.jsonl" in recipe_of
    assert main([*argv, "--resume"]) == 0  # both finished: read back, nothing retrained from step 0
    assert json.loads((out / "first-stage" / "summary.json").read_text()) == first
