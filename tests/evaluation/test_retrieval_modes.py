"""A retrieval folder ranked by the model, BM25 and both fused (Options.retrieval)."""

import pytest

from sentcl.config import ConfigError
from sentcl.evaluation import build_evaluator
from sentcl.evaluation.registry import Options

from .test_local import Hashed, write_beir


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
