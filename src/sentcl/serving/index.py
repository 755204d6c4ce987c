"""A searchable corpus: L2-normalised embeddings in faiss, scored by inner product (= cosine).

``flat`` is exact search (IndexFlatIP); ``ivf`` partitions the corpus into ``nlist`` Voronoi cells
(IndexIVFFlat) and visits ``nprobe`` of them per query — approximate, much faster on large corpora.
``auto`` picks flat below 100,000 sentences. A saved index folder holds the faiss index, the corpus texts
(one JSON string per line) and ``index.json`` (kind, size, dimension, the model that embedded it).
The index sees a model only through the :class:`Embedder` protocol (``encode(texts) → vectors``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sentcl.atomic_write import atomic_folder
from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, require_finite
from sentcl.extras import require

if TYPE_CHECKING:
    import faiss

FLAT_LIMIT = 100_000
#: the files of an index folder, each fingerprinted in index.json
INDEX_FILES = ("index.faiss", "texts.jsonl")


class IndexFolderError(ValueError):
    """An index folder that cannot be used as it is; the message names the file."""


def _fingerprint(path: Path) -> dict:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


@dataclass(frozen=True)
class Hit:
    text: str
    score: float  # cosine similarity
    id: int  # row in the corpus


def _faiss():
    """faiss, imported when an index is used (importing sentcl for training does not load it)."""
    return require("faiss", "index", "a faiss index")


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    _faiss().normalize_L2(x)
    return x


class SentenceIndex:
    def __init__(self, index: faiss.Index, texts: list[str], kind: str, model: str | None = None):
        if index.ntotal != len(texts):
            raise ValueError(f"the index holds {index.ntotal} vectors but {len(texts)} texts were given")
        self.index, self.texts, self.kind, self.model = index, texts, kind, model

    @classmethod
    def build(
        cls, embeddings: np.ndarray, texts: list[str], kind: str = "auto", nlist: int | None = None,
        nprobe: int = 16, model: str | None = None,
    ) -> SentenceIndex:  # fmt: skip
        if len(embeddings) != len(texts):
            raise ValueError(f"{len(embeddings)} embeddings for {len(texts)} texts")
        if len(texts) == 0:
            raise ValueError("cannot index an empty corpus")
        vectors = _normalise(embeddings)
        faiss = _faiss()
        dim = vectors.shape[1]
        if kind == "auto":
            kind = "flat" if len(texts) < FLAT_LIMIT else "ivf"
        if kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif kind == "ivf":
            nlist = nlist or max(1, min(len(texts) // 39, int(4 * math.sqrt(len(texts)))))  # ≥ 39 points/cell
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
            index.nprobe = min(nprobe, nlist)
        else:
            raise ValueError(f"index kind {kind!r} is not one of auto, flat, ivf")
        index.add(vectors)
        return cls(index, list(texts), kind, model)

    @classmethod
    def of_corpus(
        cls, embedder: Embedder, corpus: Sequence[str], kind: str = "auto", model: str | None = None
    ) -> SentenceIndex:
        """Embed ``corpus`` with any :class:`Embedder` and index it; ``model`` is recorded with the index
        (what ``sentcl search`` reloads)."""
        corpus = list(corpus)
        vectors = np.asarray(for_role(embedder, DOCUMENT).encode(corpus), dtype=np.float32)  # its prompt
        vectors = require_finite(vectors, corpus, model)
        return cls.build(vectors, corpus, kind, model=model)

    def query(
        self, embedder: Embedder, queries: str | Sequence[str], top_k: int = 5, threshold: float | None = None
    ) -> list[list[Hit]]:
        """:meth:`search` with queries as text, embedded by ``embedder`` (the one that built the index)."""
        queries = [queries] if isinstance(queries, str) else list(queries)
        vectors = np.asarray(for_role(embedder, QUERY).encode(queries))  # the model's query prompt
        return self.search(vectors, top_k=top_k, threshold=threshold)

    def __len__(self) -> int:
        return len(self.texts)

    def check_dimension(self, dimension: int, model: str, where: str = "the index") -> None:
        """Refuse a query model whose vectors are not the index's size (IndexFolderError naming both)."""
        if dimension != self.index.d:
            built = self.model or "an unrecorded model"
            raise IndexFolderError(
                f"{where} holds {self.index.d}-dim vectors (built with {built}), but {model} gives "
                f"{dimension}-dim ones"
            )

    def search(
        self, query_embeddings: np.ndarray, top_k: int = 5, threshold: float | None = None
    ) -> list[list[Hit]]:
        """For each query the ``top_k`` most similar sentences (cosine ≥ ``threshold`` if given)."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        query_embeddings = np.atleast_2d(query_embeddings)
        self.check_dimension(query_embeddings.shape[1], "the query embedding")
        scores, ids = self.index.search(_normalise(query_embeddings), min(top_k, len(self)))
        results = []
        for row_scores, row_ids in zip(scores, ids, strict=True):
            hits = [
                Hit(self.texts[i], float(s), int(i))
                for s, i in zip(row_scores, row_ids, strict=True)
                if i >= 0
            ]
            results.append([h for h in hits if threshold is None or h.score >= threshold])
        return results

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        """Write the index folder atomically; a folder sentcl did not write is replaced only with
        ``overwrite`` (sentcl/atomic_write.py). ``index.json`` records each file's size and sha256."""
        with atomic_folder(folder, "index", overwrite) as tmp:
            _faiss().write_index(self.index, str(tmp / "index.faiss"))
            with (tmp / "texts.jsonl").open("w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(text) + "\n" for text in self.texts)
            meta = {"kind": self.kind, "size": len(self), "dimension": self.index.d, "model": self.model}
            meta["files"] = {name: _fingerprint(tmp / name) for name in INDEX_FILES}
            (tmp / "index.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path) -> SentenceIndex:
        """The index of a folder ``save`` wrote, its files checked against ``index.json`` (size and sha256)
        before faiss reads them: flipped bytes, a swapped file or a header claiming gigabytes are one
        IndexError line, never served or allocated."""
        folder = Path(folder)
        meta_path = folder / "index.json"
        if not meta_path.is_file():
            raise IndexFolderError(f"{folder}: no index.json; not a sentcl index folder")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            files, size, dimension = meta["files"], int(meta["size"]), int(meta["dimension"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            raise IndexFolderError(
                f"{meta_path}: not an index.json this sentcl can check (no file fingerprints: an index of an "
                f"older version, or a damaged one); build it again with sentcl index"
            ) from None
        for name in INDEX_FILES:
            path = folder / name
            if not path.is_file():
                raise IndexFolderError(f"{path}: missing")
            if path.stat().st_size != files.get(name, {}).get("bytes") or _fingerprint(path) != files.get(
                name
            ):
                raise IndexFolderError(
                    f"{path}: does not match index.json (damaged or replaced); build it again"
                )
        texts = [
            json.loads(line) for line in (folder / "texts.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        index = _faiss().read_index(str(folder / "index.faiss"))
        if index.ntotal != size or index.d != dimension or len(texts) != size:
            raise IndexFolderError(f"{folder}: index.json says {size} × {dimension}, the files do not")
        return cls(index, texts, meta["kind"], meta.get("model"))
