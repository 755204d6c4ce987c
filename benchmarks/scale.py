"""Beyond one machine, measured on this one (issue 58, docs/scale.md): encode ROWS sentences with the Ray
engine at 1 and 2 actors against the single-process ``sentcl encode``, then index the vectors with LanceDB
(IVF-PQ on disk) and faiss (in memory, and with its lists on disk) and search them.

The corpus: the shared wiki sentences and SciFact's sentences (its abstracts split by sentcl's corpus reader),
repeated with a fixed shuffle per repetition until ROWS (each sentence about ROWS / 116k times). Each step
runs in a process of its own (its peak RSS is that process's; a Ray job's actors report theirs):

* encode: wall time and sentences/s at ``--dtype`` (default auto, what a user gets); a Ray job's time
  includes starting Ray and its actors (as a user waits for it);
* equal: the first ``EQUAL_ROWS`` rows in fp32 by both engines, the largest difference of a coordinate;
* index: build time, size on disk, peak RSS, for faiss as ``sentcl index`` builds it (IVF from 100k
  rows), faiss with the same cells but its inverted lists on disk (OnDiskInvertedLists,
  faiss.contrib.ondisk), and LanceDB IVF-PQ (√rows cells, dimension / 8 codes, refine factor 10);
* search: 1,000 SciFact claims as queries, one at a time: latency p50 / p99, and recall@10 against exact
  search (faiss flat). The corpus repeats sentences, so recall counts a returned row as right when its exact
  cosine reaches the exact 10th best (ties between copies are not misses).

    python benchmarks/scale.py --rows 1000000 --out runs/bench/scale.md --json runs/bench/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import data_dir, model_path  # noqa: E402

from sentcl.hardware import peak_rss_mb  # noqa: E402

EQUAL_ROWS = 5_000
QUERIES = 1_000
TOP_K = 10


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def unique_sentences() -> list[str]:
    import gzip

    from sentcl.data.corpus import read_corpus

    with gzip.open(data_dir() / "wiki" / "sentences.txt.gz", "rt", encoding="utf-8") as handle:
        wiki = [line.strip() for line in handle if line.strip()]
    scifact = [row[0] for row in read_corpus(data_dir() / "beir" / "scifact", "sentence").rows]
    return wiki + scifact


def write_corpus(path: Path, rows: int) -> int:
    """``rows`` lines: the unique sentences, shuffled anew (seeded) each repetition; returns how many."""
    pool = unique_sentences()
    rng = random.Random(0)
    written = 0
    with path.open("w", encoding="utf-8") as handle:
        while written < rows:
            order = pool[:]
            rng.shuffle(order)
            for sentence in order[: rows - written]:
                handle.write(sentence.replace("\n", " ") + "\n")
            written += min(len(order), rows - written)
    return len(pool)


# ----------------------------------------------------------------------------------- steps (own process)
def step_encode_single(work: Path, dtype: str, rows_file: str) -> dict:
    from sentcl.cli.main import main

    out = work / f"single-{dtype}.npy"
    start = time.perf_counter()
    assert main(["encode", model_path(), rows_file, "--out", str(out), "--dtype", dtype, "--overwrite"]) == 0
    return {"wall_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb()}


def step_encode_ray(work: Path, dtype: str, rows_file: str, actors: int) -> dict:
    import ray

    from sentcl.integrations.ray_data import RayEncodeJob, encode_with_ray

    cores = len(os.sched_getaffinity(0))
    rows = sum(1 for _ in open(rows_file, encoding="utf-8"))  # noqa: PTH123, SIM115
    start = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    job = RayEncodeJob(
        model_path(), [rows_file], str(work / f"ray-{actors}-{dtype}"), actors=actors,
        cpus_per_actor=max(1, cores // actors), rows_per_shard=max(1_000, rows // (8 * actors)), dtype=dtype,
        overwrite=True,
    )  # fmt: skip
    result = encode_with_ray(job)
    wall = time.perf_counter() - start
    ray.shutdown()
    assert not result.failed, result.failed
    return {"wall_s": wall, "peak_rss_mb": peak_rss_mb(), "actor_peak_rss_mb": sorted(result.actors.values())}


def step_equal(work: Path) -> dict:
    from sentcl.integrations.ray_data import shard_rows

    single = np.load(work / "single-fp32.npy")
    _, shards = shard_rows(work / "ray-2-fp32")
    return {"rows": len(single), "max_abs_diff": float(np.abs(single - shards).max())}


def queries(dtype: str) -> np.ndarray:
    from sentcl.embedder import Batched
    from sentcl.model.inference import for_inference, load_encoder

    claims = [json.loads(line)["text"] for line in (data_dir() / "beir" / "scifact" / "queries.jsonl").open()]
    encoder = for_inference(load_encoder(model_path()), dtype, device="cpu")
    return Batched(encoder, 128).encode(claims[:QUERIES])


def step_index(work: Path, backend: str, dtype: str) -> dict:
    vectors = np.load(work / f"single-{dtype}.npy", mmap_mode="r")
    folder = work / f"index-{backend}"
    start = time.perf_counter()
    if backend == "lance":
        from sentcl.search import LanceIndex

        def batches():
            for at in range(0, len(vectors), 65_536):
                part = np.asarray(vectors[at : at + 65_536], dtype=np.float32)
                yield [str(i) for i in range(at, at + len(part))], [""] * len(part), part

        LanceIndex.build(folder, batches(), model="all-MiniLM-L6-v2", overwrite=True)
    elif backend == "faiss-on-disk":
        build_faiss_on_disk(vectors, folder)
    else:
        from sentcl.search import SentenceIndex

        index = SentenceIndex.build(np.asarray(vectors, dtype=np.float32), [""] * len(vectors), kind=backend)
        index.save(folder, overwrite=True)
    return {
        "build_s": time.perf_counter() - start,
        "disk_mb": folder_mb(folder),
        "build_rss_mb": peak_rss_mb(),
    }


ON_DISK_SAMPLE = 256_000  # rows the on-disk IVF's cells are trained on (64 a cell at 1M rows)
ON_DISK_SHARD = 200_000  # rows added to an in-memory shard before it is merged into the lists on disk


def build_faiss_on_disk(vectors: np.ndarray, folder: Path) -> None:
    """faiss's recipe for an IVF larger than memory (faiss.contrib.ondisk): the cells trained on a sample,
    the rows added shard by shard to in-memory copies, then merged into one inverted-lists file
    (OnDiskInvertedLists) that a search maps rather than reads. The cells and nprobe of ``sentcl index``'s
    in-memory IVF (4√rows cells, 16 probed), so the two differ in where the lists live."""
    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    from sentcl.search.index import ivf_cells

    rows, dim = vectors.shape
    cells = ivf_cells(rows)
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, cells, faiss.METRIC_INNER_PRODUCT)
    sample = np.sort(np.random.default_rng(0).choice(rows, size=min(rows, ON_DISK_SAMPLE), replace=False))
    index.train(unit(vectors[sample]))
    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for at in range(0, rows, ON_DISK_SHARD):
        shard = faiss.clone_index(index)
        part = unit(vectors[at : at + ON_DISK_SHARD])
        shard.add_with_ids(part, np.arange(at, at + len(part), dtype=np.int64))
        shards.append(str(folder / f"shard-{len(shards)}.faiss"))
        faiss.write_index(shard, shards[-1])
        del shard
    merge_ondisk(index, shards, str(folder / "lists.ivfdata"))
    faiss.write_index(index, str(folder / "index.faiss"))
    for shard_file in shards:
        Path(shard_file).unlink()


def on_disk_searcher(folder: Path):
    import faiss

    from sentcl.search.index import NPROBE

    index = faiss.read_index(str(folder / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR)
    index.nprobe = NPROBE

    def search(query: np.ndarray) -> list[int]:
        _, ids = index.search(unit(query[None, :]), TOP_K)
        return [int(i) for i in ids[0] if i >= 0]

    return search


def step_search(work: Path, backend: str, dtype: str) -> dict:
    if backend == "faiss-on-disk":
        return search_loop(work, dtype, lambda: on_disk_searcher(work / f"index-{backend}"))
    from sentcl.search import load_index

    def sentcl_searcher():
        index = load_index(work / f"index-{backend}")
        return lambda query: [hit.id for hit in index.search(query[None, :], top_k=TOP_K)[0]]

    return search_loop(work, dtype, sentcl_searcher)


def search_loop(work: Path, dtype: str, open_index) -> dict:
    wanted = np.load(work / "exact.npy")  # [Q, 2]: the exact 10th-best cosine and, for the check, the best
    vectors = np.load(work / f"single-{dtype}.npy", mmap_mode="r")
    asked = np.load(work / "queries.npy")
    start = time.perf_counter()
    search = open_index()
    opened = time.perf_counter() - start
    latencies, recalls = [], []
    for query, (tenth, _) in zip(asked, wanted, strict=True):
        begin = time.perf_counter()
        ids = search(query)
        latencies.append(time.perf_counter() - begin)
        rows = np.asarray(vectors[ids], dtype=np.float32)
        exact = rows @ query / (np.linalg.norm(rows, axis=1) * np.linalg.norm(query))
        recalls.append(float(np.mean(exact >= tenth - 1e-5)))
    return {
        "open_s": opened, "p50_ms": 1e3 * float(np.percentile(latencies, 50)),
        "p99_ms": 1e3 * float(np.percentile(latencies, 99)), "recall@10": float(np.mean(recalls)),
        "search_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return np.ascontiguousarray(rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12))


def step_exact(work: Path, dtype: str) -> dict:
    """The queries (encoded here) and exact search's 10th-best cosine for each, by faiss flat (imported
    after torch: the other order crashes in faiss's OpenMP on this build)."""
    asked = unit(queries(dtype))
    import faiss

    vectors = np.load(work / f"single-{dtype}.npy", mmap_mode="r")
    index = faiss.IndexFlatIP(vectors.shape[1])
    for at in range(0, len(vectors), 65_536):
        index.add(unit(vectors[at : at + 65_536]))
    scores, _ = index.search(asked, TOP_K)
    np.save(work / "queries.npy", asked)
    np.save(work / "exact.npy", np.stack([scores[:, -1], scores[:, 0]], axis=1))
    return {"queries": len(asked)}


