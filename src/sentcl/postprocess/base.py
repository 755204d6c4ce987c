"""A post-processor maps fitted embeddings to new ones; wrapped around any Embedder it is an Embedder again.

Each post-processor is fitted on the embeddings of a chosen corpus (NLI sentences, the target task's
sentences, any text file), saved as ``postprocess.json`` + ``postprocess.safetensors`` in a folder, and
loaded back with :func:`load_postprocessor`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
from safetensors.numpy import load_file, save_file

from sentcl.atomic_write import atomic_folder
from sentcl.embedder import Embedder

CONFIG_FILE = "postprocess.json"
WEIGHTS_FILE = "postprocess.safetensors"


class PostProcessor:
    """Subclasses set ``name``, implement ``fit``/``transform`` and list their arrays in ``arrays()``."""

    name: ClassVar[str] = ""

    def fit(self, embeddings: np.ndarray) -> PostProcessor:
        raise NotImplementedError

    def transform(self, embeddings: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def options(self) -> dict:
        """Constructor arguments, written to postprocess.json."""
        return {}

    def arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def save(self, folder: str | Path, fitted_on: str = "", overwrite: bool = False) -> Path:
        """Write the fitted post-processor atomically; a folder sentcl did not write is replaced only with
        ``overwrite`` (sentcl/atomic_write.py)."""
        with atomic_folder(folder, "postprocessor", overwrite) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in self.arrays().items()}, str(tmp / WEIGHTS_FILE))
            config = {"name": self.name, "options": self.options(), "fitted_on": fitted_on}
            (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        return Path(folder)


class PostProcessedEmbedder:
    """``embedder`` followed by ``processor``: what evaluation and analysis see as one model."""

    def __init__(self, embedder: Embedder, processor: PostProcessor):
        self.embedder = embedder
        self.processor = processor
        self.prompts = getattr(embedder, "prompts", None) or {}  # retrieval applies them before encode
        self.takes_prompt = getattr(embedder, "takes_prompt", False)  # handed to the embedder's pooling

    def encode(self, sentences: Sequence[str], **options) -> np.ndarray:
        return self.processor.transform(self.embedder.encode(sentences, **options)).astype(np.float32)


def fit_postprocessor(
    processor: PostProcessor, embedder: Embedder, sentences: Sequence[str]
) -> PostProcessor:
    if len(sentences) < 2:
        raise ValueError("a post-processor needs at least two sentences to fit on")
    return processor.fit(np.asarray(embedder.encode(list(sentences)), dtype=np.float64))


def load_postprocessor(folder: str | Path, registry: dict[str, type[PostProcessor]]) -> PostProcessor:
    folder = Path(folder)
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder}: no {CONFIG_FILE}; not a saved post-processor")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("name") not in registry:
        raise ValueError(f"{config_path}: unknown post-processor {config.get('name')!r}")
    processor = registry[config["name"]](**config.get("options", {}))
    processor.set_arrays(load_file(str(folder / WEIGHTS_FILE)))
    return processor
