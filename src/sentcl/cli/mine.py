"""``sentcl mine``: hard negatives for (anchor, positive) pairs, sentence-transformers' rules
(search/mining.py), written as ``sent0, sent1, hard_neg``."""

from __future__ import annotations

import argparse
import logging

import numpy as np

from sentcl.atomic_write import check_file_target
from sentcl.cli.common import PICKLES, add_dtype_arguments, finite_float, inference_encoder, positive_int
from sentcl.data import DataError, read_records, read_sentences
from sentcl.data.writers import check_triplet_target, write_triplets
from sentcl.embedder import Batched
from sentcl.model import pooler_argument
from sentcl.search.mining import MiningError, MiningOptions, mine

NAMES = ("mine",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "mine",
        parents=[PICKLES],
        help="hard negatives for (anchor, positive) pairs: write sent0,sent1,hard_neg",
    )
    p.add_argument("model")
    p.add_argument(
        "pairs", help="(anchor, positive) pairs in any supervised training format (docs/training.md)"
    )
    p.add_argument("--out", required=True, help=".tsv, .csv or .jsonl with sent0, sent1, hard_neg")
    p.add_argument("--corpus", help="more candidate sentences, one per line, beside the positives")
    p.add_argument(
        "--range-min", type=int, default=0,
        help="skip the N best candidates that pass the filters (default 0)",
    )  # fmt: skip
    p.add_argument(
        "--range-max", type=positive_int,
        help="take no more than the N best candidates that pass the filters (default: derived as "
        "sentence-transformers derives it)",
    )  # fmt: skip
    p.add_argument("--num-negatives", type=positive_int, default=3, help="negatives per anchor (default 3)")
    p.add_argument("--absolute-margin", type=finite_float, help="negative ≤ hardest positive score − MARGIN")
    p.add_argument(
        "--relative-margin", type=finite_float, help="negative ≤ hardest positive's score s − |s| × MARGIN"
    )
    p.add_argument(
        "--max-score", type=finite_float, help="skip candidates above this cosine (likely positive)"
    )
    p.add_argument("--min-score", type=finite_float, help="skip candidates below this cosine")
    p.add_argument("--sampling", choices=["top", "random"], default="top")
    p.add_argument("--seed", type=int, default=12, help="random sampling's seed")
    p.add_argument(
        "--keep-near-duplicates", action="store_true",
        help="let a candidate equal to the anchor or a positive (case and spaces folded) be a negative, as "
        "sentence-transformers does",
    )  # fmt: skip
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--overwrite", action="store_true", help="replace a file already at --out")
    add_dtype_arguments(p, default="auto", dim=False)


def run_command(args: argparse.Namespace) -> int:
    check_file_target(args.out, "--out", args.overwrite)
    check_triplet_target(args.out, "--out")
    options = MiningOptions(
        args.range_min, args.range_max, args.num_negatives, args.absolute_margin, args.relative_margin,
        args.max_score, args.min_score, args.sampling, args.seed, not args.keep_near_duplicates,
    )  # fmt: skip
    options.check()  # before anything is read or encoded
    records = read_records(args.pairs)
    if records.n_columns == 1:
        raise DataError(f"{args.pairs}: one sentence per row; mining needs (anchor, positive) pairs")
    if records.n_columns > 2:
        logging.getLogger("sentcl.mine").info("%s: mining for the first two columns", args.pairs)
    pairs = [(row[0], row[1]) for row in records.rows]
    corpus = [row[0] for row in read_sentences(args.corpus).rows] if args.corpus else []
    encoder = inference_encoder(args)
    mined = mine(Batched(encoder, args.batch_size, show_progress=True), pairs, options, corpus)
    if not mined.rows:
        raise MiningError(f"{args.pairs}: no anchor kept a negative; widen --range-max or loosen the margins")
    write_triplets(args.out, mined.rows)
    print(
        f"{args.out}: {len(mined.rows)} rows from {len(pairs)} pairs; {mined.anchors - mined.without} of "
        f"{mined.anchors} anchors kept a negative ({mined.without} none that passes the filters, "
        f"{mined.short} fewer than {options.num_negatives}; range-max {mined.range_max}); cosine with the "
        f"anchor: positives {np.mean(mined.positive_scores):.3f}, negatives "
        f"{np.mean(mined.negative_scores):.3f} (means over rows)"
    )
    return 0
