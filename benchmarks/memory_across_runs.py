"""Resident memory of one process that runs several ``sentcl adapt`` runs in a row, as the domain study does.

    /usr/bin/time -v python benchmarks/memory_across_runs.py [--methods simcse,contrastive_tension,tsdae,
        cropping,ict] [--steps 4] [--keep-freed] [--heap default|mapped]

From all-MiniLM-L6-v2 on ``$SENTCL_DATA/beir/scifact``: each method for ``--steps`` steps, its checkpoint
chosen on the train judgements (no test report), each run into a temporary folder. After each run it prints
the resident memory, the process's peak so far and how many tensors are still alive (after a garbage
collection). ``--keep-freed`` stops the runs from handing their freed memory back to the system
(``sentcl.hardware.give_back_memory`` made a no-op), to see what a process kept without it.
``--heap mapped`` fixes glibc's mmap threshold at 1 MiB as the study harnesses do
(``sentcl.hardware.map_large_allocations``); ``default`` (the default) leaves glibc's own dynamic threshold.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import tempfile
import time
from pathlib import Path

import torch


def resident_mb() -> float:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def live_tensors() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="simcse,contrastive_tension,tsdae,cropping,ict")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--keep-freed", action="store_true")
    parser.add_argument("--heap", choices=["default", "mapped"], default="default")
    args = parser.parse_args()
    import sentcl.training.adapt as adapt_module
    import sentcl.training.run as run_module
    from sentcl.hardware import describe_machine, map_large_allocations
    from sentcl.training.adapt import AdaptRequest, adapt

    if args.heap == "mapped" and not map_large_allocations():
        raise SystemExit(
            "--heap mapped: glibc's mallopt is not available here (or MALLOC_MMAP_THRESHOLD_ is set)"
        )
    if args.keep_freed:
        adapt_module.give_back_memory = run_module.give_back_memory = lambda: None
    data = Path(os.environ.get("SENTCL_DATA", "../shared/data")) / "beir" / "scifact"
    print(f"{describe_machine()}; heap {args.heap}; start: {resident_mb():.0f} MB resident", flush=True)
    for method in args.methods.split(","):
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="sentcl-memory-") as folder:
            adapt(AdaptRequest(
                "sentence-transformers/all-MiniLM-L6-v2", str(data), str(Path(folder) / "run"), method,
                steps=args.steps, eval_steps=args.steps, choose=str(data / "qrels" / "train.tsv"),
                report=None, report_dtype="auto", max_length=128 if method == "ict" else None,
            ))  # fmt: skip
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        seconds = time.perf_counter() - started
        print(f"{method}: {resident_mb():.0f} MB resident after, peak so far {peak:.0f} MB, "
              f"{live_tensors()} tensors alive, {seconds:.0f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
