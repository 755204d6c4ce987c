"""``training.autocast: auto``: bf16 or fp32, whichever training step this machine ran faster.

A flag does not say which is faster: a CPU with native bf16 products runs bf16 autocast faster on one model
and batch and slower on another (small matrices, the casts around them). So where bf16 is native (a CPU
with avx512_bf16 / amx_bf16, a GPU of compute capability 8.0 or later), ``auto`` times both on this run's
own shapes before its first step: the encoder's training pass (dropout on, the run's per-rank batch of
``views`` sequences of the probe texts of model/auto_precision.py, cut at the run's ``max_length``) and its
backward, ``ROUNDS`` interleaved rounds after a warm-up, the medians compared; bf16 must be faster by
``MARGIN`` to be chosen (a tie keeps the simpler fp32). Where bf16 is emulated, fp32 without timing.

The probe leaves the run as it found it: its backward goes through ``torch.autograd.grad`` (no ``.grad`` is
written), every RNG is forked around it, the encoder's train/eval mode is restored. The choice is:

* recorded in ``$SENTCL_CACHE/auto-precision/train-<key>.json`` (the key: the encoder's parameter shapes and
  pooler, the batch's shape, the device and the machine as in auto_precision.machine_key), so the next run
  of that shape on this machine reads it instead of timing again;
* measured on rank 0 and sent to every rank (the replicas must run the same arithmetic);
* kept in the checkpoint's state, so a resumed run uses the precision the run started with, wherever it
  resumes (a run is bit-identical to an uninterrupted one only if it does).

The loss is checked as in every run (guards.py: a non-finite loss or weight stops the run).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from sentcl import precision
from sentcl.hardware import Hardware, describe_machine, detect
from sentcl.model import auto_precision, int8_gate
from sentcl.training.distributed import DistributedContext

if TYPE_CHECKING:
    from sentcl.model import TrainableEncoder

logger = logging.getLogger(__name__)

ROUNDS = 3
#: how much faster (a ratio of median step times) bf16 must be to be chosen over fp32
MARGIN = 1.03
PROTOCOL = "train-step-3-v1"


@dataclass
class StepRecord:
    key: str
    machine: str
    measured: str  # ISO time
    protocol: str
    batch: list[int]  # [sequences, tokens]
    seconds: dict[str, float]  # the median step, per candidate
    chosen: str

    def describe(self) -> str:
        ranked = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in self.seconds.items())
        sequences, tokens = self.batch
        return (
            f"the faster training step here: {ranked} for a step of {sequences}×{tokens} tokens "
            f"({self.measured})"
        )


def choose(
    name: str,
    encoder: TrainableEncoder,
    device: torch.device,
    context: DistributedContext,
    sequences: int,
    clock: Callable[[], float] | None = None,
) -> tuple[str, str]:
    """(``fp32`` | ``bf16``, why) for ``training.autocast`` = ``name`` on ``device``; ``auto`` decided as the
    module says, the same on every rank."""
    name = precision.canonical(name, "training.autocast", precision.TRAINING)
    if name != "auto":
        return name, "as the recipe says"
    hardware = detect(device)
    if not hardware.native_bf16:
        return precision.choose("auto", hardware)
    chosen, why = ("fp32", "")
    if context.is_main:
        chosen, why = _measured(encoder, device, hardware, sequences, clock)
    if context.world_size > 1:
        shared = [chosen, why]
        dist.broadcast_object_list(shared, src=0)
        chosen, why = shared
    return chosen, why


def _measured(
    encoder: TrainableEncoder,
    device: torch.device,
    hardware: Hardware,
    sequences: int,
    clock: Callable[[], float] | None,
) -> tuple[str, str]:
    ids, mask = probe_batch(encoder, sequences, device)
    key = record_key(encoder, device, hardware, list(ids.shape))
    path = auto_precision.record_path(f"train-{key}")
    record = int8_gate.read_record(path, StepRecord, key, "training autocast record")
    if record is None:
        logger.info("training.autocast auto: timing a bf16 and an fp32 step once (recorded in %s)", path)
        seconds = time_steps(encoder, ids, mask, device, clock)
        chosen = "bf16" if seconds["fp32"] >= MARGIN * seconds["bf16"] else "fp32"
        record = StepRecord(
            key=key, machine=describe_machine(),
            measured=datetime.datetime.now().isoformat(timespec="seconds"), protocol=PROTOCOL,
            batch=list(ids.shape), seconds={name: round(value, 5) for name, value in seconds.items()},
            chosen=chosen,
        )  # fmt: skip
        int8_gate.write_record(path, record)
    return record.chosen, record.describe()


def probe_batch(
    encoder: TrainableEncoder, sequences: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sequences`` of auto_precision's probe texts as the run's encoder tokenises them."""
    texts = auto_precision.probe_texts(max(sequences, 1))
    tokens = encoder.tokenizer(
        texts, padding=True, truncation=True, max_length=encoder.max_length, return_tensors="pt"
    )
    return tokens["input_ids"].to(device), tokens["attention_mask"].to(device)


def record_key(encoder: TrainableEncoder, device: torch.device, hardware: Hardware, batch: list[int]) -> str:
    """What a step's timing depends on: the encoder's shapes and pooler, the batch, the device, the
    machine."""
    shapes = [(name, list(p.shape), str(p.dtype)) for name, p in encoder.named_parameters()]
    described = [type(encoder).__name__, encoder.pooler, shapes, batch, device.type]
    return int8_gate.digest_key([described, auto_precision.machine_key(hardware)])


def time_steps(
    encoder: TrainableEncoder,
    ids: torch.Tensor,
    mask: torch.Tensor,
    device: torch.device,
    clock: Callable[[], float] | None = None,
) -> dict[str, float]:
    """The median seconds of the encoder's training pass and backward under fp32 and under bf16 autocast;
    nothing of the run changes (no gradient written, the RNGs forked, the mode restored)."""
    parameters = [p for p in encoder.parameters() if p.requires_grad]
    was_training = encoder.training
    devices = [device] if device.type == "cuda" else []

    def step(name: str) -> Callable[[], None]:
        def run() -> None:
            with precision.autocast(name, device):
                embeddings = encoder.embed_tokens(ids, mask)
            torch.autograd.grad(embeddings.float().square().mean(), parameters, allow_unused=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        return run

    with torch.random.fork_rng(devices=devices):
        encoder.train()
        try:
            return auto_precision.interleaved_medians(
                {"fp32": step("fp32"), "bf16": step("bf16")}, ROUNDS, clock or time.perf_counter
            )
        finally:
            encoder.train(was_training)
