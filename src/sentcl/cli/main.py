"""``sentcl`` command line: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import csv
import errno
import json
import logging
import math
import re
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from sentcl import __version__, finite_json
from sentcl.analysis.report import analyse, markdown_table, read_trajectory, write_report
from sentcl.atomic_write import atomic_file, atomic_folder, check_file_target, check_replaceable
from sentcl.config import ConfigError
from sentcl.data import DataError, read_records, read_sentences
from sentcl.embedder import CachedEmbedder, EmbeddingError, PromptError, unit_rows
from sentcl.evaluation import DataDirError, LocalTaskError, STSDataError, TaskSpecError, resolve_data_dir
from sentcl.evaluation.senteval_protocols import PROTOCOLS
from sentcl.evaluation.suite import EvaluationSuite
from sentcl.evaluation.tasks import known_tasks, needs_data_dir
from sentcl.evaluation.transfer import TransferDataError
from sentcl.extras import MissingExtraError, require
from sentcl.model import POOLERS, ModelLoadError, SentenceEncoder
from sentcl.model.inference import for_inference, load_encoder
from sentcl.model.onnx import OnnxEncoder, export_onnx
from sentcl.model.parallel import encode_on_devices
from sentcl.model.pooling import LOADING_DEFAULT
from sentcl.postprocess import POSTPROCESSORS, PostProcessedEmbedder, fit_postprocessor, load_postprocessor
from sentcl.postprocess.corpus import fit_corpus
from sentcl.precision import PRECISIONS
from sentcl.quantization import EMBEDDING_PRECISIONS, QuantizationError, int8_ranges, quantize
from sentcl.serving import IndexFolderError, SentenceIndex
from sentcl.serving.mining import MiningError, MiningOptions, mine
from sentcl.training import CheckpointError, TrainingError
from sentcl.training.kinds import load_run_recipe, replace_training, run, summary
from sentcl.training.model_card import add_evaluation
from sentcl.training.seeds import format_aggregate, train_seeds

#: errors caused by the user's input: one line, no traceback
USER_ERRORS = (
    ConfigError,
    DataError,
    STSDataError,
    TransferDataError,
    TaskSpecError,
    LocalTaskError,
    PromptError,
    QuantizationError,
    MiningError,
    ModelLoadError,
    DataDirError,
    TrainingError,
    CheckpointError,
    EmbeddingError,
    IndexFolderError,
    MissingExtraError,
)


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


def _add_dtype_arguments(
    p: argparse.ArgumentParser, default: str, dim: bool = True, multi_device: bool = False
) -> None:
    """``--dtype`` (evaluate defaults to fp32, so a reported score does not depend on the machine; encode,
    index and serve to auto, the fast path the hardware runs natively), ``--int8``, ``--device`` (a list of
    them where ``multi_device``) and ``--dim``."""
    p.add_argument(
        "--dtype",
        choices=list(PRECISIONS),
        default=default,
        help=f"inference precision (default {default}): bf16 autocast, int8 (the model exported to ONNX and "
        "quantised by ONNX Runtime, CPU), or auto (bf16 where the hardware runs it natively, else fp32)",
    )
    p.add_argument("--int8", action="store_true", help="the same as --dtype int8")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sentcl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sentcl {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and results")
    commands = parser.add_subparsers(dest="command", required=True)
    pickles = argparse.ArgumentParser(add_help=False)
    pickles.add_argument(
        "--allow-pickle",
        action="store_true",
        help="load a model whose weights are only a pickle (pytorch_model.bin; reading one can run code)",
    )

    p = commands.add_parser("train", help="train a sentence encoder from a YAML recipe")
    p.add_argument("config", help="recipe, e.g. configs/simcse_unsup_minilm_cpu.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. training.learning_rate=1e-5")
    p.add_argument("--output", help="output folder (overrides training.output_dir)")
    p.add_argument(
        "--overwrite", action="store_true",
        help="start again in a non-empty output folder: a previous run's entries go, your own files stay",
    )  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint, exactly")
    p.add_argument("--seeds", help="comma-separated seeds: one run each, then mean ± std of every metric")

    p = commands.add_parser(
        "pretrain", help="masked-LM pre-training: a raw encoder from scratch, or continued"
    )
    p.add_argument("config", help="recipe, e.g. configs/pretrain/raw_bert_4l_256.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. training.max_steps=100")
    p.add_argument("--output", help="output folder (overrides training.output_dir)")
    p.add_argument(
        "--overwrite", action="store_true",
        help="start again in a non-empty output folder: a previous run's entries go, your own files stay",
    )  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint, exactly")

    p = commands.add_parser("evaluate", parents=[pickles], help="evaluate a model on STS")
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
    p.add_argument("--data-dir", help="evaluation data (default: $SENTCL_DATA, else the download cache)")
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--json", help="also write all scores to this JSON file")
    p.add_argument(
        "--postprocess", help="whitening | flow | abtt (fitted now), or a saved post-processor folder"
    )
    _add_fit_arguments(p)
    p.add_argument("--save-postprocess", help="save the fitted post-processor in this folder")
    _add_overwrite_argument(p, "--save-postprocess")
    _add_dtype_arguments(p, default="fp32")

    p = commands.add_parser(
        "encode", parents=[pickles], help="embed a text file (one sentence per line) into a .npy matrix"
    )
    p.add_argument("model")
    p.add_argument("input", help="text file, one sentence per line (blank lines are skipped)")
    p.add_argument("--out", required=True, help="output .npy file [N, D]")
    p.add_argument("--pooler", choices=list(POOLERS))
    p.add_argument("--normalize", action="store_true", help="L2-normalise the rows")
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--overwrite", action="store_true", help="replace a file already at --out")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-name", help="one of the model's saved prompts (e.g. query, document)")
    prompt.add_argument("--prompt", help="a text put before every sentence")
    p.add_argument(
        "--precision", default="float32", choices=list(EMBEDDING_PRECISIONS),
        help="int8/uint8: 256 buckets per dimension over calibrated ranges; binary/ubinary: 1 bit per "
        "dimension, packed (sentence-transformers' quantize_embeddings codes)",
    )  # fmt: skip
    ranges = p.add_mutually_exclusive_group()
    ranges.add_argument(
        "--calibration", help="int8/uint8: a text file whose sentences' vectors give the ranges"
    )
    ranges.add_argument("--ranges", help="int8/uint8: a .npy [2, D] of ranges (--save-ranges of another run)")
    p.add_argument("--save-ranges", metavar="FILE", help="int8/uint8: write the ranges used to this .npy")
    _add_dtype_arguments(p, default="auto", multi_device=True)

    p = commands.add_parser(
        "export", parents=[pickles], help="write a model's embedding path as ONNX (fp32 or int8) for serving"
    )
    p.add_argument("model")
    p.add_argument("--onnx", required=True, metavar="FOLDER", help="output folder (model.onnx + tokenizer)")
    p.add_argument("--int8", action="store_true", help="quantise to int8 (ONNX Runtime dynamic, per channel)")
    p.add_argument("--pooler", choices=list(POOLERS))
    _add_overwrite_argument(p, "--onnx")

    p = commands.add_parser("card", help="add sentcl evaluate --json results to a trained model's card")
    p.add_argument("model", help="a model folder saved by sentcl train (it has README.md)")
    p.add_argument(
        "--add", nargs="+", required=True, metavar="RESULTS", help="files of sentcl evaluate --json"
    )

    p = commands.add_parser(
        "index", parents=[pickles], help="build a faiss index of a corpus (one sentence per line)"
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
    _add_overwrite_argument(p, "--out")
    p.add_argument("--pooler", choices=list(POOLERS))
    p.add_argument("--batch-size", type=positive_int, default=128)
    _add_dtype_arguments(p, default="auto", dim=False)

    p = commands.add_parser(
        "mine",
        parents=[pickles],
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
    p.add_argument("--pooler", choices=list(POOLERS))
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--overwrite", action="store_true", help="replace a file already at --out")
    _add_dtype_arguments(p, default="auto", dim=False)

    p = commands.add_parser(
        "mteb", parents=[pickles], help="evaluate a model with mteb (its tasks download unless mteb has them)"
    )
    p.add_argument("model")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--tasks", help="comma-separated mteb task names (e.g. STSBenchmark,SciFact)")
    which.add_argument("--benchmark", help='an mteb benchmark, e.g. "MTEB(eng, v2)"')
    p.add_argument("--out", help="a JSON file of every task's scores")
    p.add_argument("--pooler", choices=list(POOLERS))
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--overwrite", action="store_true", help="replace a file already at --out")
    _add_dtype_arguments(p, default="fp32", dim=False)

    p = commands.add_parser("search", parents=[pickles], help="nearest corpus sentences of a query")
    p.add_argument("index", help="folder written by sentcl index")
    p.add_argument("query", nargs="+")
    p.add_argument("-k", "--top-k", type=positive_int, default=5)
    p.add_argument("--threshold", type=cosine, help="only hits with cosine ≥ this")
    p.add_argument("--model", help="default: the model recorded in the index")
    p.add_argument(
        "--device", default="auto", help="auto (a GPU where there is one, else the CPU), cpu, cuda:N"
    )

    p = commands.add_parser(
        "serve", parents=[pickles], help="HTTP API (OpenAI-compatible embeddings, similarity, search) + page"
    )
    p.add_argument("model")
    p.add_argument("--index", help="folder written by sentcl index: enables /search and the page")
    p.add_argument("--pooler", choices=list(POOLERS))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--allowed-hosts",
        help="comma-separated Host names the server answers (default: the bound host's: localhost, 127.0.0.1 "
        "and ::1 for a loopback bind); '*' answers any (a page on another site can then read the API)",
    )
    p.add_argument("--max-inputs", type=positive_int, default=256, help="texts per request")
    p.add_argument("--max-chars", type=positive_int, default=8192, help="characters per text")
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=8192,
        help="tokens the model reads per request (all its texts)",
    )
    p.add_argument(
        "--max-request-chars",
        type=positive_int,
        help="characters of all a request's texts (default: 16 per token of --max-tokens)",
    )
    p.add_argument(
        "--max-waiting", type=positive_int, default=16, help="requests queued for the model; beyond: 503"
    )
    p.add_argument(
        "--max-connections", type=positive_int, default=1024, help="open connections (the idlest go first)"
    )
    p.add_argument("--batch-size", type=positive_int, default=64)
    _add_dtype_arguments(p, default="auto", dim=False)

    p = commands.add_parser(
        "analyze", parents=[pickles], help="geometry report (alignment/uniformity, spectrum, figures)"
    )
    p.add_argument("models", nargs="+", help="model folders, sentcl run folders or hub ids")
    p.add_argument("--pooler", choices=list(POOLERS))
    p.add_argument(
        "--postprocess", nargs="*", default=[], choices=list(POSTPROCESSORS), help="also analyse these"
    )
    _add_fit_arguments(p)
    p.add_argument("--data-dir", help="evaluation data (default: $SENTCL_DATA, else the download cache)")
    p.add_argument("--split", default="dev", help="STS-B split used as the probe")
    p.add_argument("--out", default="runs/analysis", help="report folder")
    _add_overwrite_argument(p, "--out")

    p = commands.add_parser(
        "reproduce",
        help="run a reproduction plan (cached stages) and write its report, e.g. docs/reproduction.md",
    )
    p.add_argument("plan", help="YAML plan, e.g. configs/reproduce/cpu.yaml")
    p.add_argument("--data-dir", help="evaluation data (default: $SENTCL_DATA, else the download cache)")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run no stage: write the report from the stages done so far, naming what is not run yet",
    )
    return parser


def _add_overwrite_argument(p: argparse.ArgumentParser, option: str) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        help=f"write the {option} folder even where it holds files sentcl did not write: what sentcl writes "
        "is replaced, those files stay (without it only an empty folder, or one this command wrote, is "
        "written); for evaluate also a file at --json",
    )


def _add_fit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fit-on", default="nli", help="post-processor corpus: nli | task | a .txt/.csv file")
    p.add_argument("--fit-max", type=positive_int, default=10_000, help="at most this many fitting sentences")


def _fit(name: str, embedder, sentences: list[str]):
    logging.getLogger("sentcl").info("fitting %s on %d sentences", name, len(sentences))
    return fit_postprocessor(POSTPROCESSORS[name](), embedder, sentences)


def run_recipe(args: argparse.Namespace) -> int:
    """``sentcl train`` and ``sentcl pretrain``: one recipe loader and one runner keyed by the run kind
    (training/kinds.py); ``--seeds`` is training's (one run per seed, then mean ± std)."""
    kind = args.command
    config = load_run_recipe(kind, args.config, args.overrides)
    changes = {"output_dir": args.output} if args.output else {}
    if args.overwrite:
        changes["overwrite_output_dir"] = True
    if args.resume:
        changes["resume"] = True
    config = replace_training(config, **changes) if changes else config
    if getattr(args, "seeds", None):
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise ConfigError(f"--seeds {args.seeds!r}: expected comma-separated integers") from None
        results, aggregate = train_seeds(config, seeds)
        for seed, result in zip(seeds, results, strict=True):
            print(f"seed {seed}: " + summary(kind, result).replace("\n", "; "))
        print(format_aggregate(aggregate))
        return 0
    print(summary(kind, run(kind, config)))
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
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
    encoder = _inference_encoder(args)
    embedder = SimpleNamespace(  # prompts: retrieval tasks encode queries and documents with them
        encode=_truncated(partial(encoder.encode, batch_size=args.batch_size), args.dim, encoder),
        prompts=encoder.prompts,
    )
    label = f"{args.model} (pooler {encoder.pooler}{'' if dtype == 'fp32' else ', ' + dtype})"
    if args.postprocess:
        if Path(args.postprocess).is_dir():
            processor = load_postprocessor(args.postprocess)
        elif args.postprocess in POSTPROCESSORS:
            processor = _fit(args.postprocess, embedder, fit_corpus(args.fit_on, data_dir, args.fit_max))
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


