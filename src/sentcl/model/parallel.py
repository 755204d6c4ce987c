"""Encoding a large input on several devices or processes at once (``sentcl encode --device cpu,cpu`` or
``cuda:0,cuda:1``), as ``SentenceTransformer.encode`` does with a device list: one worker process per device
(spawned; each loads the model there, a CPU worker with its share of the cores), the sentences cut into
chunks handed out in order and the vectors put back in input order. The workers are encode_pool.py's, the
engine a model already in memory uses too (``start_multi_process_pool``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import torch
from tqdm.auto import tqdm

from sentcl.encode_pool import in_chunks, spawn_executor
from sentcl.hardware import resolve_device

_WORKER: dict = {}


def _start(
    devices, model: str, dtype: str, pooler: str | None, allow_pickle: bool, batch_tokens: int | None,
    threads: int,
) -> None:  # fmt: skip
    from sentcl.model.inference import for_inference, load_encoder

    device = devices.get()
    if device.startswith("cpu"):
        torch.set_num_threads(threads)
    _WORKER["model"] = for_inference(load_encoder(model, pooler, allow_pickle), dtype, device=device)
    _WORKER["model"].max_batch_tokens = batch_tokens


def _encode(chunk: list[str], batch_size: int, prompt_name: str | None, prompt: str | None) -> np.ndarray:
    model = _WORKER["model"]
    return model.encode(
        chunk, batch_size=batch_size, show_progress=False, prompt_name=prompt_name, prompt=prompt
    )


def encode_on_devices(
    model: str,
    sentences: Sequence[str],
    devices: Sequence[str],
    *,
    dtype: str = "auto",
    batch_size: int = 128,
    pooler: str | None = None,
    allow_pickle: bool = False,
    prompt_name: str | None = None,
    prompt: str | None = None,
    show_progress: bool = True,
    batch_tokens: int | None = None,
) -> np.ndarray:
    """[N, D] float32 of ``sentences`` in their order, encoded by one worker process per entry of
    ``devices`` (a device may repeat: ``["cpu", "cpu"]`` is two CPU processes). Each device is checked here
    first (one ConfigError naming it); an error in a worker is raised here as it was raised there."""
    for device in devices:
        resolve_device(device, "--device")
    sentences = list(sentences)
    chunks = in_chunks(sentences, max(batch_size, math.ceil(len(sentences) / (8 * len(devices)))))
    with spawn_executor(devices, _start, (model, dtype, pooler, allow_pickle, batch_tokens)) as pool:
        results = pool.map(_encode, chunks, repeat(batch_size), repeat(prompt_name), repeat(prompt))
        vectors = list(
            tqdm(results, total=len(chunks), desc="encoding", unit="chunk", disable=not show_progress)
        )
    return np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)
