import numpy as np
import pytest

from sentcl.model import SentenceEncoder
from sentcl.search import IndexFolderError, SentenceIndex
from tests.conftest import SENTENCES


def brute_force(corpus, queries, k):
    c = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    scores = q @ c.T
    return np.argsort(-scores, axis=1)[:, :k], np.sort(scores, axis=1)[:, ::-1][:, :k]


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(2000, 16)).astype(np.float32)
    return corpus, [f"s{i}" for i in range(2000)], rng.normal(size=(7, 16)).astype(np.float32)


def test_flat_search_is_exact(data):
    corpus, texts, queries = data
    index = SentenceIndex.build(corpus, texts, kind="flat")
    ids, scores = brute_force(corpus, queries, 5)
    hits = index.search(queries, top_k=5)
    assert [[h.id for h in row] for row in hits] == ids.tolist()
    np.testing.assert_allclose([[h.score for h in row] for row in hits], scores, atol=1e-5)
    assert hits[0][0].text == texts[ids[0][0]]


def test_the_callers_vectors_are_left_as_they_were(data, tmp_path):
    corpus, texts, queries = data
    np.save(tmp_path / "v.npy", corpus)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")  # read-only: in-place normalising crashed
    frozen = queries.copy()
    frozen.flags.writeable = False
    for kind in ("flat", "binary"):
        index = SentenceIndex.build(mapped, texts, kind=kind)
        index.search(frozen, top_k=3)
    np.testing.assert_array_equal(mapped, corpus)
    before = corpus.copy()
    SentenceIndex.build(corpus, texts, kind="flat").search(queries, top_k=3)
    np.testing.assert_array_equal(corpus, before)  # not normalised in place


def test_ivf_with_every_cell_probed_equals_exact(data):
    corpus, texts, queries = data
    ivf = SentenceIndex.build(corpus, texts, kind="ivf", nlist=8, nprobe=8)
    ids, _ = brute_force(corpus, queries, 5)
    assert [[h.id for h in row] for row in ivf.search(queries, top_k=5)] == ids.tolist()


def test_threshold_and_roundtrip(tmp_path, data):
    corpus, texts, queries = data
    index = SentenceIndex.build(corpus, texts, model="some/model")
    filtered = index.search(queries, top_k=50, threshold=0.5)
    assert all(h.score >= 0.5 for row in filtered for h in row)
    assert sum(map(len, filtered)) < 7 * 50
    loaded = SentenceIndex.load(index.save(tmp_path / "idx"))
    assert loaded.model == "some/model" and loaded.kind == "flat" and len(loaded) == 2000
    assert loaded.search(queries, top_k=3) == index.search(queries, top_k=3)


def test_bad_inputs(tmp_path, data):
    corpus, texts, _ = data
    with pytest.raises(ValueError, match="embeddings for"):
        SentenceIndex.build(corpus, texts[:10])
    with pytest.raises(ValueError, match="not one of"):
        SentenceIndex.build(corpus, texts, kind="hnsw")
    with pytest.raises(IndexFolderError, match="not a sentcl index folder"):
        SentenceIndex.load(tmp_path)
    index = SentenceIndex.build(corpus, texts, model="m32")
    with pytest.raises(IndexFolderError, match=f"holds {corpus.shape[1]}-dim vectors .built with m32., but"):
        index.search(np.ones((1, corpus.shape[1] + 1), dtype=np.float32))


def test_encoder_similarity_and_an_index_of_any_embedder(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir))
    sims = encoder.similarity(SENTENCES[:2], SENTENCES)
    assert sims.shape == (2, len(SENTENCES))
    np.testing.assert_allclose([sims[0, 0], sims[1, 1]], 1.0, atol=1e-5)
    index = SentenceIndex.of_corpus(encoder, SENTENCES, model=encoder.source)
    hits = index.query(encoder, SENTENCES[3], top_k=3)[0]
    # a random tiny BERT is very anisotropic (cosines near 1), so compare with its own similarity row
    row = encoder.similarity(SENTENCES[3], SENTENCES)[0]
    np.testing.assert_allclose([h.score for h in hits], np.sort(row)[::-1][:3], atol=1e-5)
    assert SENTENCES[3] in [h.text for h in hits]
    assert index.model == str(tiny_model_dir.resolve())


def test_the_model_knows_nothing_of_indexes():
    assert not hasattr(SentenceEncoder, "build_index") and not hasattr(SentenceEncoder, "search")


def test_an_index_of_nan_vectors_is_refused():
    from sentcl.embedder import EmbeddingError

    class Broken:
        def encode(self, sentences):
            vectors = np.ones((len(sentences), 4), np.float32)
            vectors[1, 2] = np.nan
            return vectors

    with pytest.raises(EmbeddingError, match=r"1 of 3 sentences \(the first is #1: 'b'\)"):
        SentenceIndex.of_corpus(Broken(), ["a", "b", "c"])


@pytest.mark.parametrize("damage", ["flip a byte", "claim gigabytes", "swap the texts", "old index.json"])
def test_a_damaged_or_forged_index_is_refused_before_faiss_reads_it(tmp_path, data, damage):
    """Flipped bytes were once served with cosine 1.047; a 25 KB file claiming 3 GB allocated 3.5 GB."""
    import json

    vectors, texts, _ = data
    folder = SentenceIndex.build(vectors, texts).save(tmp_path / "idx")
    graph = folder / "index.faiss"
    if damage == "flip a byte":
        raw = bytearray(graph.read_bytes())
        raw[-5] ^= 0xFF
        graph.write_bytes(bytes(raw))
    elif damage == "claim gigabytes":
        raw = bytearray(graph.read_bytes())
        raw[8:16] = (10**8).to_bytes(8, "little")  # the header's vector count
        graph.write_bytes(bytes(raw))
    elif damage == "swap the texts":
        (folder / "texts.jsonl").write_text(json.dumps("another corpus") + "\n" * 1)
    else:
        meta = json.loads((folder / "index.json").read_text())
        del meta["files"]
        (folder / "index.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFolderError, match=r"does not match index.json|build it again"):
        SentenceIndex.load(folder)


def test_hybrid_search_fuses_the_index_and_bm25_by_rank():
    """Vectors that rank the texts one way, words that rank them another: the fused order and scores are
    reciprocal rank fusion of the two (k = 60)."""
    from sentcl.search.lexical import BM25Index, reciprocal_rank_fusion

    texts = ["protein folding kinetics", "cell membrane transport", "vitamin deficiency", "protein structure"]
    vectors = np.eye(4, dtype=np.float32)
    index = SentenceIndex.build(vectors, texts, kind="flat")
    query = np.array([[0.1, 0.9, 0.2, 0.3]], dtype=np.float32)  # dense: rows 1, 3, 2, 0
    hits = index.hybrid_search(query, ["protein structure"], top_k=3)[0]
    dense = np.array([[1, 3, 2, 0]])
    lexical = BM25Index(texts).rank(["protein structure"], 4, [None])
    fused, scores = reciprocal_rank_fusion([dense, lexical], 4)
    assert [h.id for h in hits] == fused[0][:3].tolist() and hits[0].text == texts[hits[0].id]
    assert [h.score for h in hits] == pytest.approx(scores[0][:3].tolist())
    assert hits[0].id == 3  # second by the vectors, first by its words: first when fused
