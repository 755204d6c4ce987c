"""BM25 (bm25s, Lucene's formula) and hybrid search by reciprocal rank fusion, in the retrieval folders'
evaluation."""

import math

import numpy as np
import pytest

from sentcl.config import ConfigError
from sentcl.evaluation import build_evaluator
from sentcl.evaluation.lexical import BM25_SETTINGS, BM25Index, reciprocal_rank_fusion
from sentcl.evaluation.registry import Options

from .test_local import Hashed, write_beir

CORPUS = [
    "protein folding kinetics measured",
    "protein binding sites protein structure",
    "cell membrane transport",
    "kinetics membrane protein",
    "vitamin deficiency causes disease",
]


def lucene_scores(query: str, corpus: list[str], k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """Lucene's BM25 written out: idf = ln(1 + (N − df + ½) / (df + ½))."""
    documents = [text.lower().split() for text in corpus]
    mean_length = sum(map(len, documents)) / len(documents)
    scores = np.zeros(len(documents))
    for word in set(query.lower().split()):
        df = sum(word in d for d in documents)
        idf = math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))
        for i, d in enumerate(documents):
            tf = d.count(word)
            scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / mean_length)) if tf else 0
    return scores


@pytest.mark.parametrize("query", ["protein kinetics", "membrane", "vitamin disease protein"])
def test_bm25_ranks_by_lucenes_formula(query):
    assert BM25_SETTINGS["method"] == "lucene" and BM25_SETTINGS["k1"] == 1.5
    ranked = BM25Index(CORPUS).rank([query], depth=5, exclude=[None])[0]
    expected = np.lexsort((np.arange(len(CORPUS)), -lucene_scores(query, CORPUS)))
    assert ranked.tolist() == expected.tolist()


def test_bm25_never_ranks_a_querys_own_row_and_a_query_of_stop_words_keeps_row_order():
    index = BM25Index(CORPUS)
    assert 1 not in index.rank(["protein structure"], depth=5, exclude=[1])[0].tolist()
    assert index.rank(["the and of"], depth=3, exclude=[None])[0].tolist() == [0, 1, 2]


def test_reciprocal_rank_fusion_by_hand():
    # k = 60: row 0 scores 1/61 + 1/62, row 2 1/63 + 1/61, row 1 1/62 + 1/63
    fused = reciprocal_rank_fusion([np.array([[0, 1, 2]]), np.array([[2, 0, 1]])], depth=3)
    assert fused.tolist() == [[0, 2, 1]]
    padded = reciprocal_rank_fusion([np.array([[4]]), np.array([[4]])], depth=2)
    assert padded.tolist() == [[4, -1]]  # fewer distinct rows than the depth: -1 is never relevant


def test_a_retrieval_folder_reports_each_mode_and_the_first_is_primary(tmp_path):
    folder = write_beir(tmp_path / "mybeir")
    evaluator = build_evaluator(tmp_path, str(folder), Options(retrieval="bm25,dense,hybrid"))
    assert evaluator.primary == "mybeir_bm25_ndcg@10"
    metrics = evaluator(Hashed(dim=6))
    for mode in ("", "bm25_", "hybrid_"):
        assert 0 <= metrics[f"mybeir_{mode}ndcg@10"] <= 100
    assert metrics["mybeir_bm25_ndcg@10"] != metrics["mybeir_ndcg@10"]  # two rankings, not one twice
    text = evaluator.format(metrics)
    assert "mybeir [bm25]" in text and "mybeir [hybrid]" in text and "bm25_" not in text
    dense_only = build_evaluator(tmp_path, str(folder))(Hashed(dim=6))
    assert dense_only["mybeir_ndcg@10"] == metrics["mybeir_ndcg@10"] and not any(
        "bm25" in k for k in dense_only
    )


@pytest.mark.parametrize("value", ["sparse", "dense,dense", ""])
def test_an_unknown_mode_is_one_line(value):
    with pytest.raises(ConfigError, match=r"^retrieval: .* is not a list of distinct dense, bm25, hybrid$"):
        Options(retrieval=value).validate()
