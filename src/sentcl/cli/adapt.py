"""``sentcl adapt``: adapt a model to a domain's unlabelled text, or fine-tune it on the domain's judgements,
or both in turn (training/adapt.py), chosen and judged by that domain's search where judgements are given."""

from __future__ import annotations

import argparse

from sentcl.cli.common import positive_int
from sentcl.training.adapt import METHODS, AdaptRequest, adapt

NAMES = ("adapt",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "adapt", help="adapt a model to your corpus without labels (SimCSE, TSDAE, …), judged by your search",
        epilog="docs/domain.md walks through it; the run folder resumes like sentcl train's",
    )  # fmt: skip
    p.add_argument("model", help="the model to start from: a folder or a hub id")
    p.add_argument(
        "--corpus", required=True,
        help="your documents: a BEIR folder, a corpus.jsonl (_id, title, text) or a text file, one per line",
    )  # fmt: skip
    p.add_argument("--output", required=True, help="the run folder (the adapted model is OUTPUT/model)")
    p.add_argument(
        "--method", default="simcse", choices=list(METHODS),
        help="default simcse (docs/domain.md: what was measured, and why not tsdae on a trained model); "
        "supervised: fine-tune on --train's judgements",
    )  # fmt: skip
    judged = p.add_argument_group("your judgements (--method supervised, or --then supervised)")
    judged.add_argument(
        "--train", metavar="QRELS",
        help="judgements to train on (a BEIR qrels file, e.g. FOLDER/qrels/train.tsv): (query, relevant "
        "document) pairs, split by query into fit and choose",
    )  # fmt: skip
    judged.add_argument(
        "--then", choices=["supervised"], help="after the label-free --method, the supervised stage"
    )
    judged.add_argument(
        "--choose-share", type=float,
        help="the share of --train's queries held out to choose the checkpoint (default 0.2; not with "
        "--choose)",
    )  # fmt: skip
    judged.add_argument(
        "--hard-negatives", type=int, default=1, choices=[0, 1],
        help="1 (default): one negative per row mined from the start's ranking (ranks 10-49, below the "
        "positive); 0: in-batch negatives only",
    )  # fmt: skip
    judged.add_argument(
        "--fit-queries", type=positive_int, help="fit on the first N of the (seeded) fit queries only"
    )
    p.add_argument(
        "--steps", type=positive_int,
        help="training steps (default 400; supervised: three epochs of the fit pairs)",
    )  # fmt: skip
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences (or documents) a step")
    p.add_argument("--learning-rate", type=float, help="AdamW's peak rate (default 3e-5; supervised: 2e-5)")
    p.add_argument(
        "--eval-steps",
        type=positive_int,
        help="choose (and checkpoint) every N steps (default 100; supervised: at each epoch's end)",
    )
    p.add_argument(
        "--choose", metavar="QRELS",
        help="judgements to choose the checkpoint on (a BEIR qrels file, e.g. FOLDER/qrels/train.tsv); "
        "without, the last step is kept",
    )  # fmt: skip
    p.add_argument(
        "--report", metavar="QRELS",
        help="judgements to report on, never chosen on (e.g. FOLDER/qrels/test.tsv): a before/after table "
        "with paired intervals over the queries, also in OUTPUT/adapt.md",
    )  # fmt: skip
    p.add_argument(
        "--report-dtype", default="fp32", choices=["fp32", "bf16", "auto"],
        help="the report's precision: fp32 (default, the same on every machine) or auto (bf16 where native)",
    )  # fmt: skip
    p.add_argument(
        "--max-length", type=positive_int,
        help="tokens a training row keeps (default: the method's, docs/domain.md; e.g. 128 for ict on a CPU)",
    )  # fmt: skip
    p.add_argument("--pooler", help="default: the model's own")
    p.add_argument("--seed", type=int, default=42, help="the run's seed (data order, noise, dropout)")
    p.add_argument("--overwrite", action="store_true", help="start again in a non-empty output folder")
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint, exactly")


def run_command(args: argparse.Namespace) -> int:
    request = AdaptRequest(
        args.model, args.corpus, args.output, args.method,
        args.steps or (None if args.method == "supervised" else 400), args.batch_size, args.learning_rate,
        args.eval_steps, args.choose, args.report, args.seed, args.overwrite, args.resume, args.pooler,
        args.max_length, args.report_dtype, args.train, args.choose_share, args.hard_negatives,
        args.fit_queries, args.then,
    )  # fmt: skip
    result = adapt(request)
    chosen = f", kept step {result.chosen_step}" if result.chosen_step is not None else ""
    if result.chosen_step == 0:
        chosen += " (no trained step beat the start on your judgements: model/ is the start)"
    method = f"{args.method} then {args.then}" if args.then else args.method
    print(f"{result.output_dir / 'model'}: {result.steps} steps of {method}{chosen}")
    if result.table:
        print(result.table)
    return 0
