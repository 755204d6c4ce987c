"""`sentcl index --passages`: long documents as passages in an index; a search answers with documents (each
scored by its best passage, showing that passage), equal to the max over the document's passages; hybrid
search fuses that with BM25 over whole documents; the options that cannot apply are one line each."""

import json

import numpy as np
import pytest

from sentcl.cli.main import main
from sentcl.embedder import DOCUMENT, Batched, for_role
from sentcl.model import load_encoder
from sentcl.search import load_index
from sentcl.search.index import PassageRows
from tests.test_passages import text_of, write_needle_folder


def long_corpus(folder):
    """The needle folder's three documents and more, several of them past the tiny model's length."""
    folder = write_needle_folder(folder)
    extra = [{"_id": f"x{i}", "title": f"extra {i}", "text": text_of(20 + 13 * i, i)} for i in range(6)]
    with (folder / "corpus.jsonl").open("a") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in extra)
    return folder


@pytest.fixture
def passage_index(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "idx"
    corpus = long_corpus(tmp_path / "beir")
    argv = ["index", str(tiny_model_dir), str(corpus), "--out", str(out), "--passages", "--dtype", "fp32"]
    assert main([*argv, "--passage-overlap", "4", "--field", "title"]) == 0
    assert "9 documents as 14 passages, flat index" in capsys.readouterr().out
    return out


def test_a_search_ranks_documents_by_their_best_passage(passage_index, tiny_model_dir, capsys):
    index = load_index(passage_index)
    passages = index.passages
    assert isinstance(passages, PassageRows) and len(index) == 9
    assert len(passages.texts) > 9 and passages.settings["split"] >= 3 and passages.settings["overlap"] == 4
    assert all(passages.texts[p].startswith(index.documents.kept_of(int(d))["title"])
               for p, d in enumerate(passages.owner))  # fmt: skip
    encoder = Batched(load_encoder(str(tiny_model_dir)), 8)
    stored = index.stored_vectors()  # one unit vector a passage
    np.testing.assert_allclose(
        stored[:3],
        np.asarray(for_role(encoder, DOCUMENT).encode(passages.texts[:3]), dtype=np.float32)
        / np.linalg.norm(for_role(encoder, DOCUMENT).encode(passages.texts[:3]), axis=1, keepdims=True),
        atol=1e-5,
    )
    queries = ["needle", "the second one", "extra words 3"]
    vectors = np.asarray(encoder.encode(queries), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for query, hits in zip(vectors, index.search(vectors, top_k=4), strict=True):
        cosine = stored @ query
        best = {}  # each document's best passage, by a loop
        for p, d in enumerate(passages.owner):
            if int(d) not in best or cosine[p] > cosine[best[int(d)]]:
                best[int(d)] = p
        want = sorted(best, key=lambda d: -cosine[best[d]])[:4]
        assert [h.id for h in hits] == want
        assert [h.key for h in hits] == [index.documents.ids[d] for d in want]
        np.testing.assert_allclose([h.score for h in hits], [cosine[best[d]] for d in want], atol=1e-5)
        assert [h.text for h in hits] == [passages.texts[best[d]] for d in want]
    whole = index.search(vectors[:1], top_k=50)[0]
    assert sorted(h.key for h in whole) == sorted(index.documents.ids)  # every document once
    fused = index.hybrid_search(vectors[:1], ["needle"], top_k=5)[0]
    assert len({h.key for h in fused}) == len(fused) == 5
    dense = {h.key: h.text for h in index.search(vectors[:1], top_k=9)[0]}
    assert all(h.text == dense[h.key] for h in fused)  # a document shows its best passage


def test_search_and_serve_read_an_index_of_passages(passage_index, tiny_model_dir, capsys):
    capsys.readouterr()
    assert main(["search", str(passage_index), "needle", "-k", "3", "--hybrid"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\n") >= 3
    assert main(["serve", str(tiny_model_dir), "--index", str(passage_index), "--writable"]) == 2
    assert "is an index of passages" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--passages", "--backend", "lance"], "--passages: for a faiss index built from its corpus"),
        (["--passage-overlap", "3"], "--passage-overlap: for --passages"),
        (["--passages", "--passage-overlap", "-1"], "--passage-overlap -1: tokens shared"),
        (["--passages", "--passage-overlap", "900"], "--passage-overlap 900: not below the window"),
    ],
)
def test_passage_options_that_cannot_apply_are_one_line(tmp_path, tiny_model_dir, capsys, extra, message):
    corpus = long_corpus(tmp_path / "beir")
    out = tmp_path / "idx"
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(out), *extra]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_an_index_of_passages_is_built_again_not_updated(passage_index, tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "beir"
    before = (passage_index / "index.json").read_bytes()
    capsys.readouterr()
    for extra in ([], ["--passages"]):
        argv = ["index", str(tiny_model_dir), str(corpus), "--out", str(passage_index), "--update", *extra]
        assert main([*argv, "--field", "title"]) == 2
        assert ("is an index of passages" if not extra else "not --update") in capsys.readouterr().err
    assert (passage_index / "index.json").read_bytes() == before


@pytest.mark.parametrize("kind", ["ivf", "binary"])
def test_approximate_indexes_of_passages_answer_each_document_once(kind, tmp_path, tiny_model_dir):
    out = tmp_path / "idx"
    corpus = long_corpus(tmp_path / "beir")
    assert (
        main(["index", str(tiny_model_dir), str(corpus), "--out", str(out), "--passages", "--kind", kind])
        == 0
    )
    index = load_index(out)
    vectors = np.asarray(Batched(load_encoder(str(tiny_model_dir)), 8).encode(["needle", "extra"]))
    for hits in index.search(vectors, top_k=9):
        assert sorted(h.key for h in hits) == sorted(index.documents.ids)
        assert all(h.text in index.passages.texts for h in hits)
