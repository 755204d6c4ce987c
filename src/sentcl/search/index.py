"""A searchable corpus: L2-normalised embeddings in faiss, scored by inner product (= cosine).

``flat`` is exact search (IndexFlatIP); ``ivf`` partitions the corpus into ``nlist`` Voronoi cells
(IndexIVFFlat) and visits ``nprobe`` of them per query — approximate, much faster on large corpora.
``auto`` picks flat below 100,000 sentences. ``binary`` keeps one bit per dimension in memory
(IndexBinaryFlat, 32× less than float32): the ``rescore`` × top_k nearest by Hamming distance are rescored
with the float query against int8 codes of the documents (search/quantization.py), read from a memory-mapped
file, as sentence-transformers' binary + int8 rescoring recipe. A saved index folder holds the faiss index,
the corpus texts (one JSON string per line), for ``binary`` the int8 codes and their ranges, for a corpus of
documents their ids and the fields kept for results (``documents.jsonl``, one ``{"id", "fields"}`` a row), and
``index.json`` (kind, size, dimension, the model that embedded it, the fields that made the documents).
The index sees a model only through the :class:`Embedder` protocol (``encode(texts) → vectors``).

An index of passages (``sentcl index --passages``; :class:`PassageRows`) holds one vector per passage of
each document (sentcl/passages.py) and answers with documents: a document scores its best passage's cosine,
and a hit carries that passage's text. A search reads ``top_k`` × the most passages a document has, which
always holds the best ``top_k`` documents (each document above the k-th has at most that many passages
above it), so a flat index of passages is exact; hybrid search fuses that document ranking with BM25 over
the whole documents.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sentcl.atomic_write import atomic_folder
from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, require_finite
from sentcl.errors import UserError
from sentcl.extras import require
from sentcl.search.lexical import BM25Index, reciprocal_rank_fusion
from sentcl.search.quantization import dequantize_int8, int8_ranges, quantize

if TYPE_CHECKING:
    import faiss

FLAT_LIMIT = 100_000
#: cells an ``ivf`` index visits per query unless told
NPROBE = 16

#: the files of an index folder, each fingerprinted in index.json
INDEX_FILES = ("index.faiss", "texts.jsonl")
#: and those of a binary index: the documents' int8 codes and their ranges, for rescoring
RESCORE_FILES = ("rescore_int8.npy", "rescore_ranges.npy")
#: and those of a corpus of documents: each row's id and the fields kept for its results
DOCUMENT_FILES = ("documents.jsonl",)
#: and those of an index of passages: each passage's text, and each document's first passage
PASSAGE_FILES = ("passages.jsonl", "passage_starts.npy")
KINDS = ("auto", "flat", "ivf", "binary")
#: how deep each ranking goes before hybrid search fuses them
HYBRID_DEPTH = 100


class IndexFolderError(UserError, ValueError):
    """An index folder that cannot be used as it is; the message names the file."""


def ivf_cells(rows: int) -> int:
    """The cells of an ``ivf`` index of ``rows`` vectors unless told: 4√rows, at least 39 points a cell."""
    return max(1, min(rows // 39, int(4 * math.sqrt(rows))))


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
    key: str | None = None  # the row's id in its input, where the index keeps one (documents, a lance index)
    fields: dict | None = None  # the document's fields kept for results (sentcl index --field)


@dataclass
class PassageRows:
    """The passages of an index of passages: the faiss index's row ``p`` is passage ``texts[p]``; document
    ``d``'s passages are rows ``starts[d]`` to ``starts[d + 1]``; ``settings`` says how they were cut (the
    window's overlap, the model's length), recorded in index.json."""

    texts: list[str]
    starts: np.ndarray  # [D + 1] int64
    settings: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.starts = np.asarray(self.starts, dtype=np.int64)
        sizes = np.diff(self.starts)
        if self.starts[0] != 0 or self.starts[-1] != len(self.texts) or (sizes < 1).any():
            raise ValueError(
                "passage starts must rise from 0 to the passage count, one passage a document at least"
            )
        self.owner = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        #: the most passages one document has: a search reads top_k × this many passages
        self.widest = int(sizes.max())

    def best(self, scores: np.ndarray, rows: np.ndarray, top_k: int) -> tuple[np.ndarray, ...]:
        """Passages ranked best first (``scores``, ``rows`` [Q, n], -1 for none) as documents: each
        document's first (best) passage; its score, document row and passage row, ``top_k`` a query."""
        best = np.full((len(rows), top_k), -np.inf, dtype=np.float32)
        documents = np.full((len(rows), top_k), -1, dtype=np.int64)
        passages = np.full((len(rows), top_k), -1, dtype=np.int64)
        for q, (query_scores, query_rows) in enumerate(zip(scores, rows, strict=True)):
            seen: set[int] = set()
            for score, row in zip(query_scores, query_rows, strict=True):
                if row < 0 or int(self.owner[row]) in seen:
                    continue
                column = len(seen)
                best[q, column], documents[q, column], passages[q, column] = score, self.owner[row], row
                seen.add(int(self.owner[row]))
                if len(seen) == top_k:
                    break
        return best, documents, passages


