"""Does `sentcl mine` choose the negatives sentence-transformers' `mine_hard_negatives` chooses?
(docs/training.md, "Mined hard negatives")

The shared NLI (premise, entailment) pairs are encoded once with all-MiniLM-L6-v2 (sentcl, fp32); both
miners then run on those identical vectors, over a grid of settings. For each setting: the share of anchors
whose negatives (in order) are the same, with sentcl's near-duplicate filter off (their rule exactly) and on
(sentcl's default), and how many rows each wrote.

    python benchmarks/mining_parity.py --out runs/bench/mining_parity.md
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from sentcl.model import SentenceEncoder
from sentcl.search.mining import MiningOptions, mine

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
GRID = [
    {},
    {"num_negatives": 1},
    {"range_min": 10, "num_negatives": 1},
    {"range_min": 10, "range_max": 50, "max_score": 0.8, "relative_margin": 0.05, "num_negatives": 1},
    {"range_min": 10, "range_max": 50, "max_score": 0.8, "relative_margin": 0.05, "num_negatives": 5},
    {"absolute_margin": 0.05, "num_negatives": 3},
    {"range_min": 5, "range_max": 100, "min_score": 0.3, "max_score": 0.7, "num_negatives": 10},
]


class Vectors:
    """One vector per text, for both miners: sentcl's Embedder and what mine_hard_negatives calls on a
    SentenceTransformer (encode_query / encode_document, similarity, similarity_pairwise, device)."""

    device = torch.device("cpu")

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def encode(self, sentences, **_):
        return np.stack([self.table[s] for s in sentences]).astype(np.float32)

    def encode_query(self, sentences, normalize_embeddings=False, **_):
        vectors = self.encode(sentences)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True) if normalize_embeddings else vectors

    encode_document = encode_query

    def similarity(self, a, b):
        from sentence_transformers.util import cos_sim

        return cos_sim(a, b)

    def similarity_pairwise(self, a, b):
        from sentence_transformers.util import pairwise_cos_sim

        return pairwise_cos_sim(a, b)


def their_negatives(dataset) -> dict[str, list[str]]:
    """Each anchor's negatives in their triplet output (the rows of its first positive, in order)."""
    negatives: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    for row in dataset:
        if first.setdefault(row["anchor"], row["positive"]) == row["positive"]:
            negatives.setdefault(row["anchor"], []).append(row["negative"])
    return negatives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench/mining_parity.md"))
    args = parser.parse_args()
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    data = Path(os.environ["SENTCL_DATA"])
    with gzip.open(data / "nli" / "triplets.csv.gz", "rt", encoding="utf-8", newline="") as handle:
        pairs = [(row["sent0"], row["sent1"]) for row in csv.DictReader(handle)]
    texts = list(dict.fromkeys(t for pair in pairs for t in pair))
    encoder = SentenceEncoder.load(MODEL).with_dtype("fp32")
    start = time.perf_counter()
    vectors = Vectors(dict(zip(texts, encoder.encode(texts, show_progress_bar=True), strict=True)))
    print(
        f"{len(pairs):,} pairs, {len(texts):,} distinct texts encoded in {time.perf_counter() - start:.0f} s"
    )
    dataset = Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [p for _, p in pairs]})
    lines = [
        f"{len(pairs):,} NLI (premise, entailment) pairs, {MODEL} vectors (fp32); "
        f"{time.strftime('%Y-%m-%d')}. Agreement: the share of anchors with the same negatives, same order.",
        "",
        "| settings | range_max used | their rows | sentcl rows (filter off) | agreement, filter off "
        "| agreement, sentcl default (near-duplicates skipped) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    results = []
    for settings in GRID:
        theirs = mine_hard_negatives(dataset, vectors, verbose=False, **settings)
        expected = their_negatives(theirs)
        row = {"settings": settings, "their_rows": len(theirs)}
        for skip in (False, True):
            ours = mine(vectors, pairs, MiningOptions(skip_near_duplicates=skip, **settings))
            same = np.mean([ours.negatives[a] == expected.get(a, []) for a in ours.negatives])
            row[f"agreement_{'default' if skip else 'exact'}"] = 100 * float(same)
            row[f"rows_{'default' if skip else 'exact'}"] = len(ours.rows)
            row["range_max"] = ours.range_max
        results.append(row)
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
        lines.append(
            f"| {shown} | {row['range_max']} | {row['their_rows']:,} | {row['rows_exact']:,} "
            f"| {row['agreement_exact']:.2f} % | {row['agreement_default']:.2f} % |"
        )
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    print(table)


if __name__ == "__main__":
    main()
