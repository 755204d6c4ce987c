"""``sentcl evaluate``: STS, SentEval transfer, the user's own pair files and BEIR folders, optionally after
a post-processor (fitted now or loaded)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sentcl import finite_json
from sentcl.atomic_write import atomic_file, check_file_target, check_replaceable
from sentcl.cli.common import (
    DATA_DIR_HELP,
    PICKLES,
    add_dtype_arguments,
    add_fit_arguments,
    add_overwrite_argument,
    dimensions,
    fit,
    inference_encoder,
    positive_int,
)  # fmt: skip
from sentcl.config import ConfigError
from sentcl.embedder import Batched, Embedder
from sentcl.evaluation import resolve_data_dir
from sentcl.evaluation.senteval_protocols import PROTOCOLS
from sentcl.evaluation.suite import EvaluationSuite
from sentcl.evaluation.tasks import known_tasks, needs_data_dir
from sentcl.model import POOLERS
from sentcl.model.pooling import LOADING_DEFAULT
from sentcl.postprocess import POSTPROCESSORS, PostProcessedEmbedder, load_postprocessor
from sentcl.postprocess.corpus import fit_corpus

NAMES = ("evaluate",)


def add_parser(commands) -> None:
    p = commands.add_parser("evaluate", parents=[PICKLES], help="evaluate a model on STS")
    p.add_argument("model", help="a model folder, a sentcl run folder or a hub id")
    p.add_argument(
        "--pooler",
        choices=list(POOLERS),
        help=f"default: the one saved with the model, else {LOADING_DEFAULT}",
    )
    p.add_argument(
        "--tasks",
        default="sts",
        help=f"comma-separated task names (sts: the 7-task table, transfer: SentEval's): {known_tasks()}; or "
        f"your own data: a pair file (.csv/.tsv/.jsonl with sentence1, sentence2, score or label) or a "
        f"retrieval folder in BEIR's layout (docs/evaluation.md)",
    )
    p.add_argument("--aggregation", default="all", choices=["all", "mean", "wmean"], help="for STS12–16")
    p.add_argument(
        "--transfer-protocol",
        default="simcse",
        choices=list(PROTOCOLS),
        help="simcse: SentEval's PyTorch logistic regression as SimCSE's paper ran it (default); "
        "senteval-sklearn: SentEval's scikit-learn path",
    )
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--json", help="also write all scores to this JSON file")
    p.add_argument(
        "--postprocess", help="whitening | flow | abtt (fitted now), or a saved post-processor folder"
    )
    add_fit_arguments(p)
    p.add_argument("--save-postprocess", help="save the fitted post-processor in this folder")
    add_overwrite_argument(p, "--save-postprocess")
    add_dtype_arguments(p, default="fp32")


def run_command(args: argparse.Namespace) -> int:
    if args.save_postprocess:  # refused before anything is encoded, fitted or written
        if args.postprocess not in POSTPROCESSORS:
            known = ", ".join(POSTPROCESSORS)
            raise ConfigError(
                f"--save-postprocess saves a post-processor fitted now: pass --postprocess {known}"
            )
        check_replaceable(args.save_postprocess, "postprocessor", args.overwrite, "--save-postprocess")
    if args.json:
        check_file_target(args.json, "--json", args.overwrite)
    # the user's own files need no shared data; a post-processor fitted on a named corpus does
    needed = needs_data_dir(args.tasks) or (args.postprocess and not Path(args.postprocess).is_dir())
    data_dir = resolve_data_dir(args.data_dir) if needed else Path()
    suite = EvaluationSuite(data_dir, args.tasks, args.aggregation, args.transfer_protocol)
    dtype = args.dtype
    encoder = inference_encoder(args)
    # prompts: retrieval tasks encode queries and documents with them
    embedder: Embedder = Batched(encoder, args.batch_size, dim=dimensions(args.dim, encoder.dimension))
    label = f"{args.model} (pooler {encoder.pooler}{'' if dtype == 'fp32' else ', ' + dtype})"
    if args.postprocess:
        if Path(args.postprocess).is_dir():
            processor = load_postprocessor(args.postprocess)
        elif args.postprocess in POSTPROCESSORS:
            processor = fit(args.postprocess, embedder, fit_corpus(args.fit_on, data_dir, args.fit_max))
            if args.save_postprocess:
                processor.save(
                    args.save_postprocess, fitted_on=f"{args.model}: {args.fit_on}", overwrite=args.overwrite
                )
        else:
            known = ", ".join(POSTPROCESSORS)
            raise ConfigError(
                f"--postprocess {args.postprocess!r}: neither a saved folder nor one of {known}"
            )
        embedder = PostProcessedEmbedder(embedder, processor)
        label += f" + {processor.name}"
    metrics, tables = suite.run(embedder)
    print(label)
    print(tables)
    if args.json:
        payload = {
            "model": args.model,
            "pooler": encoder.pooler,
            "postprocess": args.postprocess,
            "metrics": metrics,
        }
        with atomic_file(Path(args.json)) as handle:
            finite_json.dump(payload | suite.results, handle, indent=2)
    return 0
