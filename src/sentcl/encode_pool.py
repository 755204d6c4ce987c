"""Worker processes that encode with a model already in memory, one per device: the engine behind
``start_multi_process_pool`` / ``encode(pool=...)`` / ``encode(device=[...])`` of every sentcl encoder
(encode_contract.py) and behind ``sentcl encode --device cpu,cpu`` (model/parallel.py). Each worker is
spawned and gets the model as sentence-transformers sends it (pickled), or, for an ONNX model whose session
cannot be pickled, a loader and its folder; CPU workers share the machine's cores; the sentences go in
chunks handed out in order and the vectors come back in input order."""

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

from sentcl.config import ConfigError
from sentcl.hardware import resolve_device

_WORKER: dict = {}


def _start_with(devices, payload, threads: int) -> None:
    device = devices.get()
    if device.startswith("cpu"):
        torch.set_num_threads(threads)
    # the model itself (pickled), or how to load it (a loader and its folder: an ONNX session cannot be
    # pickled)
    model = payload[0](payload[1]) if isinstance(payload, tuple) else payload
    model._place(device)
    _WORKER["model"] = model


def _embed_chunk(chunk: list[str], batch_size: int, prompt_length: int) -> np.ndarray:
    return _WORKER["model"]._embed(chunk, batch_size, False, prompt_length)


def spawn_executor(devices: Sequence[str], initializer, initargs: tuple) -> ProcessPoolExecutor:
    """One spawned worker per device, each started by ``initializer(queue of devices, *initargs, threads)``;
    CPU workers share the machine's cores."""
    for device in devices:
        resolve_device(device, "device")
    cpu_workers = sum(1 for d in devices if d.startswith("cpu")) or 1
    threads = max(1, (os.cpu_count() or 1) // cpu_workers)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    for device in devices:
        queue.put(device)
    return ProcessPoolExecutor(
        len(devices), mp_context=context, initializer=initializer, initargs=(queue, *initargs, threads)
    )


def in_chunks(sentences: list[str], size: int) -> list[list[str]]:
    return [sentences[i : i + size] for i in range(0, len(sentences), size)]


class EncodePool:
    """Worker processes, one per device, each holding ``model`` (``start_multi_process_pool``)."""

    def __init__(self, model, devices: Sequence[str]):
        if not devices:
            raise ConfigError("device: a pool needs at least one device")
        self.devices = [str(d) for d in devices]
        payload = model._pool_payload()
        self.executor = spawn_executor(self.devices, _start_with, (payload,))

    def embed(
        self,
        texts: list[str],
        batch_size: int,
        prompt_length: int = 0,
        chunk_size: int | None = None,
        show_progress: bool | None = None,
    ) -> np.ndarray:
        """The model's own vectors of ``texts`` (float32 [N, D]) in input order."""
        size = chunk_size or max(batch_size, math.ceil(len(texts) / (8 * len(self.devices))))
        chunks = in_chunks(texts, size)
        results = self.executor.map(_embed_chunk, chunks, repeat(batch_size), repeat(prompt_length))
        vectors = list(
            tqdm(results, total=len(chunks), desc="encoding", unit="chunk", disable=not show_progress)
        )
        return np.concatenate(vectors)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
