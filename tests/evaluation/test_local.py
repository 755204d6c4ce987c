"""The user's own pair files and BEIR folders: metrics against independent implementations (pytrec_eval for
retrieval, sklearn on every threshold for the binary pairs), bad files refused with file:line, the CLI with no
shared data, and checkpoint selection on a pair file."""

import json
import math
from typing import ClassVar

import numpy as np
import pytest
import pytrec_eval
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score

from sentcl.evaluation import LocalTaskError, TaskSpecError, build_evaluator
from sentcl.evaluation.local import best_threshold_metrics
from sentcl.evaluation.local_files import read_pairs, read_retrieval
from sentcl.evaluation.tasks import needs_data_dir, parse
from tests.conftest import SENTENCES


class Hashed:
    """A fixed random vector per text: the same text always has the same vector."""

    def __init__(self, dim=8, seed=0):
        self.dim, self.seed, self.calls = dim, seed, 0

    def vector(self, text):
        rng = np.random.default_rng([self.seed, *text.encode()])
        return rng.normal(size=self.dim)

    def encode(self, sentences):
        self.calls += 1
        return np.stack([self.vector(s) for s in sentences])


def cosine(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ------------------------------------------------------------------------------------------------ pairs
def write_pairs(path, rows, header=("sentence1", "sentence2", "score")):
    delimiter = "\t" if path.suffix == ".tsv" else ","
    lines = [delimiter.join(header)] + [delimiter.join(str(c) for c in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def scored_rows(n=30, seed=1):
    rng = np.random.default_rng(seed)
    return [(f"first {i} {SENTENCES[i % len(SENTENCES)]}", f"second {i}", round(float(rng.uniform(0, 5)), 2))
            for i in range(n)]  # fmt: skip


def test_scored_pairs_are_spearman_and_pearson_of_the_cosine(tmp_path):
    rows = scored_rows()
    path = write_pairs(tmp_path / "mine.tsv", rows)
    evaluator = build_evaluator(tmp_path, str(path))
    assert evaluator.primary == "mine_spearman"
    embedder = Hashed()
    metrics = evaluator(embedder)
    cosines = [cosine(embedder.vector(a), embedder.vector(b)) for a, b, _ in rows]
    gold = [score for *_, score in rows]
    assert metrics["mine_spearman"] == pytest.approx(100 * spearmanr(cosines, gold)[0], abs=1e-9)
    assert metrics["mine_pearson"] == pytest.approx(100 * pearsonr(cosines, gold)[0], abs=1e-9)
    assert "mine (30 pairs, scores): spearman" in evaluator.format(metrics)
    assert evaluator.results()["mine"]["metrics"]["spearman"] == metrics["mine_spearman"]


def test_binary_pairs_at_the_best_threshold_against_every_threshold():
    rng = np.random.default_rng(3)
    for trial in range(20):
        n = int(rng.integers(2, 40))
        labels = rng.integers(0, 2, size=n).astype(float)
        labels[:2] = [0, 1]
        scores = np.round(rng.normal(size=n), 1 if trial % 2 else 6)  # with and without ties
        found = best_threshold_metrics(scores, labels)
        cuts = np.unique(scores)
        candidates = [cuts[0] - 1.0, *((cuts[:-1] + cuts[1:]) / 2), cuts[-1], cuts[-1] + 1.0]
        accuracy = max(accuracy_score(labels, scores >= t) for t in candidates)
        f1 = max(f1_score(labels, scores >= t, zero_division=0) for t in candidates)
        assert found["accuracy"] == pytest.approx(100 * accuracy)
        assert found["f1"] == pytest.approx(100 * f1)
        # the reported thresholds give the reported values
        assert 100 * accuracy_score(labels, scores >= found["accuracy_threshold"]) == pytest.approx(
            found["accuracy"]
        )
        assert 100 * f1_score(labels, scores >= found["f1_threshold"]) == pytest.approx(found["f1"])
        if trial % 2 == 0:  # no ties: AP by its definition, the mean precision at each positive's rank
            order = np.argsort(-scores)
            hits = labels[order] == 1
            precision = np.cumsum(hits) / np.arange(1, n + 1)
            assert found["ap"] == pytest.approx(100 * precision[hits].mean())


def test_binary_pair_file_in_json_lines(tmp_path):
    path = tmp_path / "dupes.jsonl"
    rows = [{"sent0": f"a {i}", "sent1": f"b {i}", "label": i % 2, "source": "x"} for i in range(12)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    evaluator = build_evaluator(tmp_path, str(path))
    assert evaluator.primary == "dupes_ap"
    metrics = evaluator(Hashed())
    assert set(metrics) == {
        f"dupes_{k}" for k in ("accuracy", "accuracy_threshold", "f1", "f1_threshold", "ap")
    }


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.tsv", "sentence1\tsentence2\tlabel\nx\ty\t1\nx\tz\t2\n", r"a\.tsv:3: label '2' is not 0 or 1"),
        ("b.tsv", "sentence1\tsentence2\tscore\nx\ty\t1\nx\t \t2\n", r"b\.tsv:3: 'sentence2' is empty"),
        ("c.tsv", "sentence1\tsentence2\tscore\nx\ty\tfour\n", r"c\.tsv:2: score 'four' is not a number"),
        ("d.tsv", "sentence1\tsentence2\tscore\nx\ty\tnan\nx\tz\t1\n",
         r"d\.tsv:2: score 'nan' is not a finite"),
        ("e.tsv", "premise\thypothesis\tscore\nx\ty\t1\n", r"e\.tsv:2: columns \[.*\]; a pair file names"),
        ("f.tsv", "sentence1\tsentence2\tscore\nx\ty\t1\nx\tz\n", r"f\.tsv:3: 2 field\(s\), expected 3"),
        ("g.tsv", "sentence1\tsentence2\tscore\nx\ty\t3\nx\tz\t3\n", r"g\.tsv: every score is 3"),
        ("h.tsv", "sentence1\tsentence2\tlabel\nx\ty\t1\n", r"h\.tsv: one pair"),
        ("i.jsonl", '{"sentence1": "x", "sentence2": "y", "score": 1}\n{"sentence1": "x"}\n',
         r"i\.jsonl:2: no 'sentence2', which the rows above have"),
        ("j.jsonl", '{"sentence1": "x", "sentence2": "y", "score": true}\n',
         r"j\.jsonl:1: score True is not"),
        ("k.csv", "sentence1,sentence2,score\n\"x,y\n", r"k\.csv:\d+: malformed ','-separated row"),
        ("l.tsv", "", r"l\.tsv:1: the file is empty"),
    ],
)  # fmt: skip
def test_a_bad_pair_file_is_one_error_naming_the_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(LocalTaskError, match=message):
        build_evaluator(tmp_path, str(path))


def test_undecodable_byte_names_its_line(tmp_path):
    path = tmp_path / "bytes.tsv"
    path.write_bytes(b"sentence1\tsentence2\tscore\nx\ty\t1\nx\t\xff\t2\n")
    with pytest.raises(LocalTaskError, match=r"bytes\.tsv:3: undecodable byte"):
        read_pairs(path)


def test_paths_and_names_resolve_to_their_families(tmp_path):
    pairs = write_pairs(tmp_path / "p.csv", scored_rows(4))
    assert [family for family, _ in parse(f"stsb-dev,{pairs}")] == ["sts", "pairs"]
    assert parse(f"{pairs},{pairs}") == [("pairs", [str(pairs)])]
    assert not needs_data_dir(str(pairs)) and needs_data_dir(f"stsb-dev,{pairs}")
    with pytest.raises(TaskSpecError, match=r"unknown evaluation task 'nope\.tsv'.*no such file or folder"):
        parse("nope.tsv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskSpecError, match=r"empty: neither a pair file .* nor a retrieval folder"):
        parse(str(tmp_path / "empty"))


# ------------------------------------------------------------------------------------------------ BEIR
def write_beir(folder, n_docs=260, n_queries=40, seed=0, split="test"):
    """A corpus with titles, queries (one sharing its id with a document, one with only grade-0
    judgments, one never judged) and graded qrels (0, 1, 2)."""
    rng = np.random.default_rng(seed)
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"title {i}" if i % 3 else "", "text": f"document number {i}"}
            for i in range(n_docs)]  # fmt: skip
    queries = [{"_id": f"q{i}", "text": f"query number {i}"} for i in range(n_queries)]
    queries[0]["_id"] = "d5"  # ignore_identical_ids: d5 is never ranked for this query
    queries.append({"_id": "unjudged", "text": "nobody judged me"})
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    qrels = ["query-id\tcorpus-id\tscore"]
    for q in queries[:n_queries]:
        grade_zero_only = q["_id"] == "q1"
        for doc in rng.choice(n_docs, size=int(rng.integers(1, 8)), replace=False):
            grade = 0 if grade_zero_only else int(rng.integers(0, 3))
            qrels.append(f"{q['_id']}\td{doc}\t{grade}")
        if not grade_zero_only:
            qrels.append(f"{q['_id']}\td{int(rng.integers(n_docs))}\t1")
    qrels.append("d5\td5\t2")  # judged relevant to itself: excluded from the ranking, still relevant
    (folder / "qrels" / f"{split}.tsv").write_text("\n".join(qrels) + "\n")
    return folder


def test_beir_folder_metrics_against_pytrec_eval(tmp_path):
    folder = write_beir(tmp_path / "mybeir")
    evaluator = build_evaluator(tmp_path, str(folder))
    assert evaluator.primary == "mybeir_ndcg@10"
    embedder = Hashed(dim=6)
    metrics = evaluator(embedder)

    # the same data read independently: documents as BEIR joins them, every query with a relevant document
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    queries = {
        q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())
    }
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, grade = line.split("\t")
        qrels.setdefault(query, {})[doc] = int(grade)
    qrels = {q: judged for q, judged in qrels.items() if any(g > 0 for g in judged.values())}
    assert "q1" not in qrels and len(qrels) == 39 == len(evaluator.sets[0].queries)
    doc_vectors = {d["_id"]: embedder.vector(f"{d['title']} {d['text']}".strip()) for d in docs}
    run, run10 = {}, {}
    for query in qrels:
        vector = embedder.vector(queries[query])
        scores = {d: cosine(vector, v) for d, v in doc_vectors.items() if d != query}
        ranked = sorted(scores, key=lambda d: -scores[d])
        run[query] = {d: scores[d] for d in ranked[:100]}
        run10[query] = {d: scores[d] for d in ranked[:10]}
    measures = {"ndcg_cut.10", "recall.1,10,100", "map_cut.100"}
    official = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    reciprocal = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run10)

    def mean(measure, table=official):
        return 100 * float(np.mean([table[q][measure] for q in qrels]))

    assert metrics["mybeir_ndcg@10"] == pytest.approx(mean("ndcg_cut_10"), abs=1e-6)
    assert metrics["mybeir_mrr@10"] == pytest.approx(mean("recip_rank", reciprocal), abs=1e-6)
    for k in (1, 10, 100):
        assert metrics[f"mybeir_recall@{k}"] == pytest.approx(mean(f"recall_{k}"), abs=1e-6)
    assert metrics["mybeir_map@100"] == pytest.approx(mean("map_cut_100"), abs=1e-6)
    assert 0 < metrics["mybeir_ndcg@10"] < 100
    assert "mybeir (39 queries, 260 documents): ndcg@10" in evaluator.format(metrics)


