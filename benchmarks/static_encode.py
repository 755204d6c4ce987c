"""How fast one static model encodes, by path: sentcl (ids from tokie where checked equal, token_ids.py),
sentcl with Hugging Face tokenizers alone, and sentence-transformers' own ``encode`` at the bench's batch
(64) and at large batches (its best on a CPU). The same weights each time; 10,000 wiki sentences, every
tokenizer on both cores, the paths alternating, the median of ``--repeats`` runs; checks that every path
gives the same vectors.

    python benchmarks/static_encode.py runs/bench/students/static/model
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from bench import wiki


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a static model's folder (sentcl's or sentence-transformers')")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from sentence_transformers import SentenceTransformer

    from sentcl.hardware import describe_machine
    from sentcl.model import load_encoder
    from sentcl.model.token_ids import TokenizerIds

    sentences = wiki(20_000, 10_000)
    ours = load_encoder(args.model)
    plain = load_encoder(args.model)
    plain.token_ids = TokenizerIds(plain.fast)
    peer = SentenceTransformer(args.model, device="cpu")
    paths = {
        f"sentcl ({type(ours.token_ids).__name__}), batch 64": lambda: ours.encode(sentences, batch_size=64),
        "sentcl, Hugging Face tokenizers only, batch 64": lambda: plain.encode(sentences, batch_size=64),
        "sentence-transformers encode, batch 64": lambda: peer.encode(sentences, batch_size=64),
        "sentence-transformers encode, batch 4,096": lambda: peer.encode(sentences, batch_size=4096),
        "sentence-transformers encode, batch 10,000": lambda: peer.encode(sentences, batch_size=10_000),
    }
    vectors = {name: run() for name, run in paths.items()}  # also the warm-up
    first = next(iter(vectors.values()))
    differences = {name: float(np.abs(v - first).max()) for name, v in vectors.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, run in paths.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"{describe_machine()}; {time.strftime('%Y-%m-%d')}; {args.model}\n")
    print("| path | sentences/s | largest difference to the first path's vectors |")
    print("|---|---:|---:|")
    for name, measured in times.items():
        print(f"| {name} | {len(sentences) / statistics.median(measured):,.0f} | {differences[name]:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
