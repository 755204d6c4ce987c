"""Encoding a large input on several devices or processes at once (``sentcl encode --device cpu,cpu`` or
``cuda:0,cuda:1``), as ``SentenceTransformer.encode`` does with a device list: one worker process per device
(spawned; each loads the model there, a CPU worker with its share of the cores), the sentences cut into
chunks handed out in order and the vectors put back in input order."""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat

import numpy as np
import torch
from tqdm.auto import tqdm

from sentcl.hardware import resolve_device

_WORKER: dict = {}


def _start(devices, model: str, dtype: str, pooler: str | None, allow_pickle: bool, threads: int) -> None:
    from sentcl.model.inference import for_inference, load_encoder

    device = devices.get()
    if device.startswith("cpu"):
        torch.set_num_threads(threads)
    _WORKER["model"] = for_inference(load_encoder(model, pooler, allow_pickle), dtype, device=device)


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
) -> np.ndarray:
    """[N, D] float32 of ``sentences`` in their order, encoded by one worker process per entry of
    ``devices`` (a device may repeat: ``["cpu", "cpu"]`` is two CPU processes). Each device is checked here
    first (one ConfigError naming it); an error in a worker is raised here as it was raised there."""
    for device in devices:
        resolve_device(device, "--device")
    sentences = list(sentences)
    per_chunk = max(batch_size, math.ceil(len(sentences) / (8 * len(devices))))
    chunks = [sentences[i : i + per_chunk] for i in range(0, len(sentences), per_chunk)]
    cpu_workers = sum(1 for d in devices if d.startswith("cpu")) or 1
    threads = max(1, (os.cpu_count() or 1) // cpu_workers)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    for device in devices:
        queue.put(device)
    with ProcessPoolExecutor(
        len(devices), mp_context=context, initializer=_start,
        initargs=(queue, model, dtype, pooler, allow_pickle, threads),
    ) as pool:  # fmt: skip
        results = pool.map(_encode, chunks, repeat(batch_size), repeat(prompt_name), repeat(prompt))
        vectors = list(
            tqdm(results, total=len(chunks), desc="encoding", unit="chunk", disable=not show_progress)
        )
    return np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)
