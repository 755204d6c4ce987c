"""Encoding a large input on several devices or processes at once (``sentcl encode --device cpu,cpu`` or
``cuda:0,cuda:1``), as ``SentenceTransformer.encode`` does with a device list: one worker process per device
(spawned; each loads the model there, a CPU worker with its share of the cores), the sentences cut into
chunks handed out in order and the vectors put back in input order.

``EncodePool`` is the same engine for a model already in memory (the Python API's ``encode(device=[...])``,
``start_multi_process_pool`` / ``encode(pool=...)`` / ``stop_multi_process_pool``, as sentence-transformers
spells them): the model goes to each worker as sentence-transformers sends it (pickled), or, for an ONNX
model whose session cannot be pickled, by its folder."""

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


def _start_with(devices, payload, threads: int) -> None:
    from sentcl.model.inference import load_encoder

    device = devices.get()
    if device.startswith("cpu"):
        torch.set_num_threads(threads)
    model = load_encoder(payload) if isinstance(payload, str) else payload
    model._place(device)
    _WORKER["model"] = model


def _embed_chunk(chunk: list[str], batch_size: int, prompt_length: int) -> np.ndarray:
    return _WORKER["model"]._embed(chunk, batch_size, False, prompt_length)


def _executor(devices: Sequence[str], initializer, initargs: tuple) -> ProcessPoolExecutor:
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


def _chunks(sentences: list[str], size: int) -> list[list[str]]:
    return [sentences[i : i + size] for i in range(0, len(sentences), size)]


class EncodePool:
    """Worker processes, one per device, each holding ``model`` (``start_multi_process_pool``)."""

    def __init__(self, model, devices: Sequence[str]):
        if not devices:
            raise ConfigError("device: a pool needs at least one device")
        self.devices = [str(d) for d in devices]
        payload = model._pool_payload()
        self.executor = _executor(self.devices, _start_with, (payload,))

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
        chunks = _chunks(texts, size)
        results = self.executor.map(_embed_chunk, chunks, repeat(batch_size), repeat(prompt_length))
        vectors = list(
            tqdm(results, total=len(chunks), desc="encoding", unit="chunk", disable=not show_progress)
        )
        return np.concatenate(vectors)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


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
    chunks = _chunks(sentences, max(batch_size, math.ceil(len(sentences) / (8 * len(devices)))))
    with _executor(devices, _start, (model, dtype, pooler, allow_pickle, batch_tokens)) as pool:
        results = pool.map(_encode, chunks, repeat(batch_size), repeat(prompt_name), repeat(prompt))
        vectors = list(
            tqdm(results, total=len(chunks), desc="encoding", unit="chunk", disable=not show_progress)
        )
    return np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)
