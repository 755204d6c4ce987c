"""``sentcl index``: a faiss index of a corpus (one sentence per line), saved with its texts."""

from __future__ import annotations

import argparse

from sentcl.atomic_write import check_replaceable
from sentcl.cli.common import (
    PICKLES,
    add_dtype_arguments,
    add_overwrite_argument,
    inference_encoder,
    positive_int,
)
from sentcl.data import read_sentences
from sentcl.embedder import Batched
from sentcl.model import pooler_argument
from sentcl.search import SentenceIndex

NAMES = ("index",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "index", parents=[PICKLES], help="build a faiss index of a corpus (one sentence per line)"
    )
    p.add_argument("model")
    p.add_argument("corpus")
    p.add_argument("--out", required=True, help="index folder")
    p.add_argument(
        "--kind", default="auto", choices=["auto", "flat", "ivf", "binary"],
        help="flat: exact; ivf: approximate (auto from 100k sentences); binary: 1 bit per dimension in "
        "memory, rescored with int8 codes (docs/serving.md)",
    )  # fmt: skip
    p.add_argument(
        "--rescore", type=positive_int, default=4, metavar="M",
        help="binary: rescore the M × top-k nearest by Hamming distance (default 4)",
    )  # fmt: skip
    add_overwrite_argument(p, "--out")
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--batch-size", type=positive_int, default=128)
    add_dtype_arguments(p, default="auto", dim=False)


def run_command(args: argparse.Namespace) -> int:
    check_replaceable(args.out, "index", args.overwrite, "--out")
    sentences = [row[0] for row in read_sentences(args.corpus).rows]
    encoder = inference_encoder(args)
    index = SentenceIndex.of_corpus(
        Batched(encoder, args.batch_size, show_progress=True), sentences, kind=args.kind, model=encoder.source
    )
    index.rescore_multiplier = args.rescore
    index.save(args.out, overwrite=args.overwrite)
    print(f"{args.out}: {len(index)} sentences, {index.kind} index, model {index.model}")
    return 0
