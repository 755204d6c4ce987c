"""``sentcl search``: the nearest corpus sentences (or documents: their ids and kept fields too) of a query,
from a folder ``sentcl index`` wrote."""

from __future__ import annotations

import argparse
import json

import numpy as np

from sentcl.cli.common import PICKLES, cosine, positive_int
from sentcl.config import ConfigError
from sentcl.embedder import QUERY, for_role
from sentcl.model.inference import for_inference, load_encoder
from sentcl.search import load_index

NAMES = ("search",)


def add_parser(commands) -> None:
    p = commands.add_parser("search", parents=[PICKLES], help="nearest corpus sentences of a query")
    p.add_argument("index", help="folder written by sentcl index")
    p.add_argument("query", nargs="+")
    p.add_argument("-k", "--top-k", type=positive_int, default=5)
    p.add_argument("--threshold", type=cosine, help="only hits with cosine ≥ this")
    p.add_argument("--model", help="default: the model recorded in the index")
    p.add_argument(
        "--hybrid", action="store_true",
        help="fuse the model's ranking with BM25's over the same texts (reciprocal rank; scores are then "
        "fused ranks, not cosines): pip install 'sentcl[domain]'",
    )  # fmt: skip
    p.add_argument(
        "--device", default="auto", help="auto (a GPU where there is one, else the CPU), cpu, cuda:N"
    )


def run_command(args: argparse.Namespace) -> int:
    index = load_index(args.index)
    model = args.model or index.model
    if not model:
        raise ConfigError(f"{args.index}: the index records no model; pass --model")
    encoder = for_inference(load_encoder(model, allow_pickle=args.allow_pickle), "fp32", device=args.device)
    index.check_dimension(encoder.dimension, model, args.index)
    if args.hybrid and args.threshold is not None:
        raise ConfigError("--threshold is a cosine; --hybrid ranks by fused ranks: use one of them")
    if args.hybrid:
        vectors = np.asarray(for_role(encoder, QUERY).encode(args.query))
        found = index.hybrid_search(vectors, args.query, args.top_k)
    else:
        found = index.query(encoder, args.query, args.top_k, args.threshold)
    for query, hits in zip(args.query, found, strict=True):
        print(f"query: {query}")
        for hit in hits:
            key = f"{hit.key}  " if hit.key is not None and index.has_ids else ""  # not a row's line
            print(f"  {hit.score:.4f}  {key}{hit.text}")
            for name, value in (hit.fields or {}).items():
                print(f"          {name}: {value if isinstance(value, str) else json.dumps(value)}")
    return 0
