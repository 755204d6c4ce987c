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
    asked) and its relevant rows with their grades; ``map_depth`` None leaves MAP out."""
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
    metrics = {"ndcg@10": float(np.mean(ndcg)), "mrr@10": float(np.mean(mrr))}
    metrics |= {f"recall@{k}": float(np.mean(values)) for k, values in recall.items()}
    if map_depth is not None:
        metrics[f"map@{map_depth}"] = float(np.mean(average_precision))
    return {key: 100 * value for key, value in metrics.items()}
