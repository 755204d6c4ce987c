"""Peak memory of ``data.streaming`` against the in-memory reader on a file of a million rows.

    python benchmarks/streaming_memory.py stream|memory [--copies 16]

Writes /tmp/sentcl_big.txt.gz once (the shared wiki sentences repeated ``--copies`` times, each copy
marked so no row repeats), then, in this process, either builds the streaming dataset (its validation pass)
and draws 50 batches of 64, or reads the file into memory and tokenises it. Prints the rows, the peak RSS
above the loaded tokenizer and the seconds. Run each mode in its own process.
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["stream", "memory"])
    parser.add_argument("--copies", type=int, default=16)
    args = parser.parse_args()
    path = Path("/tmp/sentcl_big.txt.gz")
    if not path.exists():
        source = Path(os.environ.get("SENTCL_DATA", "../shared/data")) / "wiki" / "sentences.txt.gz"
        with gzip.open(source, "rt", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as handle:
            for copy in range(args.copies):
                handle.writelines(f"{line} ({copy})\n" for line in lines)
    from transformers import AutoTokenizer

    from sentcl.data import ContrastiveDataset, DataConfig, read_records
    from sentcl.data.streaming import StreamingDataset
    from sentcl.model.backbone import resolve_model_path

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("sentence-transformers/all-MiniLM-L6-v2"))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.mode == "memory":
        dataset = ContrastiveDataset(read_records(path), tokenizer, 32)
    else:
        dataset = StreamingDataset(path, DataConfig(train_file=str(path), max_length=32), tokenizer, 100_000)
        for _, _batch in zip(range(50), dataset.epoch_batches(42, 0, 0, 64), strict=False):
            pass
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    print(f"{args.mode}: {len(dataset):,} rows; peak RSS above the tokenizer {peak:,.0f} MB; "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
