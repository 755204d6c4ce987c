"""``sentcl export``: a model's embedding path as ONNX (fp32 or int8), checked against the model."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from sentcl.atomic_write import check_replaceable
from sentcl.cli.common import PICKLES, add_overwrite_argument
from sentcl.config import ConfigError
from sentcl.embedder import EmbeddingError
from sentcl.model import SentenceEncoder, pooler_argument
from sentcl.model.onnx import OnnxEncoder, export_onnx
from sentcl.model.static import is_static_folder

NAMES = ("export",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "export", parents=[PICKLES], help="write a model's embedding path as ONNX (fp32 or int8) for serving"
    )
    p.add_argument("model")
    p.add_argument("--onnx", required=True, metavar="FOLDER", help="output folder (model.onnx + tokenizer)")
    p.add_argument("--int8", action="store_true", help="quantise to int8 (ONNX Runtime dynamic, per channel)")
    p.add_argument("--pooler", type=pooler_argument)
    add_overwrite_argument(p, "--onnx")


def run_command(args: argparse.Namespace) -> int:
    check_replaceable(args.onnx, "onnx", args.overwrite, "--onnx")
    if is_static_folder(args.model) or is_static_folder(Path(args.model) / "model"):
        raise ConfigError(
            f"{args.model}: a static model is a table lookup with nothing for ONNX to speed up; its folder "
            "already loads in sentence-transformers (SentenceTransformer(folder)) as it is"
        )
    encoder = SentenceEncoder.load(args.model, pooler=args.pooler, allow_pickle=args.allow_pickle)
    folder = export_onnx(encoder, args.onnx, int8=args.int8, overwrite=args.overwrite)
    exported = OnnxEncoder.load(folder)
    check = ["A man is playing a guitar.", "The weather is cold today."]
    gap = float(np.abs(exported.encode(check) - encoder.encode(check)).max())
    if not np.isfinite(gap):  # both sides refuse non-finite vectors: a gap that is not a number is a bug
        raise EmbeddingError(f"{folder}: the export and the model disagree by {gap}")
    precision = "int8" if args.int8 else "fp32"
    print(f"{folder}: {precision} ONNX of {args.model} (pooler {encoder.pooler}, {encoder.dimension} dims)")
    print(f"largest difference to the PyTorch model on two sentences: {gap:.2e}")
    return 0