def test_a_perfect_embedder_scores_100_and_blocks_change_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    (folder / "qrels").mkdir(parents=True)
    docs = [f"topic {i} text" for i in range(30)]
    (folder / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": str(i), "text": d}) for i, d in enumerate(docs))
    )
    (folder / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"q{i}", "text": f"q {i}"}) for i in range(30))
    )
    (folder / "qrels" / "dev.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\t{i}\t1\n" for i in range(30))
    )

    class Perfect:
        def encode(self, sentences):
            out = np.zeros((len(sentences), 31))
            for row, text in enumerate(sentences):
                out[row, int(text.split()[1])] = 1.0
                out[row, 30] = 0.01 * row  # not all equal
            return out

    evaluator = build_evaluator(tmp_path, str(folder))  # the only split, dev
    assert evaluator.names == ["tiny"] and evaluator.sets[0].qrels_path.name == "dev.tsv"
    metrics = evaluator(Perfect())
    assert all(value == pytest.approx(100) for value in metrics.values())
    import sentcl.evaluation.local as local

    reference = evaluator(Hashed())
    original = local.rank
    monkeypatch.setattr(local, "rank", lambda q, c, depth, exclude: original(q, c, depth, exclude, block=2))
    assert evaluator(Hashed()) == reference  # blocks of 2 queries × 32 documents rank the same


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / "corpus.jsonl").write_text('{"_id": "d0", "text": "x"}\n{"_id": "d0", "text": "y"}'),
         r"corpus\.jsonl:2: _id 'd0' again \(first on line 1\)"),
        (lambda f: (f / "corpus.jsonl").write_text('{"_id": "d0", "text": "x"}\n{"text": "y"}\n'),
         r"corpus\.jsonl:2: no '_id'"),
        (lambda f: (f / "corpus.jsonl").write_text('{"_id": "d0", "text": "x"}\n{"_id": "d1", "text": " "}'),
         r"corpus\.jsonl:2: _id 'd1' has no text"),
        (lambda f: (f / "queries.jsonl").write_text('{"_id": "q0", "text": ["x"]}\n'),
         r"queries\.jsonl:1: 'text' is list, not text"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq2\tnope\t1\n"),
         r"test\.tsv:2: corpus-id 'nope' is not in .*corpus\.jsonl"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq9x\td1\t1\n"),
         r"test\.tsv:2: query-id 'q9x' is not in .*queries\.jsonl"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td1\t-1\n"),
         r"test\.tsv:2: score '-1' is negative"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td1\t0\n"),
         r"test\.tsv: no query has a relevant document"),
        (lambda f: (f / "qrels" / "test.tsv").rename(f / "qrels" / "a.tsv") and (f / "qrels/b.tsv").touch(),
         r"qrels: no test\.tsv \(found: a\.tsv, b\.tsv\)"),
        (lambda f: (f / "corpus.jsonl").unlink(), r"corpus\.jsonl: no such file"),
    ],
)  # fmt: skip
def test_a_bad_retrieval_folder_is_one_error_naming_the_line(tmp_path, damage, message):
    folder = write_beir(tmp_path / "b", n_docs=20, n_queries=5)
    damage(folder)
    with pytest.raises(LocalTaskError, match=message):
        read_retrieval(folder)