INDEXES = (
    ("auto", "faiss IVF (in memory)"),
    ("faiss-on-disk", "faiss IVF, lists on disk"),
    ("lance", "lance IVF-PQ (on disk)"),
)
STEPS = {
    "encode-single": lambda a: step_encode_single(a.work, a.dtype, a.rows_file),
    "encode-ray": lambda a: step_encode_ray(a.work, a.dtype, a.rows_file, a.actors),
    "equal": lambda a: step_equal(a.work),
    "exact": lambda a: step_exact(a.work, a.dtype),
    "index": lambda a: step_index(a.work, a.backend, a.dtype),
    "search": lambda a: step_search(a.work, a.backend, a.dtype),
}


def run_step(name: str, work: Path, **options) -> dict:
    """Run one step in a process of its own; its result is kept in WORK/steps.json, so a rerun after an
    interruption starts at the first step not finished (delete the file to measure everything again)."""
    done_file = work / "steps.json"
    finished = json.loads(done_file.read_text(encoding="utf-8")) if done_file.exists() else {}
    key = " ".join([name, *(f"{k}={v}" for k, v in sorted(options.items()))])
    if key in finished:
        print(f"{key}: done before, {finished[key]}", file=sys.stderr)
        return finished[key]
    command = [sys.executable, __file__, "--step", name, "--work", str(work)]
    for option, value in options.items():
        command += [f"--{option.replace('_', '-')}", str(value)]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "RAY_worker_niceness": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} {options}: failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{key}: {result}", file=sys.stderr)
    finished[key] = result
    temporary = done_file.with_suffix(".tmp")
    temporary.write_text(json.dumps(finished, indent=2), encoding="utf-8")
    temporary.replace(done_file)
    return result


