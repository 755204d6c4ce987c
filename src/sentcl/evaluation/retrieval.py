"""``stsb-retrieval``: does a model find a sentence's paraphrases among every sentence of a split?

From the STS-B split (dev by default): the queries are the first sentences of the pairs with a gold score
≥ ``threshold`` (4: "mostly equivalent"), each query's relevant documents the second sentences of its pairs
above the threshold, and the corpus every distinct sentence of the split except the query itself. Ranking
by cosine similarity, per query:

    nDCG@10 = Σ_{r≤10} rel_r / log2(r + 1)  /  Σ_{r ≤ min(|R|, 10)} 1 / log2(r + 1)
    MRR@10  = 1 / rank of the first relevant document in the top 10 (0 when none is)
    Recall@k = |R ∩ top k| / |R|

averaged over the queries, ×100 (evaluation/ranking.py, the metrics every retrieval task shares); nDCG@10 is
the primary metric. Binary relevance, as BEIR's qrels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, unit_rows
from sentcl.evaluation.ranking import retrieval_metrics
from sentcl.evaluation.sts_data import load_task

#: the cut-offs reported
CUTOFFS = (1, 10)


class RetrievalEvaluator:
    def __init__(self, data_dir: str | Path, split: str = "dev", threshold: float = 4.0):
        self.name = f"stsb_{split}_retrieval" if split != "dev" else "stsb_retrieval"
        task = load_task(Path(data_dir), "STSBenchmark", (split,))
        self.missing = {f"stsb-retrieval ({split})": task.missing} if task.missing else {}
        self.primary = f"{self.name}_ndcg@10"
        self.corpus: list[str] = []
        self.relevant: dict[str, set[str]] = {}
        self.last: dict[str, float] = {}
        if task.missing:
            return
        pairs = task.datasets[split]
        self.corpus = sorted(set(pairs.sentences1) | set(pairs.sentences2))
        for first, second, score in zip(pairs.sentences1, pairs.sentences2, pairs.scores, strict=True):
            if score >= threshold and first != second:
                self.relevant.setdefault(first, set()).add(second)

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        if self.missing or not self.relevant:
            self.last = {}
            return {}
        documents = for_role(embedder, DOCUMENT)
        vectors = unit_rows(np.asarray(documents.encode(self.corpus), dtype=np.float64))
        row = {text: i for i, text in enumerate(self.corpus)}
        queries = sorted(self.relevant)
        asking = for_role(embedder, QUERY)
        if asking is documents:  # no prompts: the queries' vectors are the corpus's
            query_vectors = vectors[[row[q] for q in queries]]
        else:  # the model's query prompt (sentence-transformers' encode_query)
            query_vectors = unit_rows(np.asarray(asking.encode(queries), dtype=np.float64))
        scores = query_vectors @ vectors.T  # [Q, C]
        scores[np.arange(len(queries)), [row[q] for q in queries]] = -np.inf  # a query does not find itself
        top = np.argsort(-scores, axis=1, kind="stable")[:, : max(10, *CUTOFFS)]
        relevant = [dict.fromkeys((row[d] for d in self.relevant[q]), 1.0) for q in queries]
        found = retrieval_metrics(top, relevant, recall_at=CUTOFFS, map_depth=None)
        metrics = {f"{self.name}_{key}": value for key, value in found.items()}
        self.last = metrics
        return metrics

    def format(self, metrics: dict[str, float]) -> str:
        if self.missing:
            return f"{'stsb-retrieval':<16} missing  {next(iter(self.missing.values()))}"
        head = f"STS-B retrieval: {len(self.relevant)} queries, {len(self.corpus)} sentences"
        cells = "  ".join(
            f"{key.removeprefix(self.name + '_')} {value:.2f}" for key, value in metrics.items()
        )
        return f"{head}\n{cells}"

    def results(self) -> dict:
        return {
            "metrics": self.last,
            "missing": self.missing,
            "queries": len(self.relevant),
            "corpus": len(self.corpus),
        }
