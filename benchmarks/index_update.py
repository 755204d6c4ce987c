"""What `sentcl index --update` costs against a rebuild, and what ten rounds of updates do to an IVF index.

    python benchmarks/index_update.py [--documents 100000] [--share 0.01] [--rounds 10]
        [--model sentence-transformers/all-MiniLM-L6-v2] [--out runs/index-update]

The documents: the distinct sentences of ``$SENTCL_DATA``'s wiki, NLI and STS-B files, shuffled (seed 0),
one a document (``{"_id", "text"}``); the first ``--documents`` are the corpus, later ones are added, the
last 1,000 are the queries.

1. **Update against rebuild**: `sentcl index MODEL corpus --kind flat` (the rebuild, timed as a command:
   loading, encoding, writing), then the corpus with ``--share`` of it changed (a third removed, a third
   edited, a third new) brought up to date by `sentcl index --update` (timed the same way); the documents
   each encoded.
2. **IVF after rounds of updates**: an IVF index of the corpus's vectors (cells trained once), then
   ``--rounds`` rounds of `--update`, each removing ``--share / 2`` of the documents and adding as many
   new ones; its recall@10 against exact search of the final corpus, beside an IVF index trained afresh
   on the same vectors (same cells count and nprobe).

Prints a JSON record (machine, seconds, counts, recalls).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from sentcl.hardware import describe_machine


def pool(data: Path) -> list[str]:
    with gzip.open(data / "wiki" / "sentences.txt.gz", "rt", encoding="utf-8") as handle:
        texts = {line.strip() for line in handle}
    with gzip.open(data / "nli" / "triplets.csv.gz", "rt", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            texts.update((row["sent0"], row["sent1"], row["hard_neg"]))
    for split in ("train", "dev"):
        for line in (
            (data / "stsb" / "senteval" / f"sts-{split}.csv").read_text(encoding="utf-8").splitlines()
        ):
            texts.update(line.split("\t")[5:7])
    ordered = sorted(t for t in texts if t)
    random.Random(0).shuffle(ordered)
    return ordered


def write(path: Path, documents: dict[str, str]) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"_id": key, "text": text}) + "\n" for key, text in documents.items())
    return path


def sentcl(*argv: str) -> tuple[float, str]:
    """A `sentcl` command's wall-clock seconds and its output."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "sentcl"), *argv], capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"sentcl {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout.strip()


def encoded(output: str) -> int:
    return int(re.search(r"([\d,]+) documents encoded", output).group(1).replace(",", ""))


def recall_at_10(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--share", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--out", default="runs/index-update")
    args = parser.parse_args()
    from sentcl.embedder import Batched
    from sentcl.model.inference import for_inference, load_encoder
    from sentcl.search import SentenceIndex, load_index

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    texts = pool(Path(os.environ.get("SENTCL_DATA", "../shared/data")))
    n, step = args.documents, int(args.documents * args.share)
    queries, spare = texts[-1000:], iter(range(n, len(texts) - 1000))
    corpus = {f"s{i}": texts[i] for i in range(n)}
    record: dict = {"machine": describe_machine(), "documents": n, "share": args.share, "model": args.model}
    flat = out / "flat"
    record["rebuild_s"], _ = sentcl("index", args.model, str(write(out / "corpus.jsonl", corpus)), "--out",
                                    str(flat), "--kind", "flat", "--overwrite")  # fmt: skip
    ids = list(corpus)
    rng = random.Random(1)
    for key in rng.sample(ids, step // 3):  # a third removed
        del corpus[key]
    for key in rng.sample(list(corpus), step // 3):  # a third edited
        corpus[key] += " (revised)"
    for _ in range(step - 2 * (step // 3)):  # a third new
        i = next(spare)
        corpus[f"s{i}"] = texts[i]
    record["update_s"], output = sentcl("index", args.model, str(write(out / "corpus-1.jsonl", corpus)),
                                        "--out", str(flat), "--update")  # fmt: skip
    record["update_encoded"], record["update_output"] = encoded(output), output
    record["update_share_of_rebuild"] = record["update_s"] / record["rebuild_s"]

    base = load_index(flat)  # the IVF index: trained once on these vectors, then updated round by round
    ivf = out / "ivf"
    SentenceIndex.build(base.stored_vectors(), base.texts, "ivf", model=base.model, documents=base.documents,
                        settings=base.settings).save(ivf, overwrite=True)  # fmt: skip
    rounds = []
    for round_ in range(args.rounds):
        for key in rng.sample(list(corpus), step // 2):
            del corpus[key]
        for _ in range(step // 2):
            i = next(spare)
            corpus[f"s{i}"] = texts[i]
        seconds, output = sentcl("index", args.model, str(write(out / "corpus-r.jsonl", corpus)), "--out",
                                 str(ivf), "--update")  # fmt: skip
        rounds.append({"round": round_ + 1, "seconds": seconds, "encoded": encoded(output)})
    record["rounds"] = rounds
    updated = load_index(ivf)
    vectors = updated.stored_vectors()
    encoder = for_inference(load_encoder(args.model), updated.settings["precision"])
    asked = np.asarray(Batched(encoder, 64).encode(queries), dtype=np.float32)
    exact = SentenceIndex.build(vectors, updated.texts, "flat")
    fresh = SentenceIndex.build(vectors, updated.texts, "ivf", nlist=updated.index.nlist)
    top = {name: np.array([[h.id for h in hits] for hits in index.search(asked, 10)])
           for name, index in (("exact", exact), ("updated", updated), ("fresh", fresh))}  # fmt: skip
    record["ivf"] = {
        "cells": updated.index.nlist, "nprobe": updated.index.nprobe, "documents": len(updated),
        "recall@10_updated": recall_at_10(top["updated"], top["exact"]),
        "recall@10_fresh": recall_at_10(top["fresh"], top["exact"]),
    }  # fmt: skip
    print(json.dumps(record, indent=2))
    (out / "record.json").write_text(json.dumps(record, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