def _faiss():
    """faiss, imported when an index is used (importing sentcl for training does not load it)."""
    return require("faiss", "index", "a faiss index")


def _normalize(x: np.ndarray) -> np.ndarray:
    """Unit rows, in a copy: faiss normalises in place, and the caller's array (perhaps read-only, e.g.
    memory-mapped) is not sentcl's to change."""
    x = np.array(x, dtype=np.float32, order="C", copy=True)
    _faiss().normalize_L2(x)
    return x


class SentenceIndex:
    backend = "faiss"

    def __init__(
        self, index: faiss.Index, texts: list[str], kind: str, model: str | None = None,
        rescore: tuple[np.ndarray, np.ndarray] | None = None, rescore_multiplier: int = 4,
        documents: DocumentRows | None = None, settings: dict | None = None,
        passages: PassageRows | None = None,
    ):  # fmt: skip
        rows = len(texts) if passages is None else len(passages.texts)
        if index.ntotal != rows:
            raise ValueError(
                f"the index holds {index.ntotal} vectors but {rows} texts or passages were given"
            )
        if passages is not None and len(passages.starts) != len(texts) + 1:
            raise ValueError(f"passages of {len(passages.starts) - 1} documents for {len(texts)} texts")
        #: an index of passages: each vector's passage and its document (None: a vector a text)
        self.passages = passages
        if documents is not None and len(documents.ids) != len(texts):
            raise ValueError(f"{len(documents.ids)} document ids for {len(texts)} texts")
        #: a corpus of documents: each row's id and kept fields (None: rows are known by their line)
        self.documents = documents
        #: how the model encoded the documents (its weights, pooling, length, prompt, precision): an update
        #: encodes with the same settings or not at all
        self.settings = settings
        if (kind == "binary") != (rescore is not None):
            raise ValueError("a binary index, and only one, has int8 codes to rescore with")
        self.index, self.texts, self.kind, self.model = index, texts, kind, model
        self._bm25: BM25Index | None = None  # hybrid search's BM25 over the texts, built when first asked
        #: binary: the documents' int8 codes [N, D] and their ranges [2, D]
        self.rescore, self.rescore_multiplier = rescore, rescore_multiplier

    @classmethod
    def build(
        cls, embeddings: np.ndarray, texts: list[str], kind: str = "auto", nlist: int | None = None,
        nprobe: int = NPROBE, model: str | None = None, documents: DocumentRows | None = None,
        settings: dict | None = None, passages: PassageRows | None = None,
    ) -> SentenceIndex:  # fmt: skip
        """An index of ``embeddings``, one for each of ``texts`` (or of ``passages``' texts)."""
        rows = len(texts) if passages is None else len(passages.texts)
        if len(embeddings) != rows:
            raise ValueError(f"{len(embeddings)} embeddings for {rows} texts or passages")
        if len(texts) == 0:
            raise ValueError("cannot index an empty corpus")
        own: dict[str, Any] = {"documents": documents, "settings": settings, "passages": passages}
        vectors = _normalize(embeddings)
        faiss = _faiss()
        dim = vectors.shape[1]
        if kind == "auto":
            kind = "flat" if rows < FLAT_LIMIT else "ivf"
        if kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif kind == "binary":
            if dim % 8:
                raise ValueError(f"a binary index packs 8 dimensions to a byte; {dim} is not a multiple of 8")
            index = faiss.IndexBinaryFlat(dim)
            index.add(quantize(vectors, "ubinary"))
            ranges = int8_ranges(vectors)  # the corpus calibrates its own codes
            rescore = (quantize(vectors, "int8", ranges), ranges)
            return cls(index, list(texts), kind, model, rescore=rescore, **own)
        elif kind == "ivf":
            nlist = nlist or ivf_cells(rows)
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
            index.nprobe = min(nprobe, nlist)
        else:
            raise ValueError(f"index kind {kind!r} is not one of {', '.join(KINDS)}")
        index.add(vectors)
        return cls(index, list(texts), kind, model, **own)

    @classmethod
    def of_corpus(
        cls,
        embedder: Embedder,
        corpus: Sequence[str],
        kind: str = "auto",
        model: str | None = None,
        documents: DocumentRows | None = None,
        settings: dict | None = None,
    ) -> SentenceIndex:
        """Embed ``corpus`` with any :class:`Embedder` and index it; ``model`` is recorded with the index
        (what ``sentcl search`` reloads), ``documents`` the rows' ids and kept fields (results carry them),
        ``settings`` how the model encoded them (what an update checks)."""
        corpus = list(corpus)
        vectors = embed_documents(embedder, corpus, model)
        return cls.build(vectors, corpus, kind, model=model, documents=documents, settings=settings)

    def stored_vectors(self) -> np.ndarray:
        """The unit vectors the index holds [N, D] (float32; a binary index: its bits, uint8 [N, D/8])."""
        if self.kind == "ivf":
            _faiss().extract_index_ivf(self.index).make_direct_map()  # a row's vector, found by its id
        return self.index.reconstruct_n(0, self.index.ntotal)

    def updated(
        self, update: Update, texts: list[str], documents: DocumentRows, vectors: np.ndarray
    ) -> SentenceIndex:
        """This index for the new corpus ``texts`` / ``documents``: row i holds old row ``update.reuse[i]``
        or the next of ``vectors`` (the encoded rows, in order). Nothing is encoded again and nothing trained:
        an IVF index keeps its cells (its quantizer), a binary one its int8 ranges."""
        if self.passages is not None:
            raise IndexFolderError("an index of passages is built again, not updated")
        reuse = np.array([-1 if r is None else r for r in update.reuse], dtype=np.int64)
        fresh = np.flatnonzero(reuse < 0)
        if len(fresh) != len(vectors):
            raise ValueError(f"{len(vectors)} vectors for {len(fresh)} documents to encode")
        if len(texts) == 0:
            raise ValueError("an update cannot leave the index empty")
        old = self.stored_vectors()
        faiss = _faiss()
        rescore = None
        if self.kind == "binary":
            assert self.rescore is not None
            codes, ranges = self.rescore
            unit = _normalize(vectors) if len(vectors) else np.zeros((0, self.index.d), np.float32)
            bits = np.empty((len(texts), old.shape[1]), dtype=np.uint8)
            int8 = np.empty((len(texts), self.index.d), dtype=np.int8)
            bits[reuse >= 0], int8[reuse >= 0] = old[reuse[reuse >= 0]], np.asarray(codes)[reuse[reuse >= 0]]
            bits[fresh], int8[fresh] = quantize(unit, "ubinary"), quantize(unit, "int8", ranges)
            index = faiss.IndexBinaryFlat(self.index.d)
            index.add(bits)
            rescore = (int8, ranges)
        else:
            rows = np.empty((len(texts), self.index.d), dtype=np.float32)
            rows[reuse >= 0] = old[reuse[reuse >= 0]]
            if len(fresh):
                rows[fresh] = _normalize(vectors)
            index = faiss.clone_index(self.index)  # an IVF index's trained cells and nprobe go with it
            index.reset()
            index.add(rows)
        return SentenceIndex(
            index,
            list(texts),
            self.kind,
            self.model,
            rescore,
            self.rescore_multiplier,
            documents,
            self.settings,
        )

    @property
    def has_ids(self) -> bool:
        """Whether its rows are documents known by the user's ids (not sentences known by their line)."""
        return self.documents is not None

    def hit(self, row: int, score: float, text: str | None = None) -> Hit:
        """Row ``row`` as a search result: its text (or ``text``: the passage that found it), its score, and
        its id and fields where it has them."""
        text = self.texts[row] if text is None else text
        if self.documents is None:
            return Hit(text, score, row)
        return Hit(text, score, row, self.documents.ids[row], self.documents.kept_of(row))

    def query(
        self, embedder: Embedder, queries: str | Sequence[str], top_k: int = 5, threshold: float | None = None
    ) -> list[list[Hit]]:
        """:meth:`search` with queries as text, embedded by ``embedder`` (the one that built the index)."""
        queries = [queries] if isinstance(queries, str) else list(queries)
        vectors = np.asarray(for_role(embedder, QUERY).encode(queries))  # the model's query prompt
        return self.search(vectors, top_k=top_k, threshold=threshold)

    def hybrid_search(
        self, query_embeddings: np.ndarray, queries: Sequence[str], top_k: int = 5, depth: int = HYBRID_DEPTH
    ) -> list[list[Hit]]:
        """Hybrid search: this index's ranking and BM25's over the same texts (search/lexical.py, built once
        per index), each to ``depth``, fused by reciprocal rank; a hit's ``score`` is its fused score
        Σ 1/(60 + rank), not a cosine."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        depth = max(depth, top_k)
        dense = self.search(query_embeddings, top_k=depth)
        if self._bm25 is None:
            self._bm25 = BM25Index(self.texts)
        lexical = self._bm25.rank(list(queries), depth, [None] * len(queries))
        width = min(depth, len(self))
        rows = np.full((len(dense), width), -1, dtype=np.int64)
        for q, hits in enumerate(dense):
            rows[q, : len(hits)] = [hit.id for hit in hits]
        fused, scores = reciprocal_rank_fusion([rows, lexical], width)
        # an index of passages: a document the dense side found shows its best passage, as a dense hit does
        passage = [{hit.id: hit.text for hit in hits} if self.passages else {} for hits in dense]
        return [
            [
                self.hit(int(i), float(s), seen.get(int(i)))
                for i, s in zip(rows_q, scores_q, strict=True)
                if i >= 0
            ]
            for rows_q, scores_q, seen in zip(fused[:, :top_k], scores[:, :top_k], passage, strict=True)
        ]

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
        top_k = min(top_k, len(self))
        width = top_k if self.passages is None else min(self.index.ntotal, top_k * self.passages.widest)
        if self.kind == "binary":
            scores, ids = self._binary_search(_normalize(query_embeddings), width)
        else:
            scores, ids = self.index.search(_normalize(query_embeddings), width)
        passages = np.full(ids.shape, -1)
        if self.passages is not None:
            scores, ids, passages = self.passages.best(scores, ids, top_k)
        results = []
        for row_scores, row_ids, row_passages in zip(scores, ids, passages, strict=True):
            hits = [
                self.hit(int(i), float(s), self.passages.texts[p] if self.passages is not None else None)
                for s, i, p in zip(row_scores, row_ids, row_passages, strict=True)
                if i >= 0
            ]
            results.append([h for h in hits if threshold is None or h.score >= threshold])
        return results

    def _binary_search(self, queries: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``rescore_multiplier × top_k`` nearest by Hamming distance, rescored by the float query's
        cosine with the documents' int8 codes (dequantized), the best ``top_k`` kept."""
        assert self.rescore is not None
        codes, ranges = self.rescore
        wide = min(self.index.ntotal, top_k * self.rescore_multiplier)
        _, candidates = self.index.search(quantize(queries, "ubinary"), wide)
        scores = np.full((len(queries), top_k), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), top_k), -1, dtype=np.int64)
        for row, (query, found) in enumerate(zip(queries, candidates, strict=True)):
            found = np.sort(found[found >= 0])  # in file order: the memory-mapped codes are read forwards
            documents = dequantize_int8(np.asarray(codes[found]), ranges)
            cosine = documents @ query / np.maximum(np.linalg.norm(documents, axis=1), 1e-12)
            order = np.argsort(-cosine, kind="stable")[:top_k]
            scores[row, : len(order)], ids[row, : len(order)] = cosine[order], found[order]
        return scores, ids

    def save(self, folder: str | Path, overwrite: bool = False) -> Path:
        """Write the index folder atomically; a folder sentcl did not write is replaced only with
        ``overwrite`` (sentcl/atomic_write.py). ``index.json`` records each file's size and sha256."""
        with atomic_folder(folder, "index", overwrite) as tmp:
            if self.rescore is not None:
                _faiss().write_index_binary(self.index, str(tmp / "index.faiss"))
                for name, array in zip(RESCORE_FILES, self.rescore, strict=True):
                    np.save(tmp / name, np.asarray(array))
            else:
                _faiss().write_index(self.index, str(tmp / "index.faiss"))
            with (tmp / "texts.jsonl").open("w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(text) + "\n" for text in self.texts)
            meta = {"kind": self.kind, "size": len(self), "dimension": self.index.d, "model": self.model}
            if self.settings is not None:
                meta["encoder"] = self.settings
            if self.rescore is not None:
                meta["rescore_multiplier"] = self.rescore_multiplier
            names = INDEX_FILES + (RESCORE_FILES if self.rescore is not None else ())
            if self.documents is not None:
                self.documents.write(tmp / DOCUMENT_FILES[0])
                meta["documents"] = self.documents.fields
                names += DOCUMENT_FILES
            if self.passages is not None:
                with (tmp / PASSAGE_FILES[0]).open("w", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(text) + "\n" for text in self.passages.texts)
                np.save(tmp / PASSAGE_FILES[1], self.passages.starts)
                meta["passages"] = self.passages.settings | {"count": len(self.passages.texts)}
                names += PASSAGE_FILES
            meta["files"] = {name: _fingerprint(tmp / name) for name in names}
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
        binary = meta.get("kind") == "binary"
        has_documents = isinstance(meta.get("documents"), dict)
        has_passages = isinstance(meta.get("passages"), dict)
        for name in (
            INDEX_FILES
            + (RESCORE_FILES if binary else ())
            + (DOCUMENT_FILES if has_documents else ())
            + (PASSAGE_FILES if has_passages else ())
        ):
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
        faiss = _faiss()
        index = (faiss.read_index_binary if binary else faiss.read_index)(str(folder / "index.faiss"))
        rescore = None
        passages = _read_passages(folder, meta["passages"], size) if has_passages else None
        vectors = size if passages is None else len(passages.texts)
        if binary:  # the codes stay on disk, paged in as rescoring reads them
            codes = np.load(folder / RESCORE_FILES[0], mmap_mode="r", allow_pickle=False)
            ranges = np.load(folder / RESCORE_FILES[1], allow_pickle=False)
            if (
                codes.shape != (vectors, dimension)
                or codes.dtype != np.int8
                or ranges.shape != (2, dimension)
            ):
                raise IndexFolderError(f"{folder}: the rescoring codes are not {vectors} × {dimension} int8")
            rescore = (codes, ranges)
        documents = (
            DocumentRows.read(folder / DOCUMENT_FILES[0], meta["documents"]) if has_documents else None
        )
        if (
            index.ntotal != vectors
            or index.d != dimension
            or len(texts) != size
            or (documents is not None and len(documents.ids) != size)
        ):
            raise IndexFolderError(f"{folder}: index.json says {size} × {dimension}, the files do not")
        multiplier = int(meta.get("rescore_multiplier", 4))
        settings = meta.get("encoder") if isinstance(meta.get("encoder"), dict) else None
        return cls(
            index, texts, meta["kind"], meta.get("model"), rescore, multiplier, documents, settings, passages
        )


@dataclass
class DocumentRows:
    """The documents of an index: each row's id (the user's) and the fields kept for its results, and how
    they were read (``fields``: the id field, the text fields, the kept fields; recorded in index.json)."""

    ids: list[str]
    kept: list[dict] | None = None
    fields: dict = field(default_factory=dict)
    #: each document's content hash (:func:`content_hash` of the text encoded and the fields kept): what an
    #: update compares to encode only the documents that changed
    hashes: list[str] | None = None

    def kept_of(self, row: int) -> dict | None:
        return None if self.kept is None else self.kept[row]

    def write(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as handle:
            for row, key in enumerate(self.ids):
                line = {"id": key, "fields": self.kept_of(row)}
                if self.hashes is not None:
                    line["hash"] = self.hashes[row]
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")

    @classmethod
    def read(cls, path: Path, fields: dict) -> DocumentRows:
        ids, kept, hashes = [], [], []
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            ids.append(str(row["id"]))
            kept.append(row.get("fields"))
            hashes.append(row.get("hash"))
        return cls(
            ids,
            kept if any(k is not None for k in kept) else None,
            fields,
            hashes if all(isinstance(h, str) for h in hashes) else None,
        )


def _read_passages(folder: Path, settings: dict, size: int) -> PassageRows:
    """The passages of an index folder (its files already checked against index.json)."""
    texts = [
        json.loads(line) for line in (folder / PASSAGE_FILES[0]).read_text(encoding="utf-8").splitlines()
    ]
    starts = np.load(folder / PASSAGE_FILES[1], allow_pickle=False)
    try:
        if starts.shape != (size + 1,) or len(texts) != settings.get("count"):
            raise ValueError
        return PassageRows(texts, starts, {k: v for k, v in settings.items() if k != "count"})
    except ValueError:
        raise IndexFolderError(f"{folder}: its passages do not match index.json; build it again") from None


def embed_documents(embedder: Embedder, texts: Sequence[str], model: str | None) -> np.ndarray:
    """``texts`` as documents (the model's document prompt), float32, every value finite."""
    vectors = np.asarray(for_role(embedder, DOCUMENT).encode(list(texts)), dtype=np.float32)
    return require_finite(vectors, list(texts), model)


def content_hash(text: str, kept: dict | None) -> str:
    """A document's content as an index sees it: the text its model encodes and the fields its results
    carry (SHA-256, 32 hex digits)."""
    digest = hashlib.sha256(text.encode("utf-8"))
    digest.update(b"\0" + json.dumps(kept, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()[:32]


@dataclass
class Update:
    """What an update of an index of documents does: each row of the new corpus reuses an old row's vector
    (``reuse[i]``) or is encoded (None); the counts say why."""

    reuse: list[int | None]
    added: int = 0
    changed: int = 0
    removed: int = 0

    @property
    def encode(self) -> list[int]:
        """The rows of the new corpus to encode."""
        return [row for row, old in enumerate(self.reuse) if old is None]

    def describe(self) -> str:
        kept = len(self.reuse) - self.added - self.changed
        return f"{self.added:,} added, {self.changed:,} changed, {self.removed:,} removed, {kept:,} unchanged"


def plan_update(old: DocumentRows, ids: Sequence[str], hashes: Sequence[str]) -> Update:
    """Which documents of the corpus ``ids`` (with their content ``hashes``) an index of ``old`` documents
    encodes again: the new and the changed; the rest reuse their vectors; old ids not in it are removed."""
    assert old.hashes is not None
    before = {key: (row, digest) for row, (key, digest) in enumerate(zip(old.ids, old.hashes, strict=True))}
    update = Update([])
    for key, digest in zip(ids, hashes, strict=True):
        row, was = before.get(key, (None, None))
        same = row is not None and was == digest
        update.reuse.append(row if same else None)
        update.added += row is None
        update.changed += row is not None and not same
    update.removed = len(set(old.ids) - set(ids))
    return update