# ------------------------------------------------------------------------------------------ from the CLI
def test_evaluate_own_files_from_the_cli_without_shared_data(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from sentcl.cli.main import main

    monkeypatch.delenv("SENTCL_DATA", raising=False)
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "no-cache"))
    pairs = write_pairs(tmp_path / "pairs.tsv", scored_rows(12))
    folder = write_beir(tmp_path / "corpus-x", n_docs=40, n_queries=6)
    out = tmp_path / "result.json"
    assert main(["evaluate", str(tiny_model_dir), "--tasks", f"{pairs},{folder}", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "pairs (12 pairs, scores): spearman" in printed and "corpus-x (5 queries, 40 documents)" in printed
    saved = json.loads(out.read_text())
    metrics = saved.get("metrics", saved)
    assert math.isfinite(metrics["pairs_spearman"]) and math.isfinite(metrics["corpus-x_ndcg@10"])
    bad = write_pairs(tmp_path / "bad.tsv", [("a", "b", 1), ("a", "", 2)])
    assert main(["evaluate", str(tiny_model_dir), "--tasks", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.tsv:3: 'sentence2' is empty" in err and "Traceback" not in err


def test_training_selects_checkpoints_on_a_pair_file(tmp_path, tiny_model_dir, monkeypatch):
    from sentcl.training import recipe_from_dict, train

    monkeypatch.delenv("SENTCL_DATA", raising=False)
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "no-cache"))
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n")
    pairs = write_pairs(tmp_path / "own.csv", [(a, b, s) for a, b, s in scored_rows(16)])
    result = train(recipe_from_dict({
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
        "data": {"train_file": str(corpus), "max_length": 16},
        "training": {"output_dir": str(tmp_path / "run"), "batch_size": 4, "max_steps": 2, "eval_steps": 1,
                     "eval_task": str(pairs)},
    }))  # fmt: skip
    assert result.primary_metric == "own_spearman"
    assert set(result.best_metrics) >= {"own_spearman", "own_pearson"}


def test_retrieval_encodes_queries_and_documents_with_the_models_prompts(tmp_path):
    folder = write_beir(tmp_path / "p", n_docs=20, n_queries=5)

    class WithPrompts(Hashed):
        prompts: ClassVar = {"query": "query: ", "document": "passage: "}

        def encode(self, sentences):
            self.seen = [*getattr(self, "seen", []), *sentences]
            return super().encode(sentences)

    embedder = WithPrompts()
    evaluator = build_evaluator(tmp_path, str(folder))
    evaluator(embedder)
    documents, queries = embedder.seen[:20], embedder.seen[20:]
    assert all(d.startswith("passage: ") for d in documents) and all(q.startswith("query: ") for q in queries)
    assert len(queries) == len(evaluator.sets[0].queries)