def machine() -> str:
    import torch

    lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name")), "?")
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{name}, {len(os.sched_getaffinity(0))} cores, torch capability {capability}"


def measure(rows: int, work: Path, dtype: str) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus-{rows}.txt"
    unique = write_corpus(corpus, rows)
    sample = work / f"corpus-{EQUAL_ROWS}.txt"
    write_corpus(sample, min(rows, EQUAL_ROWS))
    results: dict = {"rows": rows, "unique": unique, "dtype": dtype, "machine": machine()}
    for actors in (1, 2):  # the actors' `auto` measured once per thread count and cached, not timed
        run_step("encode-ray", work, dtype=dtype, rows_file=sample, actors=actors)
    results["encode"] = {
        "single process": run_step("encode-single", work, dtype=dtype, rows_file=corpus),
        "ray, 1 actor": run_step("encode-ray", work, dtype=dtype, rows_file=corpus, actors=1),
        "ray, 2 actors": run_step("encode-ray", work, dtype=dtype, rows_file=corpus, actors=2),
    }
    run_step("encode-single", work, dtype="fp32", rows_file=sample)
    run_step("encode-ray", work, dtype="fp32", rows_file=sample, actors=2)
    results["equal"] = run_step("equal", work)
    run_step("exact", work, dtype=dtype)
    results["index"] = {}
    for backend, label in INDEXES:
        built = run_step("index", work, backend=backend, dtype=dtype)
        results["index"][label] = built | run_step("search", work, backend=backend, dtype=dtype)
    return results


