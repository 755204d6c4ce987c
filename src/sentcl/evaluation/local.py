"""The user's own data as evaluation tasks: ``--tasks path/to/pairs.tsv`` or ``--tasks path/to/beir-folder``
(read by local_files.py, which says what the files hold).

* a pair file with ``score``: Spearman and Pearson (×100) of the cosine against it; Spearman is the primary
  metric;
* a pair file with ``label`` (0 or 1): accuracy and F1, each at the cosine threshold that maximises it (the
  middle between two neighbouring scores), and average precision (×100; sentence-transformers'
  BinaryClassificationEvaluator with cosine); AP is the primary metric, as it needs no threshold;
* a retrieval folder: every query with at least one relevant document (score > 0) is ranked by cosine
  against the whole corpus, except a document with the query's own id (BEIR's ``ignore_identical_ids``);
  queries and documents get the model's ``query`` / ``document`` prompt where it has one
  (``embedder.prompts``); nDCG@10 (primary), MRR@10, Recall@1/10/100 and MAP@100 with graded relevance, as
  evaluation/ranking.py defines them (tests/evaluation/test_local.py checks them against pytrec_eval).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import average_precision_score

from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, unit_rows
from sentcl.evaluation.local_files import (
    read_pairs,
    read_retrieval,
    unique_names,
)  # fmt: skip
from sentcl.evaluation.ranking import DEPTH, per_query_metrics, rank
from sentcl.evaluation.registry import RETRIEVAL_MODES
from sentcl.passages import Passages, PassageSettings, model_window, rank_documents, split_passages
from sentcl.search.lexical import BM25_SETTINGS, RRF_K, BM25Index, reciprocal_rank_fusion


# --------------------------------------------------------------------------------------------- metrics
def best_threshold_metrics(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and F1 (×100) at their best thresholds ``score ≥ t`` → 1, each threshold the middle between
    two neighbouring distinct scores, and average precision (×100)."""
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    n, positives = len(y), y.sum()
    # cutting after the first k (k = 0..n), only where the score changes
    k = np.concatenate([[0], np.flatnonzero(np.diff(s) != 0) + 1, [n]])
    true_pos = np.concatenate([[0], np.cumsum(y)])[k]
    accuracy = (true_pos + (n - positives) - (k - true_pos)) / n
    f1 = 2 * true_pos / np.maximum(k + positives, 1)

    def threshold(i: int) -> float:
        if k[i] == 0:
            return float(s[0]) + 1.0
        if k[i] == n:
            return float(s[-1])
        return float((s[k[i] - 1] + s[k[i]]) / 2)

    best_acc, best_f1 = int(np.argmax(accuracy)), int(np.argmax(f1))
    return {
        "accuracy": 100 * float(accuracy[best_acc]),
        "accuracy_threshold": threshold(best_acc),
        "f1": 100 * float(f1[best_f1]),
        "f1_threshold": threshold(best_f1),
        "ap": 100 * float(average_precision_score(labels, scores)),
    }


# --------------------------------------------------------------------------------------------- evaluators
class PairFileEvaluator:
    """Every pair file a request names; metrics ``<file stem>_<metric>``, the first file's primary metric
    is the evaluator's."""

    def __init__(self, paths: list[str]):
        self.paths = [Path(p).expanduser() for p in paths]
        self.names = unique_names(self.paths)
        self.sets = [read_pairs(p) for p in self.paths]
        self.missing: dict[str, str] = {}
        first = self.sets[0]
        self.primary = f"{self.names[0]}_{'spearman' if first.kind == 'score' else 'ap'}"
        self.last: dict[str, float] = {}

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for name, pairs in zip(self.names, self.sets, strict=True):
            first = unit_rows(np.asarray(embedder.encode(pairs.sentences1), dtype=np.float64))
            second = unit_rows(np.asarray(embedder.encode(pairs.sentences2), dtype=np.float64))
            cosine = (first * second).sum(axis=1)
            gold = np.asarray(pairs.gold)
            if pairs.kind == "score":
                found = {
                    "spearman": 100 * float(spearmanr(cosine, gold).statistic),
                    "pearson": 100 * float(pearsonr(cosine, gold).statistic),
                }
            else:
                found = best_threshold_metrics(cosine, gold)
            metrics |= {f"{name}_{key}": value for key, value in found.items()}
        self.last = metrics
        return metrics

    def format(self, metrics: dict[str, float]) -> str:
        lines = []
        for name, pairs in zip(self.names, self.sets, strict=True):
            shown = ("spearman", "pearson") if pairs.kind == "score" else ("ap", "accuracy", "f1")
            cells = "  ".join(
                f"{key} {metrics[f'{name}_{key}']:.2f}" for key in shown if f"{name}_{key}" in metrics
            )
            lines.append(f"{name} ({len(pairs.gold):,} pairs, {pairs.kind}s): {cells}")
        return "\n".join(lines)

    def results(self) -> dict:
        return {
            name: {"path": str(pairs.path), "pairs": len(pairs.gold), "kind": pairs.kind}
            | {
                "metrics": {
                    k.removeprefix(name + "_"): v for k, v in self.last.items() if k.startswith(name + "_")
                }
            }
            for name, pairs in zip(self.names, self.sets, strict=True)
        }


