"""One vocabulary for numeric precision, the same in recipes (``training.autocast``), on the command line
(``--dtype``), in Python (``SentenceEncoder.with_dtype``, ``load_encoder``) and in the server:

    fp32   float32 throughout
    bf16   bf16 autocast of the forward passes; weights, similarities and losses stay fp32
    int8   inference only: the embedding path exported to ONNX and quantised by ONNX Runtime (CPU)
    auto   fp32 where bf16 is emulated; where it is native, what was measured faster on that machine: for
           training the faster step of fp32 and bf16 on the run's shapes (training/autocast.py), for
           inference on a CPU (``sentcl.model.for_inference``: encode, index, serve) the fastest of fp32,
           bf16 and an int8 that keeps STS-B dev within 0.3 (model/auto_precision.py); elsewhere (a GPU's
           inference) bf16 where native, by the flag (``choose``)

``auto`` is decided here and nowhere else, once per process and device (``decide``; the reason is logged
once). Recipes and run folders written by earlier sentcl versions say ``none`` (fp32) or ``bfloat16``:
both are read as their new names (``canonical``).
"""

from __future__ import annotations

import contextlib
import functools
import logging

import torch

from sentcl.config import ConfigError
from sentcl.hardware import Hardware, detect

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "int8", "auto")
#: what a training run may use (int8 is an inference format)
TRAINING = ("fp32", "bf16", "auto")
#: the spellings of earlier versions, still read
ALIASES = {"none": "fp32", "bfloat16": "bf16", "float32": "fp32"}


def canonical(name: str, where: str = "precision", allowed: tuple[str, ...] = PRECISIONS) -> str:
    """``name`` in the one vocabulary, or a ConfigError naming ``where`` (a recipe key, an option)."""
    value = ALIASES.get(str(name), str(name))
    if value not in allowed:
        raise ConfigError(f"{where}: {name!r} is not one of {', '.join(allowed)}")
    return value


def choose(name: str, hardware: Hardware) -> tuple[str, str]:
    """``name`` as the hardware runs it: (``fp32`` | ``bf16`` | ``int8``, why). ``auto`` picks bf16 only
    where bf16 products are native; elsewhere bf16 is emulated and slower than fp32."""
    name = canonical(name)
    if name != "auto":
        return name, "as asked"
    if hardware.native_bf16:
        return "bf16", f"{hardware.describe()}: native bf16 products"
    if hardware.device == "cuda":
        return "fp32", f"{hardware.describe()}: no bf16 tensor cores before compute capability 8.0"
    return "fp32", f"{hardware.describe()}: no native bf16 (no avx512_bf16 / amx_bf16), fp32 is faster"


@functools.cache
def _auto(device_type: str, index: int | None) -> tuple[str, str]:
    chosen, reason = choose(
        "auto", detect(torch.device(device_type, index) if index is not None else device_type)
    )
    logger.info("precision auto: %s (%s)", chosen, reason)
    return chosen, reason


def decide(name: str, device: torch.device | str = "cpu") -> str:
    """``name`` resolved for ``device``: ``auto`` is detected once per process and device (and says why
    once); the other names are returned as they are."""
    name = canonical(name)
    if name != "auto":
        return name
    device = torch.device(device)
    return _auto(device.type, device.index)[0]


def reason(device: torch.device | str = "cpu") -> str:
    """Why ``auto`` decides what it decides on ``device``."""
    device = torch.device(device)
    return _auto(device.type, device.index)[1]


def autocast(name: str, device: torch.device | str):
    """The forward passes' context for a training or evaluation pass in ``name`` (bf16 autocast or
    nothing); ``int8`` is not a training precision."""
    chosen = decide(canonical(name, allowed=TRAINING), device)
    device = torch.device(device)
    if chosen == "fp32":
        return contextlib.nullcontext()
    if canonical(name) == "bf16":
        _warn_if_emulated(device.type, device.index)
    return torch.autocast(device.type, dtype=torch.bfloat16)


@functools.cache
def _warn_if_emulated(device_type: str, index: int | None) -> None:
    if not detect(torch.device(device_type, index) if index is not None else device_type).native_bf16:
        logger.warning("bf16 on hardware without native bf16 products is slower than fp32")