def report(results: dict) -> str:
    rows = results["rows"]
    lines = [
        f"Measured by `python benchmarks/scale.py --rows {rows}` on {results['machine']}: {rows:,} sentences "
        f"({results['unique']:,} unique, repeated with a fixed shuffle), --dtype {results['dtype']}.",
        "",
        "| encode | wall (s) | sentences/s | peak RSS (MB) |",
        "|---|---|---|---|",
    ]
    for name, run in results["encode"].items():
        rss = f"{run['peak_rss_mb']:.0f}"
        if "actor_peak_rss_mb" in run:
            rss += " driver; " + ", ".join(f"{r:.0f}" for r in run["actor_peak_rss_mb"]) + " per actor"
        lines.append(f"| {name} | {run['wall_s']:.1f} | {rows / run['wall_s']:.1f} | {rss} |")
    equal = results["equal"]
    lines += [
        "",
        f"Vectors of the first {equal['rows']:,} rows in fp32, single process against Ray with 2 actors: "
        f"largest difference {equal['max_abs_diff']:.1e}.",
        "",
        "| index | build (s) | on disk (MB) | peak RSS build / search (MB) | recall@10 | p50 (ms) | p99 (ms) "
        "|",
        "|---|---|---|---|---|---|---|",
    ]
    for name, run in results["index"].items():
        lines.append(
            f"| {name} | {run['build_s']:.1f} | {run['disk_mb']:.0f} | {run['build_rss_mb']:.0f} / "
            f"{run['search_rss_mb']:.0f} | "
            f"{run['recall@10']:.3f} | {run['p50_ms']:.2f} | {run['p99_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "bench" / "scale")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    parser.add_argument("--rows-file", help=argparse.SUPPRESS)
    parser.add_argument("--actors", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(STEPS[args.step](args)))
        return 0
    results = measure(args.rows, args.work, args.dtype)
    table = report(results)
    print(table)
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