class RetrievalFolderEvaluator:
    """Every BEIR folder a request names; metrics ``<folder>_<metric>``; the first folder's nDCG@10 is the
    primary metric."""

    def __init__(
        self,
        paths: list[str],
        retrieval: str = "dense",
        document_words: int = 0,
        passages: PassageSettings | None = None,
    ):
        self.paths = [Path(p).expanduser() for p in paths]
        #: long documents as passages (sentcl/passages.py) on the dense side; None: as the model truncates
        self.passages = passages
        #: per folder, the passages of the last model's tokenizer and length, and how long encoding them took
        self.split: dict[str, Passages] = {}
        self.encode_seconds: dict[str, float] = {}
        self.names = unique_names(self.paths)
        self.sets = [read_retrieval(p) for p in self.paths]
        self.document_words = document_words
        if document_words:  # each document cut to its first words (Options.document_words)
            for task in self.sets:
                task.corpus = [" ".join(text.split()[:document_words]) for text in task.corpus]
        #: how documents are ranked (Options.retrieval): dense keys are ``<folder>_<metric>``, the others
        #: ``<folder>_bm25_<metric>`` and ``<folder>_hybrid_<metric>``; the first mode is primary
        self.modes = retrieval.split(",")
        self.bm25: dict[str, np.ndarray] = {}  # per folder, BM25's ranking (the model does not change it)
        #: per folder, each query's own row in the corpus (a document with its id), never ranked for it
        self.own_rows = []
        for task in self.sets:
            row = {doc: i for i, doc in enumerate(task.corpus_ids)}
            self.own_rows.append([row.get(q) for q in task.query_ids])
        self.missing: dict[str, str] = {}
        self.primary = f"{self.names[0]}_{self.prefix(self.modes[0])}ndcg@10"
        self.last: dict[str, float] = {}
        #: the last evaluation's nDCG@10 of each query, per folder (what ``--against`` resamples)
        self.per_query: dict[str, np.ndarray] = {}
        #: the last evaluation's every metric of each query, per folder and mode (a harness's bootstrap)
        self.each_query: dict[str, np.ndarray] = {}

    def per_item(self) -> dict[str, np.ndarray]:
        """Metric → its value for each evaluated item (here each query's nDCG@10), in a fixed order."""
        return dict(self.per_query)

    @staticmethod
    def prefix(mode: str) -> str:
        return "" if mode == "dense" else f"{mode}_"

    def rankings(self, embedder: Embedder, name: str, task, own_rows) -> dict[str, np.ndarray]:
        """Each requested mode's [Q, DEPTH] ranking of the corpus for the folder's queries."""
        found: dict[str, np.ndarray] = {}
        if {"dense", "hybrid"} & set(self.modes):
            # each side with the model's own prompt where it has one (encode_document / encode_query)
            reader = for_role(embedder, DOCUMENT)
            started = time.perf_counter()
            if self.passages is None:
                documents = unit_rows(np.asarray(reader.encode(task.corpus), dtype=np.float32))
            else:
                tokenizer, length = model_window(embedder)
                split = split_passages(
                    task.titles, task.bodies, tokenizer, length, self.passages.overlap,
                    getattr(reader, "prompt", ""),
                )  # fmt: skip
                self.split[name] = split
                documents = unit_rows(np.asarray(reader.encode(split.texts), dtype=np.float32))
            self.encode_seconds[name] = time.perf_counter() - started
            queries = unit_rows(np.asarray(for_role(embedder, QUERY).encode(task.queries), dtype=np.float32))
            if self.passages is None:
                found["dense"] = rank(queries, documents, DEPTH, own_rows)
            else:
                found["dense"] = rank_documents(
                    queries, documents, split.starts, DEPTH, own_rows, self.passages.score
                )
        if {"bm25", "hybrid"} & set(self.modes):
            if name not in self.bm25:
                self.bm25[name] = BM25Index(task.corpus).rank(task.queries, DEPTH, own_rows)
            found["bm25"] = self.bm25[name]
        if "hybrid" in self.modes:
            found["hybrid"] = reciprocal_rank_fusion(
                [found["dense"], found["bm25"]], found["dense"].shape[1]
            )[0]
        return found

    def __call__(self, embedder: Embedder) -> dict[str, float]:
        metrics: dict[str, float] = {}
        self.per_query, self.each_query = {}, {}
        for name, task, own_rows in zip(self.names, self.sets, self.own_rows, strict=True):
            found = self.rankings(embedder, name, task, own_rows)
            for mode in self.modes:
                each = per_query_metrics(found[mode], task.relevant)
                key = f"{name}_{self.prefix(mode)}"
                metrics |= {f"{key}{metric}": float(np.mean(values)) for metric, values in each.items()}
                self.per_query[f"{key}ndcg@10"] = each["ndcg@10"]
                self.each_query |= {f"{key}{metric}": values for metric, values in each.items()}
        self.last = metrics
        return metrics

    def mode_metrics(self, metrics: dict[str, float], name: str, mode: str) -> dict[str, float]:
        """``name``'s metrics of ``mode``, by their bare names (ndcg@10, recall@100, …)."""
        head = f"{name}_{self.prefix(mode)}"
        others = tuple(f"{name}_{self.prefix(m)}" for m in RETRIEVAL_MODES if m != mode and m != "dense")
        return {
            key.removeprefix(head): value
            for key, value in metrics.items()
            if key.startswith(head) and not key.startswith(others)
        }

    def format(self, metrics: dict[str, float]) -> str:
        lines = []
        for name, task in zip(self.names, self.sets, strict=True):
            for mode in self.modes:
                cells = "  ".join(f"{k} {v:.2f}" for k, v in self.mode_metrics(metrics, name, mode).items())
                how = "" if self.modes == ["dense"] else f" [{mode}]"
                split = self.split.get(name)
                if split is not None and mode != "bm25":
                    how += (
                        f" [{self.passages.score} of {len(split.texts):,} passages; "  # type: ignore[union-attr]
                        f"{split.split_documents:,} documents split]"
                    )
                lines.append(
                    f"{name}{how} ({len(task.queries):,} queries, {len(task.corpus):,} documents): {cells}"
                )
        return "\n".join(lines)

    def results(self) -> dict:
        return {
            name: {
                "qrels": str(task.qrels_path),
                "queries": len(task.queries),
                "corpus": len(task.corpus),
                "metrics": {
                    k.removeprefix(name + "_"): v for k, v in self.last.items() if k.startswith(name + "_")
                },
                "retrieval": {
                    "modes": self.modes,
                    "bm25": BM25_SETTINGS,
                    "rrf_k": RRF_K,
                    "document_words": self.document_words,
                    "passages": None
                    if self.passages is None
                    else {
                        "score": self.passages.score,
                        "overlap": "an eighth of the window"
                        if self.passages.overlap is None
                        else self.passages.overlap,
                        "passages": len(self.split[name].texts) if name in self.split else None,
                        "documents_split": self.split[name].split_documents if name in self.split else None,
                    },
                    "document_encode_seconds": self.encode_seconds.get(name),
                },
            }
            for name, task in zip(self.names, self.sets, strict=True)
        }
