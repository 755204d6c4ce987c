"""Embedding quantization measured (docs/serving.md, "Compact search"): bytes per vector, query latency and
Recall@10 against the exact float index, for sentcl's index kinds and sentence-transformers' two paths on the
same vectors: its recommended recipe (the example semantic_search_recommended.py: a faiss binary index of
``quantize_embeddings`` ubinary codes, the top k × M rescored by the float query against the int8 codes as
they are) and ``semantic_search_faiss``, which rescores against the bits; and nDCG@10 on a retrieval task
with relevance labels (STS-B train as a BEIR folder, scripts/own_data_example.py).

    python benchmarks/quantization.py --corpus 50000 --queries 1000 --out runs/bench/quantization.md

Vectors of the packaged all-MiniLM-L6-v2 (384 dims, normalised) are cached in runs/bench/quantization/.
Latency is the median of 5 runs of searching all queries at once, per query; only the search is timed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sentcl.embedder import unit_rows
from sentcl.evaluation.data_dir import resolve_data_dir
from sentcl.evaluation.local_files import read_retrieval
from sentcl.evaluation.ranking import retrieval_metrics
from sentcl.model import SentenceEncoder
from sentcl.search import SentenceIndex
from sentcl.search.quantization import bytes_per_vector, quantize

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def machine() -> str:
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if line.startswith("Model name")
        ),
        platform.processor(),
    )
    import torch

    return f"{name}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}"


def cached(path: Path, encode, texts: list[str]) -> np.ndarray:
    if path.is_file():
        return np.load(path)
    vectors = unit_rows(encode(texts)).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def median_ms(search, queries: np.ndarray, runs: int = 5) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = search(queries)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times)) / len(queries), result


def ids_of(result) -> list[list[int]]:
    if (
        isinstance(result, list)
        and result
        and isinstance(result[0], list)
        and result[0]
        and isinstance(result[0][0], int)
    ):
        return result  # ids already
    if isinstance(result, tuple):  # sentence-transformers: (hits, time[, index])
        return [[hit["corpus_id"] for hit in row] for row in result[0]]
    return [[hit.id for hit in row] for row in result]


def st_search(corpus_codes: np.ndarray, multiplier: int, rescore: bool):
    import faiss
    from sentence_transformers.util.quantization import semantic_search_faiss

    index = faiss.IndexBinaryFlat(corpus_codes.shape[1] * 8)
    index.add(corpus_codes)

    def search(queries):
        return semantic_search_faiss(queries, corpus_index=index, corpus_precision="ubinary", top_k=10,
                                     rescore=rescore, rescore_multiplier=multiplier)  # fmt: skip

    return search


def st_recommended(corpus: np.ndarray, multiplier: int):
    """sentence-transformers' recommended binary + int8 recipe (its semantic_search_recommended.py example,
    batched): Hamming search of the ubinary query over ubinary codes for the top 10 × ``multiplier``, then
    the float query's inner product with those documents' int8 codes (ranges from the corpus), top 10.
    The example reads the int8 codes from a usearch view on disk; here they are an array in memory (the
    same numbers)."""
    import faiss
    from sentence_transformers.util.quantization import quantize_embeddings

    index = faiss.IndexBinaryFlat(corpus.shape[1])
    index.add(quantize_embeddings(corpus, "ubinary"))
    codes = quantize_embeddings(corpus, "int8").astype(np.int32)

    def search(queries):
        _, candidates = index.search(quantize_embeddings(queries, "ubinary"), 10 * multiplier)
        scores = np.einsum("qd,qkd->qk", queries, codes[candidates].astype(np.float32))
        order = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        return np.take_along_axis(candidates, order, axis=1).tolist()

    return search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--out", type=Path, default=Path("runs/bench/quantization.md"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from sentence_transformers.util.quantization import quantize_embeddings

    data = resolve_data_dir(download=False)
    with gzip.open(data / "wiki" / "sentences.txt.gz", "rt", encoding="utf-8") as handle:
        lines = list(dict.fromkeys(line.strip() for line in handle if line.strip()))
    if len(lines) < args.corpus + args.queries:
        sys.exit(f"{data}/wiki/sentences.txt.gz has {len(lines)} distinct sentences")
    corpus_texts, query_texts = lines[: args.corpus], lines[args.corpus : args.corpus + args.queries]
    encoder = SentenceEncoder.load(MODEL).with_dtype("fp32")

    def encode(texts):
        return encoder.encode(texts, batch_size=128, show_progress=True)

    cache = Path("runs/bench/quantization")
    corpus = cached(cache / f"wiki-corpus-{args.corpus}.npy", encode, corpus_texts)
    queries = cached(cache / f"wiki-queries-{args.queries}.npy", encode, query_texts)
    dim = corpus.shape[1]

    flat = SentenceIndex.build(corpus, corpus_texts, "flat")
    exact_ms, exact = median_ms(lambda q: flat.search(q, 10), queries)
    truth = [set(row) for row in ids_of(exact)]

    def recall(result) -> float:
        return 100 * float(
            np.mean([len(t & set(r)) / 10 for t, r in zip(truth, ids_of(result), strict=True)])
        )

    rows = [("sentcl flat (float32, exact)", bytes_per_vector("float32", dim), "", exact_ms, 100.0)]
    ours_codes = quantize(corpus, "ubinary")
    theirs_codes = quantize_embeddings(corpus, "ubinary")
    identical = bool(np.array_equal(ours_codes, theirs_codes))
    for multiplier in (1, 4, 10):
        index = SentenceIndex.build(corpus, corpus_texts, "binary")
        index.rescore_multiplier = multiplier
        ms, found = median_ms(lambda q, index=index: index.search(q, 10), queries)
        label = (
            "sentcl binary, Hamming only"
            if multiplier == 1
            else f"sentcl binary + int8 rescore ×{multiplier} (dequantised)"
        )
        extra = "" if multiplier == 1 else f"+ {bytes_per_vector('int8', dim)} on disk (memory-mapped)"
        rows.append((label, bytes_per_vector("ubinary", dim), extra, ms, recall(found)))
    for multiplier in (4, 10):
        ms, found = median_ms(st_recommended(corpus, multiplier), queries)
        label = f"sentence-transformers recommended: binary + int8 rescore ×{multiplier} (codes as they are)"
        extra = f"+ {bytes_per_vector('int8', dim)} on disk (its example: a usearch view)"
        rows.append((label, bytes_per_vector("ubinary", dim), extra, ms, recall(found)))
    for multiplier, rescore in ((1, False), (4, True), (10, True)):
        ms, found = median_ms(st_search(theirs_codes, multiplier, rescore), queries)
        label = (
            "sentence-transformers semantic_search_faiss, no rescore"
            if not rescore
            else f"sentence-transformers semantic_search_faiss, rescore ×{multiplier} against the bits"
        )
        rows.append((label, bytes_per_vector("ubinary", dim), "", ms, recall(found)))

    # a task with relevance labels: STS-B train as a BEIR folder
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "scripts/own_data_example.py", tmp], check=True, capture_output=True)
        task = read_retrieval(Path(tmp) / "stsb-train-beir")
    docs, asks = (
        unit_rows(encode(task.corpus)).astype(np.float32),
        unit_rows(encode(task.queries)).astype(np.float32),
    )
    ndcg = {}
    for kind, multiplier in (("flat", 1), ("binary", 1), ("binary", 4), ("binary", 10)):
        index = SentenceIndex.build(docs, task.corpus, kind)
        index.rescore_multiplier = multiplier
        ranked = np.array([[hit.id for hit in row] for row in index.search(asks, 100)])
        ndcg[f"{kind}×{multiplier}"] = retrieval_metrics(ranked, task.relevant)["ndcg@10"]

    where = machine()
    lines_out = [
        f"Wiki sentences: {args.corpus:,} documents, {args.queries:,} queries, {MODEL} ({dim} dims); "
        f"{where}; {time.strftime('%Y-%m-%d')}. Recall@10: overlap with the exact float top 10. "
        f"sentcl's and sentence-transformers' ubinary codes identical: {identical}.",
        "",
        "| search | bytes / vector in memory | also | ms / query | Recall@10 |",
        "|---|---:|---|---:|---:|",
    ]
    lines_out += [f"| {a} | {b} | {c} | {d:.3f} | {e:.1f} |" for a, b, c, d, e in rows]
    lines_out += [
        "",
        f"STS-B train as retrieval ({len(task.queries):,} queries, {len(task.corpus):,} documents), nDCG@10: "
        + ", ".join(f"{k} {v:.2f}" for k, v in ndcg.items()),
    ]
    table = "\n".join(lines_out)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table + "\n")
    args.out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "ndcg": ndcg, "machine": where}, indent=2)
    )


if __name__ == "__main__":
    main()