def run_encode(args: argparse.Namespace) -> int:
    check_file_target(args.out, "--out", args.overwrite)
    scaled = args.precision.endswith("int8")
    if (args.calibration or args.ranges or args.save_ranges) and not scaled:
        raise ConfigError(
            f"--calibration, --ranges and --save-ranges are for --precision int8/uint8, not {args.precision}"
        )
    if args.save_ranges:
        check_file_target(args.save_ranges, "--save-ranges", args.overwrite)
    sentences = [row[0] for row in read_sentences(args.input).rows]
    given = _read_ranges(args.ranges) if args.ranges else None
    calibration = [row[0] for row in read_sentences(args.calibration).rows] if args.calibration else None
    devices = [d.strip() for d in args.device.split(",") if d.strip()] or ["auto"]
    if len(devices) > 1:  # one worker process per device, each with its own copy of the model
        pooler = args.pooler or "the model's"
        encode = partial(
            encode_on_devices, args.model, devices=devices, dtype=args.dtype, pooler=args.pooler,
            allow_pickle=args.allow_pickle, batch_size=args.batch_size,
        )  # fmt: skip
        if args.dim is not None:
            encode = _prefix(encode, args.dim)
    else:
        args.device = devices[0]
        encoder = _inference_encoder(args)
        pooler = encoder.pooler
        encode = partial(_truncated(encoder.encode, args.dim, encoder), batch_size=args.batch_size)

    def vectors_of(texts: list[str], progress: bool) -> np.ndarray:
        found = encode(texts, show_progress=progress, prompt_name=args.prompt_name, prompt=args.prompt)
        # normalised after truncation: a prefix of a unit vector is not one
        return unit_rows(found) if args.normalize else found

    vectors = vectors_of(sentences, True)
    ranges = None
    if scaled:
        ranges = given
        if ranges is None:
            ranges = int8_ranges(vectors_of(calibration, False) if calibration else vectors)
        if calibration is None and given is None:
            logging.getLogger("sentcl.encode").info(
                "%s: int8 ranges from the %d vectors themselves (--calibration or --ranges to fix them)",
                args.input, len(vectors),
            )  # fmt: skip
    codes = quantize(vectors, args.precision, ranges)
    with atomic_file(Path(args.out), mode="wb") as handle:
        np.save(handle, codes)
    if args.save_ranges:
        with atomic_file(Path(args.save_ranges), mode="wb") as handle:
            np.save(handle, ranges)
    print(
        f"{args.out}: {codes.shape[0]} × {codes.shape[1]} {codes.dtype} ({args.precision}, pooler {pooler})"
    )
    return 0


