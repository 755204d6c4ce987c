"""Ranking metrics: the one implementation every retrieval task uses (BEIR folders in local.py, STS-B
retrieval in retrieval.py, the quantization benchmark). Per query, with ``g`` the graded relevance
(trec_eval's linear gain; binary tasks give 1):

    nDCG@10   = Σ_{r≤10} g(d_r) / log2(r + 1)  /  the same sum over the ideal order
    MRR@10    = 1 / rank of the first relevant document in the top 10 (0 when none is)
    Recall@k  = |relevant ∩ top k| / |relevant|
    MAP@D     = Σ_{r≤D, d_r relevant} precision@r / |relevant|

averaged over the queries, ×100 (trec_eval's ndcg_cut.10, recip_rank on the top 10, recall.k, map_cut.D;
tests/evaluation/test_local.py checks them against pytrec_eval).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: the cut-offs of the retrieval metrics; the deepest is how many documents are ranked per query
RECALL_AT = (1, 10, 100)
DEPTH = max(RECALL_AT)


def retrieval_metrics(
    ranked: np.ndarray | Sequence[Sequence[int]],
    relevant: Sequence[dict[int, float]],
    recall_at: Sequence[int] = RECALL_AT,
    map_depth: int | None = DEPTH,
) -> dict[str, float]:
    """The metrics above from each query's ranked rows (best first, at least as deep as the deepest cut-off
    asked) and its relevant rows with their grades; ``map_depth`` None leaves MAP out. The mean over the
    queries of ``per_query_metrics``."""
    return {
        key: float(np.mean(values))
        for key, values in per_query_metrics(ranked, relevant, recall_at, map_depth).items()
    }


def per_query_metrics(
    ranked: np.ndarray | Sequence[Sequence[int]],
    relevant: Sequence[dict[int, float]],
    recall_at: Sequence[int] = RECALL_AT,
    map_depth: int | None = DEPTH,
) -> dict[str, np.ndarray]:
    """Each metric of each query, ×100 (what a paired bootstrap over the queries resamples)."""
    depth = max([10, *recall_at, map_depth or 0])
    discounts = 1.0 / np.log2(np.arange(2, depth + 2))
    ndcg, mrr, average_precision = [], [], []
    recall: dict[int, list[float]] = {k: [] for k in recall_at}
    for rows, grades in zip(ranked, relevant, strict=True):
        gains = np.array([grades.get(int(row), 0.0) for row in rows[:depth]])
        hits = gains > 0
        ideal = np.sort(np.fromiter(grades.values(), dtype=np.float64))[::-1][:10]
        ndcg.append(
            float((gains[:10] * discounts[: len(gains[:10])]).sum() / (ideal * discounts[: len(ideal)]).sum())
        )
        first = np.flatnonzero(hits[:10])
        mrr.append(1.0 / (first[0] + 1) if len(first) else 0.0)
        for k in recall_at:
            recall[k].append(float(hits[:k].sum()) / len(grades))
        if map_depth is not None:
            precision_at_hits = np.cumsum(hits[:map_depth]) / np.arange(1, len(hits[:map_depth]) + 1)
            average_precision.append(float(precision_at_hits[hits[:map_depth]].sum()) / len(grades))
    metrics = {"ndcg@10": ndcg, "mrr@10": mrr} | {f"recall@{k}": values for k, values in recall.items()}
    if map_depth is not None:
        metrics[f"map@{map_depth}"] = average_precision
    return {key: 100 * np.asarray(values, dtype=np.float64) for key, values in metrics.items()}


def rank(
    queries: np.ndarray, corpus: np.ndarray, depth: int, exclude: list[int | None], block: int = 1024
) -> np.ndarray:
    """The ``depth`` best corpus rows per query by dot product (ties: the lower row first), in blocks of
    ``block`` queries × ``16 block`` documents (64 MB of float32 scores); ``exclude[q]`` is a row query q
    never gets."""
    depth = min(depth, len(corpus))
    best = np.empty((len(queries), depth), dtype=np.int64)
    excluded = np.array([-1 if row is None else row for row in exclude], dtype=np.int64)
    for start in range(0, len(queries), block):
        q = queries[start : start + block]
        top_rows = np.zeros((len(q), 0), dtype=np.int64)
        top_scores = np.zeros((len(q), 0), dtype=np.float32)
        for c_start in range(0, len(corpus), 16 * block):
            scores = q @ corpus[c_start : c_start + 16 * block].T
            own = excluded[start : start + len(q)] - c_start  # each query's own row in this block
            inside = np.flatnonzero((own >= 0) & (own < scores.shape[1]))
            scores[inside, own[inside]] = -np.inf
            rows = np.broadcast_to(np.arange(c_start, c_start + scores.shape[1]), scores.shape)
            top_rows = np.concatenate([top_rows, rows], axis=1)
            top_scores = np.concatenate([top_scores, scores], axis=1)
            keep = np.lexsort((top_rows, -top_scores), axis=1)[:, :depth]
            top_rows = np.take_along_axis(top_rows, keep, axis=1)
            top_scores = np.take_along_axis(top_scores, keep, axis=1)
        best[start : start + len(q)] = top_rows
    return best
