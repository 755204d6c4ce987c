"""BM25 (bm25s, Lucene's formula) and reciprocal rank fusion."""

import math

import numpy as np
import pytest

from sentcl.search.lexical import BM25_SETTINGS, BM25Index, reciprocal_rank_fusion

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
    fused, scores = reciprocal_rank_fusion([np.array([[0, 1, 2]]), np.array([[2, 0, 1]])], depth=3)
    assert fused.tolist() == [[0, 2, 1]]
    assert scores[0].tolist() == pytest.approx([1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62 + 1 / 63])
    padded, _ = reciprocal_rank_fusion([np.array([[4, -1]]), np.array([[4, -1]])], depth=2)
    assert padded.tolist() == [[4, -1]]  # fewer distinct rows than the depth: -1 is never relevant


@pytest.mark.parametrize("told", [None, "true"])
def test_bm25_keeps_jax_from_taking_the_gpu_unless_told(tmp_path, told):
    """bm25s runs a JAX operation when imported where JAX is installed, and JAX's first operation takes 75 %
    of the GPU unless told not to (a GPU run beside it then ran out of memory): a JAX that records what it was
    told, in a fresh process (bm25s is imported once per process)."""
    import os
    import subprocess
    import sys

    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("")
    (tmp_path / "jax" / "lax.py").write_text(
        "import os\n"
        "def top_k(x, k):\n"
        "    with open(os.environ['PROBE'], 'w') as f:\n"
        "        f.write(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE', 'unset'))\n"
        "    return x[:k], list(range(k))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    env |= {"PROBE": str(tmp_path / "probe"), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    if told:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = told
    code = "from sentcl.search.lexical import BM25Index; BM25Index(['one two', 'three four'])"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert (tmp_path / "probe").read_text() == (told or "false")


def test_bm25s_debug_notes_do_not_reach_the_user(capsys):
    """Issue 70 item 7: "DEBUG bm25s: Building index from IDs objects" was printed by sentcl evaluate."""
    import logging

    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)  # as the CLI's basicConfig: every record that reaches the root is printed
    try:
        BM25Index(CORPUS).rank(["protein"], depth=2, exclude=[None])
    finally:
        root.removeHandler(handler)
    assert "Building index" not in capsys.readouterr().err