def _read_ranges(path: str) -> np.ndarray:
    try:
        ranges = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--ranges {path}: not a .npy of ranges ({exc})") from None
    if ranges.ndim != 2 or ranges.shape[0] != 2 or not np.isfinite(ranges).all():
        raise ConfigError(
            f"--ranges {path}: {ranges.shape} values; [2, D] finite ranges (min, max) are needed"
        )
    return ranges


def _inference_encoder(args: argparse.Namespace):
    """The model to encode with, in ``--dtype`` (model/inference.py: an ONNX export as it is)."""
    encoder = load_encoder(args.model, pooler=args.pooler, allow_pickle=args.allow_pickle)
    return for_inference(encoder, args.dtype, device=args.device)


def _truncated(encode, dim: int | None, encoder):
    """``encode`` keeping the first ``dim`` dimensions (``--dim``); as it is without one."""
    if dim is None:
        return encode
    if not 0 < dim <= encoder.dimension:
        raise ConfigError(f"--dim {dim}: the model gives {encoder.dimension} dimensions")
    return _prefix(encode, dim)


def _prefix(encode, dim: int):
    def prefix(*args, **kwargs):
        vectors = encode(*args, **kwargs)
        if dim > vectors.shape[1]:
            raise ConfigError(f"--dim {dim}: the model gives {vectors.shape[1]} dimensions")
        return vectors[:, :dim]

    return prefix


