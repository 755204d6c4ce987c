"""What several commands share: argument types, the option groups they repeat, and the model they encode
with."""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable
from typing import Any

from sentcl.config import ConfigError
from sentcl.model.inference import for_inference, load_encoder
from sentcl.postprocess import POSTPROCESSORS, fit_postprocessor
from sentcl.precision import PRECISIONS

#: a parent parser: ``--allow-pickle``, for every command that loads a model
PICKLES = argparse.ArgumentParser(add_help=False)
PICKLES.add_argument(
    "--allow-pickle",
    action="store_true",
    help="load a model whose weights are only a pickle (pytorch_model.bin; reading one can run code)",
)
DATA_DIR_HELP = "evaluation data (default: $SENTCL_DATA, else the download cache)"


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (a batch size of 0 or -1 is refused with one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def finite_float(text: str) -> float:
    """An argparse type: a finite number (nan and inf are refused with one line)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def cosine(text: str) -> float:
    """An argparse type: a cosine, in [-1, 1] (the server's /search takes the same range)."""
    value = finite_float(text)
    if not -1 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not a cosine in [-1, 1]")
    return value


def add_dtype_arguments(
    p: argparse.ArgumentParser, default: str, dim: bool = True, multi_device: bool = False
) -> None:
    """``--dtype`` (evaluate defaults to fp32, so a reported score does not depend on the machine; encode,
    index and serve to auto, the fast path the hardware runs natively), ``--int8``, ``--device`` (a list of
    them where ``multi_device``) and ``--dim``."""
    p.add_argument(
        "--dtype",
        choices=list(PRECISIONS),
        default=default,
        help=f"inference precision (default {default}; the rule: commands that report scores, evaluate and "
        "mteb, default to fp32 so a score does not depend on the machine; commands that make vectors to use, "
        "encode, index and serve, default to auto): bf16 autocast, int8 (the model exported to ONNX and "
        "quantised by ONNX Runtime, CPU), or auto (on a CPU the fastest path measured on this machine, once "
        "per model: fp32, native bf16, or int8 where its STS-B dev stays within 0.3 of fp32; the choice is "
        "logged; on a GPU bf16 where native)",
    )
    p.add_argument(
        "--int8", action="store_const", dest="dtype", const="int8", help="the same as --dtype int8"
    )
    p.add_argument(
        "--measure-precision", action="store_true",
        help="with auto on a CPU: measure and record the fastest path now, whatever the input's size "
        "(without it an input under 50,000 texts runs in fp32 until this model has a record here)",
    )  # fmt: skip
    several = "; a comma list (cpu,cpu or cuda:0,cuda:1) encodes in one process per entry"
    p.add_argument(
        "--device", default="auto",
        help="auto (a GPU where there is one, else the CPU), cpu, cuda:N or mps" + several * multi_device,
    )  # fmt: skip
    if dim:
        p.add_argument(
            "--dim",
            type=positive_int,
            help="keep the first N dimensions of every vector (a Matryoshka-trained model)",
        )


def add_overwrite_argument(p: argparse.ArgumentParser, option: str, also: str = "") -> None:
    """``--overwrite`` for the folder ``option`` names; ``also``: what else it lets the command replace."""
    p.add_argument(
        "--overwrite",
        action="store_true",
        help=f"write the {option} folder even where it holds files sentcl did not write: what sentcl writes "
        "is replaced, those files stay (without it only an empty folder, or one this command wrote, is "
        f"written){'; also ' + also if also else ''}",
    )


def add_fit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fit-on", default="nli", help="post-processor corpus: nli | task | a .txt/.csv file")
    p.add_argument("--fit-max", type=positive_int, default=10_000, help="at most this many fitting sentences")


def fit(name: str, embedder, sentences: list[str]):
    logging.getLogger("sentcl").info("fitting %s on %d sentences", name, len(sentences))
    return fit_postprocessor(POSTPROCESSORS[name](), embedder, sentences)


def inference_encoder(
    args: argparse.Namespace, check: Callable[[Any], None] | None = None, texts: int | None = None
):
    """The model to encode with, in ``--dtype`` (model/inference.py: an ONNX export as it is);
    ``check(model)`` runs on the loaded model before its precision is chosen (which may measure); ``texts``:
    the input's size, so ``auto`` does not measure for a small one (unless ``--measure-precision``)."""
    encoder = load_encoder(args.model, pooler=args.pooler, allow_pickle=args.allow_pickle)
    if check is not None:
        check(encoder)
    texts = None if getattr(args, "measure_precision", False) else texts
    return for_inference(encoder, args.dtype, device=args.device, texts=texts)


def dimensions(dim: int | None, available: int) -> int | None:
    """``--dim`` checked against the dimensions the model gives (None: all of them)."""
    if dim is not None and not 0 < dim <= available:
        raise ConfigError(f"--dim {dim}: the model gives {available} dimensions")
    return dim
