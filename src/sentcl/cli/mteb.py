"""``sentcl mteb``: a model evaluated by mteb (its tasks download unless mteb has them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from sentcl.atomic_write import atomic_file, check_file_target
from sentcl.cli.common import PICKLES, add_dtype_arguments, positive_int
from sentcl.config import ConfigError
from sentcl.extras import require
from sentcl.model import pooler_argument

NAMES = ("mteb",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "mteb", parents=[PICKLES], help="evaluate a model with mteb (its tasks download unless mteb has them)"
    )
    p.add_argument("model")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--tasks", help="comma-separated mteb task names (e.g. STSBenchmark,SciFact)")
    which.add_argument("--benchmark", help='an mteb benchmark, e.g. "MTEB(eng, v2)"')
    p.add_argument("--out", help="a JSON file of every task's scores")
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--overwrite", action="store_true", help="replace a file already at --out")
    add_dtype_arguments(p, default="fp32", dim=False)


def run_command(args: argparse.Namespace) -> int:
    mteb = require("mteb", "mteb", "sentcl mteb")
    from sentcl.integrations.mteb import MTEBEncoder, main_scores

    if args.out:
        check_file_target(args.out, "--out", args.overwrite)
    try:
        if args.benchmark:
            tasks = mteb.get_benchmark(args.benchmark)
        else:
            tasks = mteb.get_tasks(tasks=[t.strip() for t in args.tasks.split(",") if t.strip()])
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"--{'benchmark' if args.benchmark else 'tasks'}: {str(exc)[:300]}") from None
    encoder = MTEBEncoder(args.model, dtype=args.dtype, device=args.device, batch_size=args.batch_size,
                          pooler=args.pooler)  # fmt: skip
    scores = main_scores(mteb.evaluate(encoder, tasks, cache=None))
    for name, splits in scores.items():
        for split, values in splits.items():
            print(f"{name} {split}: main score {100 * float(np.mean(values)):.2f}")
    if args.out:
        with atomic_file(Path(args.out)) as handle:
            json.dump(
                {"model": args.model, "mteb": mteb.__version__, "main_scores": scores}, handle, indent=2
            )
    return 0