def run_export(args: argparse.Namespace) -> int:
    check_replaceable(args.onnx, "onnx", args.overwrite, "--onnx")
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


def run_card(args: argparse.Namespace) -> int:
    folder = Path(args.model)
    if (folder / "model" / "README.md").is_file() and not (folder / "README.md").is_file():
        folder = folder / "model"  # a run folder: its kept model
    for name in args.add:
        try:
            results = json.loads(Path(name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{name}: no such file") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        try:
            path = add_evaluation(folder, results, Path(name).name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    print(f"{path}: {len(args.add)} result file(s) added")
    return 0


def run_index(args: argparse.Namespace) -> int:
    check_replaceable(args.out, "index", args.overwrite, "--out")
    sentences = [row[0] for row in read_sentences(args.corpus).rows]
    encoder = _inference_encoder(args)
    index = SentenceIndex.of_corpus(
        _BatchedEncoder(encoder, args.batch_size, show_progress=True),
        sentences,
        kind=args.kind,
        model=encoder.source,
    )
    index.rescore_multiplier = args.rescore
    index.save(args.out, overwrite=args.overwrite)
    print(f"{args.out}: {len(index)} sentences, {index.kind} index, model {index.model}")
    return 0


def run_mine(args: argparse.Namespace) -> int:
    check_file_target(args.out, "--out", args.overwrite)
    suffix = Path(args.out).suffix.lower()
    if suffix not in (".tsv", ".csv", ".jsonl"):
        raise ConfigError(f"--out {args.out}: write .tsv, .csv or .jsonl")
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
    encoder = _inference_encoder(args)
    mined = mine(_BatchedEncoder(encoder, args.batch_size, show_progress=True), pairs, options, corpus)
    if not mined.rows:
        raise MiningError(f"{args.pairs}: no anchor kept a negative; widen --range-max or loosen the margins")
    with atomic_file(Path(args.out)) as handle:
        if suffix == ".jsonl":
            handle.writelines(
                json.dumps({"sent0": a, "sent1": p, "hard_neg": n}, ensure_ascii=False) + "\n"
                for a, p, n in mined.rows
            )
        else:
            writer = csv.writer(handle, delimiter="\t" if suffix == ".tsv" else ",", lineterminator="\n")
            writer.writerow(["sent0", "sent1", "hard_neg"])
            writer.writerows(mined.rows)
    print(
        f"{args.out}: {len(mined.rows)} rows from {len(pairs)} pairs; {mined.anchors - mined.without} of "
        f"{mined.anchors} anchors kept a negative ({mined.without} none that passes the filters, "
        f"{mined.short} fewer than {options.num_negatives}; range-max {mined.range_max}); cosine with the "
        f"anchor: positives {np.mean(mined.positive_scores):.3f}, negatives "
        f"{np.mean(mined.negative_scores):.3f} (means over rows)"
    )
    return 0


def run_mteb(args: argparse.Namespace) -> int:
    mteb = require("mteb", "mteb", "sentcl mteb")
    from sentcl.mteb_encoder import MTEBEncoder

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
    result = mteb.evaluate(encoder, tasks, cache=None)
    scores = {
        task.task_name: {split: [row["main_score"] for row in rows] for split, rows in task.scores.items()}
        for task in result.task_results
    }
    for name, splits in scores.items():
        for split, values in splits.items():
            print(f"{name} {split}: main score {100 * float(np.mean(values)):.2f}")
    if args.out:
        with atomic_file(Path(args.out)) as handle:
            json.dump(
                {"model": args.model, "mteb": mteb.__version__, "main_scores": scores}, handle, indent=2
            )
    return 0


def run_search(args: argparse.Namespace) -> int:
    index = SentenceIndex.load(args.index)
    model = args.model or index.model
    if not model:
        raise ConfigError(f"{args.index}: the index records no model; pass --model")
    encoder = for_inference(load_encoder(model, allow_pickle=args.allow_pickle), "fp32", device=args.device)
    index.check_dimension(encoder.dimension, model, args.index)
    for query, hits in zip(
        args.query, index.query(encoder, args.query, args.top_k, args.threshold), strict=True
    ):
        print(f"query: {query}")
        for hit in hits:
            print(f"  {hit.score:.4f}  {hit.text}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    for module in ("fastapi", "uvicorn", "pydantic"):  # the web stack is the serve extra
        require(module, "serve", "sentcl serve")
    from sentcl.serving.server import ServerLimits, create_app, default_allowed_hosts, serve, token_counter

    index = SentenceIndex.load(args.index) if args.index else None
    encoder = _inference_encoder(args)
    if index is not None and index.model and index.model != encoder.source:
        logging.getLogger("sentcl.serve").warning(
            "%s was built with %s, not %s: its scores may mean little",
            args.index,
            index.model,
            encoder.source,
        )
    if index is not None:
        index.check_dimension(encoder.dimension, encoder.source, args.index)
    if args.allowed_hosts:
        hosts = [h.strip() for h in args.allowed_hosts.split(",") if h.strip()]
    else:
        hosts = default_allowed_hosts(args.host)
    if "*" in hosts:
        logging.getLogger("sentcl.serve").warning(
            "any Host header is answered: a web page on another site can read this API by DNS rebinding; "
            "pass --allowed-hosts with the names clients use"
        )
    limits = ServerLimits(
        max_inputs=args.max_inputs, max_chars=args.max_chars, max_tokens=args.max_tokens,
        max_request_chars=args.max_request_chars, max_waiting=args.max_waiting,
        max_connections=args.max_connections,
    )  # fmt: skip
    app = create_app(
        _BatchedEncoder(encoder, args.batch_size),
        model_name=args.model,
        dimension=encoder.dimension,
        index=index,
        limits=limits,
        count_tokens=token_counter(encoder.tokenizer, encoder.max_length),
        allowed_hosts=hosts,
    )
    serve(app, host=args.host, port=args.port, quiet=args.quiet, limits=limits)
    return 0


class _BatchedEncoder:
    def __init__(self, encoder, batch_size: int, show_progress: bool = False):
        self.encoder, self.batch_size, self.show_progress = encoder, batch_size, show_progress
        self.prompts = getattr(encoder, "prompts", {})  # index applies the document prompt

    def encode(self, sentences):
        return self.encoder.encode(sentences, batch_size=self.batch_size, show_progress=self.show_progress)


def run_analyze(args: argparse.Namespace) -> int:
    check_replaceable(args.out, "analysis", args.overwrite, "--out")
    data_dir = resolve_data_dir(args.data_dir)
    analyses, processors = [], []
    fit_sentences = fit_corpus(args.fit_on, data_dir, args.fit_max) if args.postprocess else []
    for name in args.models:
        # one cache per model: the probe and the fitting corpus are encoded once for every variant
        encoder = CachedEmbedder(
            SentenceEncoder.load(name, pooler=args.pooler, allow_pickle=args.allow_pickle)
        )
        label = Path(name).name or name
        analysis = analyse(label, encoder, data_dir, args.split)
        analysis.trajectory = read_trajectory(name)
        analyses.append(analysis)
        for pp in args.postprocess:
            processor = _fit(pp, encoder, fit_sentences)
            processors.append((f"{label}-{pp}", processor, f"{name}: {args.fit_on}"))
            analyses.append(
                analyse(f"{label} + {pp}", PostProcessedEmbedder(encoder, processor), data_dir, args.split)
            )
    fitted = f"\nPost-processors fitted on `{args.fit_on}` (at most {args.fit_max} sentences).\n"
    with atomic_folder(
        args.out, "analysis", args.overwrite, "--out"
    ) as tmp:  # the report whole, or not at all
        for folder, processor, fitted_on in processors:
            processor.save(tmp / "postprocess" / folder, fitted_on=fitted_on)
        report = write_report(analyses, tmp, args.split, notes=fitted if args.postprocess else "")
    print(markdown_table(analyses))
    print(f"report: {Path(args.out) / report.name}")
    return 0


def run_reproduce(args: argparse.Namespace) -> int:
    from sentcl.reproduction import reproduce

    report, outcomes = reproduce(args.plan, args.data_dir, report_only=args.report_only)
    for outcome in outcomes:
        print(f"{outcome.action:>8}  {outcome.seconds:8.0f} s  {outcome.name}")
    print(f"report: {report}")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as argparse reads it, with one addition: a recipe's ``key=value`` overrides may
    come anywhere after the recipe (``sentcl train R --output runs/x training.max_steps=100``), not only
    before the first option."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    overrides = [t for t in rest if "=" in t and not t.startswith("-")]
    if rest and (getattr(args, "overrides", None) is None or len(overrides) != len(rest)):
        parser.error(
            f"unrecognized arguments: {' '.join(t for t in rest if t not in overrides) or ' '.join(rest)}"
        )
    if rest:
        args.overrides = [*args.overrides, *overrides]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command != "export" and getattr(args, "int8", False):
        args.dtype = "int8"  # --int8 is --dtype int8, resolved here once
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    # faiss.loader logs each SIMD build it does not find as a ModuleNotFoundError at INFO: noise, not news
    for noisy in ("transformers", "httpx", "huggingface_hub", "faiss.loader"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        commands = {
            "train": run_recipe,
            "pretrain": run_recipe,
            "evaluate": run_evaluate,
            "analyze": run_analyze,
            "reproduce": run_reproduce,
        }
        commands |= {"encode": run_encode, "index": run_index, "search": run_search, "serve": run_serve}
        commands |= {"mine": run_mine, "mteb": run_mteb}
        commands |= {"export": run_export, "card": run_card}
        return commands[args.command](args)
    except USER_ERRORS as exc:
        print(f"sentcl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        message = environment_failure(exc, args.command)
        if message is None:
            raise  # a bug: its traceback is what a report needs
        print(f"sentcl {args.command}: error: {message}", file=sys.stderr)
        return 1


#: how the libraries sentcl writes through say "the disk is full" (errno 28 in OSError; safetensors' Rust
#: "os error 28"; faiss's "No space left on device"; numpy's short write "N requested and M written")
_DISK_FULL = re.compile(
    r"No space left on device|os error 28|Disk quota exceeded|\d+ requested and \d+ written"
)


def environment_failure(exc: BaseException, command: str = "") -> str | None:
    """One line for a failure of the machine rather than of sentcl (a full disk, a permission, a path that
    vanished), or None. Every file sentcl publishes is written to a temporary name first, so what was
    there before is intact and no half-written file is left: the line says so."""
    chain, seen = exc, set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        said = _DISK_FULL.search(str(chain))
        if (isinstance(chain, OSError) and chain.errno in (errno.ENOSPC, errno.EDQUOT)) or said:
            detail = _first_line(chain) if len(_first_line(chain)) <= 80 or said is None else said.group(0)
            resume = " (a run continues from its last checkpoint with --resume)" if command == "train" else ""
            return (
                f"the disk is full ({detail}); nothing was half-written and what was there before is "
                f"unchanged: free some space and run the command again{resume}"
            )
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or _first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
