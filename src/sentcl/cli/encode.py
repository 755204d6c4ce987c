"""``sentcl encode``: a text file (one sentence per line) into a .npy matrix, in any precision
sentence-transformers' ``quantize_embeddings`` writes, on one device or several."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from sentcl.atomic_write import atomic_file, check_file_target
from sentcl.cli.common import PICKLES, add_dtype_arguments, dimensions, inference_encoder, positive_int
from sentcl.config import ConfigError
from sentcl.data import read_sentences
from sentcl.embedder import Batched, keep_prefix, unit_rows
from sentcl.model import pooler_argument
from sentcl.model.parallel import encode_on_devices
from sentcl.search.quantization import EMBEDDING_PRECISIONS, int8_ranges, quantize

NAMES = ("encode",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "encode", parents=[PICKLES], help="embed a text file (one sentence per line) into a .npy matrix"
    )
    p.add_argument("model")
    p.add_argument(
        "input", nargs="+",
        help="text file, one sentence per line (blank lines are skipped); --engine ray: files, folders or "
        "globs of text, JSON lines or Parquet",
    )  # fmt: skip
    p.add_argument("--out", required=True, help="output .npy file [N, D]; --engine ray: a folder of shards")
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--normalize", action="store_true", help="L2-normalise the rows")
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument(
        "--batch-tokens", type=positive_int,
        help="a batch also holds at most this many tokens with its padding (rows × its longest text): long "
        "texts go in smaller batches, so memory is bounded by tokens, not rows (default: no bound)",
    )  # fmt: skip
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
    add_dtype_arguments(p, default="auto", multi_device=True)
    ray = p.add_argument_group(
        "--engine ray: a corpus on a Ray cluster (pip install 'sentcl[ray]'; docs/scale.md)"
    )
    ray.add_argument(
        "--engine", choices=["local", "ray"], default="local",
        help="ray: the inputs cut into shards, encoded by an actor pool, written as Parquet shards "
        "(id, text, vector) as they finish; the same command again resumes",
    )  # fmt: skip
    ray.add_argument(
        "--address", help="a Ray cluster's HOST:PORT, ray://HOST:PORT or auto (default: this machine)"
    )
    ray.add_argument("--actors", type=positive_int, default=1, help="actors, one model each (default 1)")
    ray.add_argument(
        "--cpus-per-actor", type=positive_int, default=1, help="and the threads each uses (default 1)"
    )
    ray.add_argument("--gpus-per-actor", type=float, default=0, help="a GPU each: 1 (default 0: CPU)")
    ray.add_argument("--rows-per-shard", type=positive_int, default=100_000, help="(default 100000)")
    ray.add_argument("--id-field", default="id", help="JSON lines and Parquet: the id's field (default id)")
    ray.add_argument("--text-field", default="text", help="JSON lines and Parquet: the text's (default text)")


def run_command(args: argparse.Namespace) -> int:
    if args.engine == "ray":
        return run_on_ray(args)
    if len(args.input) > 1:
        raise ConfigError(f"input: one text file ({len(args.input)} given); --engine ray reads several")
    args.input = args.input[0]
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
    encode: Callable[..., np.ndarray]
    if len(devices) > 1:  # one worker process per device, each with its own copy of the model
        pooler = args.pooler or "the model's"
        on_devices = partial(
            encode_on_devices, args.model, devices=devices, dtype=args.dtype, pooler=args.pooler,
            allow_pickle=args.allow_pickle, batch_size=args.batch_size, batch_tokens=args.batch_tokens,
        )  # fmt: skip

        def on_all(texts, **options) -> np.ndarray:
            return keep_prefix(on_devices(texts, **options), args.dim)

        encode = on_all
    else:
        args.device = devices[0]
        encoder = inference_encoder(args, texts=len(sentences) + len(calibration or []))
        encoder.max_batch_tokens = args.batch_tokens
        pooler = encoder.pooler
        encode = Batched(encoder, args.batch_size, dim=dimensions(args.dim, encoder.dimension)).encode

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
        assert ranges is not None  # --save-ranges was refused above unless the codes are scaled
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


def run_on_ray(args: argparse.Namespace) -> int:
    """``--engine ray``: the job of sentcl/integrations/ray_data.py; failed shards listed, exit 1."""
    from sentcl.data.shards import Fields
    from sentcl.integrations.ray_data import RayEncodeJob, encode_with_ray

    if args.precision.endswith("int8") and not args.ranges:
        raise ConfigError(
            f"--engine ray --precision {args.precision}: every shard must share its ranges; pass --ranges (a "
            f"[2, D] .npy, e.g. --save-ranges of a local encode of a sample)"
        )
    if args.calibration or args.save_ranges:
        raise ConfigError(
            "--engine ray: --calibration and --save-ranges are for a local encode; pass --ranges"
        )
    if "," in args.device:
        raise ConfigError("--engine ray: the actors are the devices; use --actors and --gpus-per-actor")
    job = RayEncodeJob(
        args.model, args.input, args.out, address=args.address, actors=args.actors,
        cpus_per_actor=args.cpus_per_actor, gpus_per_actor=args.gpus_per_actor,
        rows_per_shard=args.rows_per_shard, batch_size=args.batch_size, batch_tokens=args.batch_tokens,
        dtype=args.dtype, pooler=args.pooler,
        normalize=args.normalize, dim=args.dim,
        precision=args.precision, ranges=_read_ranges(args.ranges).tolist() if args.ranges else None,
        prompt_name=args.prompt_name, prompt=args.prompt, fields=Fields(args.id_field, args.text_field),
        allow_pickle=args.allow_pickle, overwrite=args.overwrite,
    )  # fmt: skip
    result = encode_with_ray(job)
    print(
        f"{args.out}: {len(result.shards)} shards, {result.rows} rows ({len(result.written)} written now, "
        f"{len(result.kept)} kept from an earlier run, {len(result.failed)} failed; {args.precision})"
    )
    for name, error in sorted(result.failed.items()):
        print(f"  {name} failed: {error}")
    if result.failed:
        print("  run the same command again to redo the failed shards")
    return 1 if result.failed else 0
