"""The lance index (on disk, IVF-PQ with exact rescoring): built from encoded shards without Ray, it
returns exact search's top-10; bad folders and mismatched models are one line."""

import json

import numpy as np
import pytest

from sentcl.cli.main import main
from sentcl.data.shards import plan_shards
from sentcl.search import IndexFolderError, LanceIndex, SentenceIndex, load_index

from ..conftest import SENTENCES

pytest.importorskip("lancedb")
pytest.importorskip("ray")  # ShardWriter's module needs nothing of ray to write a shard, but lives with it


def corpus_lines(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [f"{SENTENCES[rng.integers(len(SENTENCES))]} {rng.integers(10_000)} {i}" for i in range(n)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, tiny_model_dir):
    """What sentcl encode --engine ray writes, written here shard by shard by its writer (no cluster)."""
    from sentcl.integrations.ray_data import RayEncodeJob, ShardWriter, prepare_folder

    folder = tmp_path_factory.mktemp("encoded")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines(600)) + "\n")
    out = folder / "shards"
    job = RayEncodeJob(str(tiny_model_dir), [str(corpus)], str(out), dtype="fp32", pooler="avg")
    planned = plan_shards(job.inputs, 250)
    prepare_folder(out, {"settings": job.settings(), "shards": [s.as_dict() for s in planned]}, False)
    writer = ShardWriter(str(out), {"id": "id", "text": "text"}, model=str(tiny_model_dir), dtype="fp32",
                         pooler="avg")  # fmt: skip
    for shard in planned:
        writer.write(shard)
    return out, writer


def test_an_ivf_pq_index_from_shards_returns_exact_searchs_top_10(shards, tmp_path, capsys):
    out, writer = shards
    index_dir = tmp_path / "lance"
    argv = ["index", "--backend", "lance", "--shards", str(out), "--out", str(index_dir), "--kind", "ivf_pq",
            "--partitions", "4", "--nprobes", "4", "--refine-factor", "60"]  # fmt: skip
    assert main(argv) == 0
    index = load_index(index_dir)
    assert isinstance(index, LanceIndex) and index.kind == "ivf_pq" and len(index) == 600
    assert index.model == writer.embedder.encoder.source
    texts = corpus_lines(600)
    vectors = writer.vectors(texts)
    exact = SentenceIndex.build(vectors, texts, kind="flat")
    queries = writer.vectors(["a man plays the ball", "the children eat", texts[17]])
    for got, want in zip(index.search(queries, top_k=10), exact.search(queries, top_k=10), strict=True):
        assert [h.id for h in got] == [h.id for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
        assert [h.key for h in got] == [f"corpus.txt:{h.id + 1}" for h in want]
    assert main(["search", str(index_dir), texts[17], "-k", "1"]) == 0
    assert f"1.0000  corpus.txt:18  {texts[17]}" in capsys.readouterr().out  # a shard row's id, then its text


def test_a_flat_lance_index_of_a_corpus_equals_the_faiss_one(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines(40)) + "\n")
    common = ["--dtype", "fp32", "--pooler", "avg"]
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "f"), *common]) == 0
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "l"), *common,
                 "--backend", "lance"]) == 0  # fmt: skip
    capsys.readouterr()
    printed = []
    for folder in ("f", "l"):
        assert main(["search", str(tmp_path / folder), "a man plays the ball", "-k", "5"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1]


def test_bad_lance_folders_and_models_are_one_line(shards, tiny_model_dir, tmp_path, capsys):
    out, _ = shards
    index_dir = tmp_path / "lance"
    LanceIndex.from_shards(out, index_dir)
    meta = json.loads((index_dir / "index.json").read_text())
    (index_dir / "index.json").write_text(json.dumps(meta | {"dimension": 64}))
    with pytest.raises(IndexFolderError, match=r"index.json says 600 × 64, the table holds 600 × 32"):
        load_index(index_dir)
    (index_dir / "index.json").write_text(json.dumps(meta))
    index = load_index(index_dir)
    with pytest.raises(
        IndexFolderError, match=r"holds 32-dim vectors .* but the query embedding gives 16-dim"
    ):
        index.search(np.ones((1, 16), np.float32))
    assert main(["search", str(index_dir), "a query", "--hybrid"]) == 2
    assert "hybrid search (BM25 over the texts) needs the in-memory index" in capsys.readouterr().err
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "encode.json").write_text(json.dumps({"settings": {}, "shards": [{}, {}]}))
    (partial / "part-00000.parquet").write_bytes((out / "part-00000.parquet").read_bytes())
    with pytest.raises(IndexFolderError, match="1 of its 2 shards are written; finish the encode"):
        LanceIndex.from_shards(partial, tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_pq_options_that_cannot_apply_are_one_line_before_any_work(tiny_model_dir, tmp_path, capsys):
    """Issue 70 items 6 and 7: --sub-vectors 7 of a 32-dimension model was a ValueError traceback after the
    corpus was encoded; --partitions / --sub-vectors on a flat index were ignored without a word."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    base = ["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "ix"), "--backend", "lance"]
    for extra, words in (
        (["--kind", "ivf_pq", "--sub-vectors", "7"], "--sub-vectors 7: does not divide the dimension 32"),
        (["--kind", "flat", "--partitions", "4"], "--partitions: for --kind ivf_pq"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error" in line]
        assert len(errors) == 1 and words in errors[0] and "encoding" not in err, err
        assert not (tmp_path / "ix").exists()
