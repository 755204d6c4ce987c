"""The baselines a user of a domain compares with: BM25, and hybrid search (BM25 + the dense model).

* **BM25**: the ``bm25s`` package (Lù, 2024), its Lucene variant with k1 = 1.5, b = 0.75 (its defaults,
  Elasticsearch's are 1.2 / 0.75), texts lower-cased and cut into tokens of two or more word characters,
  English stop words removed, no stemming (``BM25_SETTINGS``). On SciFact's test queries it gives 66.17
  nDCG@10 (the BEIR paper's Elasticsearch BM25: 66.5; docs/reports/domain.md).
* **Hybrid**: reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009) of the dense ranking and BM25's,
  each to ``depth``: score(d) = Σ_r 1 / (k + rank_r(d)), k = 60, ranks from 1; a document absent from one
  ranking gets nothing from it. Fusion by ranks needs no score calibration between the two.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from sentcl.extras import require

#: the BM25 settings every measurement states
BM25_SETTINGS = {"method": "lucene", "k1": 1.5, "b": 0.75, "stopwords": "en", "stemmer": None}
RRF_K = 60


class BM25Index:
    """A corpus indexed once by bm25s; ``rank`` gives each query's best rows."""

    def __init__(self, corpus: list[str]):
        # importing bm25s runs a JAX operation where JAX is installed, and JAX's first operation takes 75 % of
        # the GPU's memory for itself unless told not to: a GPU training or encoding beside it then runs out
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        bm25s = require("bm25s", "domain", "BM25 and hybrid retrieval")
        logging.getLogger("bm25s").setLevel(
            logging.WARNING
        )  # it sets itself to DEBUG: its notes reached users
        self.bm25s = bm25s
        self.size = len(corpus)
        tokens = bm25s.tokenize(corpus, stopwords=BM25_SETTINGS["stopwords"], show_progress=False)
        self.retriever = bm25s.BM25(
            method=BM25_SETTINGS["method"], k1=BM25_SETTINGS["k1"], b=BM25_SETTINGS["b"]
        )
        self.retriever.index(tokens, show_progress=False)
        self.vocabulary = set(tokens.vocab)

    def rank(self, queries: list[str], depth: int, exclude: list[int | None]) -> np.ndarray:
        """[Q, depth] corpus rows by BM25 score (ties: the lower row first); ``exclude[q]`` never ranked
        for query q; a query with no indexed word ranks the corpus in row order (every score 0)."""
        depth = min(depth, self.size)
        tokens = self.bm25s.tokenize(
            queries, stopwords=BM25_SETTINGS["stopwords"], return_ids=False, show_progress=False
        )
        best = np.full((len(queries), depth), -1, dtype=np.int64)  # -1: no row (never relevant)
        for q, words in enumerate(tokens):
            known = [word for word in words if word in self.vocabulary]
            scores = (
                np.asarray(self.retriever.get_scores(known), dtype=np.float64)
                if known
                else np.zeros(self.size)
            )
            order = np.lexsort((np.arange(self.size), -scores))
            if exclude[q] is not None:
                order = order[order != exclude[q]]
            best[q, : min(depth, len(order))] = order[:depth]
        return best


def reciprocal_rank_fusion(
    rankings: list[np.ndarray], depth: int, k: int = RRF_K
) -> tuple[np.ndarray, np.ndarray]:
    """([Q, depth] rows, [Q, depth] their fused scores) by Σ 1 / (k + rank) over ``rankings`` ([Q, ·] rows,
    best first, −1 for no row; ties: the lower row first); rows past the fused ones are −1, score 0."""
    fused = np.full((rankings[0].shape[0], depth), -1, dtype=np.int64)
    scores = np.zeros((rankings[0].shape[0], depth), dtype=np.float64)
    for q in range(len(fused)):
        score: dict[int, float] = {}
        for ranking in rankings:
            for position, row in enumerate(ranking[q].tolist(), start=1):
                if row >= 0:
                    score[row] = score.get(row, 0.0) + 1.0 / (k + position)
        ordered = sorted(score, key=lambda row: (-score[row], row))[:depth]
        fused[q, : len(ordered)] = ordered
        scores[q, : len(ordered)] = [score[row] for row in ordered]
    return fused, scores
