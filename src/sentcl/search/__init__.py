"""Finding sentences by their vectors: the faiss index of a corpus (exact, IVF, binary with int8 rescoring)
in memory, the LanceDB index on disk (IVF-PQ with exact rescoring, larger than memory), the embedding
quantization they and ``sentcl encode --precision`` use, and hard-negative mining for training data. It sees
models only through the Embedder protocol (an import contract says so)."""

from __future__ import annotations

import json
from pathlib import Path

from sentcl.search.index import Hit, IndexFolderError, SentenceIndex
from sentcl.search.lance_index import LanceIndex

__all__ = ["Hit", "IndexFolderError", "LanceIndex", "SentenceIndex", "load_index"]


def load_index(folder: str | Path) -> SentenceIndex | LanceIndex:
    """The index a folder holds, whichever backend wrote it (its index.json says)."""
    try:
        backend = json.loads((Path(folder) / "index.json").read_text(encoding="utf-8")).get("backend")
    except (OSError, ValueError, AttributeError):
        backend = None  # SentenceIndex.load says what is wrong with the folder
    return LanceIndex.load(folder) if backend == "lance" else SentenceIndex.load(folder)
