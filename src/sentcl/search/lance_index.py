"""An index larger than memory: the corpus in a LanceDB table on disk (``sentcl index --backend lance``;
``pip install 'sentcl[lance]'``).

LanceDB is embedded (no server): the table is files in the index folder (``lance/``), read in pages, so
a corpus of a billion rows is searched without holding its vectors in memory, and the same files can sit
on object storage or be written by Ray or Spark. ``ivf_pq`` partitions the L2-normalised vectors into
``partitions`` IVF cells and codes them by product quantization (``sub_vectors`` codes of 8 bits, so a
384-d float32 vector of 1,536 bytes is 48 bytes in the index); a query visits ``nprobes`` cells, ranks by
the codes and rescores the best ``refine_factor`` × top_k with the exact vectors read from disk (LanceDB's
refine step) — the cosine a hit reports is exact. ``flat`` scans every vector (exact; the default below
100,000 rows, as for the faiss index). The folder also holds ``index.json`` (backend, kind, size,
dimension, the model, the search settings); each row keeps its number (a hit's ``id``: its line in the
corpus it was built from; rows an update adds are numbered after the last), the id its input gave (a hit's
``key``) and its text.

An index of documents changes without a rebuild (``sentcl index --update``, :meth:`LanceIndex.updated`):
each row keeps its content hash and index.json the encoder's settings, so only new and changed documents are
encoded; LanceDB deletes and appends them. Every LanceDB write is a new version of the table, and index.json
names the version the index is (``version``; :meth:`LanceIndex.load` checks it out): an update writes its
versions, then replaces index.json in one rename, so a reader, or an update killed at any instant, sees the
previous index or the new one; the next update starts again from the version index.json names. Versions
older than a week are removed after an update (a reader that holds one longer reads the index again).

Build from vectors in batches (:meth:`LanceIndex.build`), from a corpus and an :class:`Embedder`, or from
the Parquet shards ``sentcl encode --engine ray`` writes (:meth:`LanceIndex.from_shards`: shard by shard,
never all of them in memory).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from sentcl.arrow_columns import column_matrix, vector_column
from sentcl.atomic_write import atomic_file, atomic_folder
from sentcl.config import ConfigError
from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, require_finite
from sentcl.extras import require
from sentcl.search.index import FLAT_LIMIT, DocumentRows, Hit, IndexFolderError, Update

logger = logging.getLogger(__name__)

KINDS = ("auto", "flat", "ivf_pq")
TABLE = "corpus"
#: rows per batch when vectors stream into the table
BATCH_ROWS = 65_536

#: versions of the table kept after an update (a reader that checked out an older one reads index.json again)
KEEP_VERSIONS = timedelta(days=7)
#: no version removed while an update writes (the one index.json names must stay until the next is named)
KEEP_ALL = timedelta(days=365_000)


class Batch(NamedTuple):
    """Rows for the table: ids, texts, vectors [n, D], and for documents each row's kept fields (when the
    index keeps fields) and content hash (when the index can be updated)."""

    ids: Sequence[str]
    texts: Sequence[str]
    vectors: np.ndarray
    kept: Sequence[dict] | None = None
    hashes: Sequence[str] | None = None


def _lancedb():
    return require("lancedb", "lance", "a lance index")


def _pyarrow():
    return require("pyarrow", "lance", "a lance index")


def default_partitions(rows: int) -> int:
    """IVF cells: about √rows (LanceDB's guidance), at least 1, at most rows / 256 (each cell trains on
    enough vectors)."""
    return max(1, min(int(math.sqrt(rows)), rows // 256 or 1))


def check_sub_vectors(sub_vectors: int | None, dimension: int) -> None:
    """One ConfigError naming ``--sub-vectors`` when it does not divide the vectors' dimension (PQ codes
    split a vector into equal parts)."""
    if sub_vectors and dimension % sub_vectors:
        raise ConfigError(
            f"--sub-vectors {sub_vectors}: does not divide the dimension {dimension} (PQ splits a vector "
            f"into equal parts; e.g. {default_sub_vectors(dimension)})"
        )


def default_sub_vectors(dimension: int) -> int:
    """PQ codes: one per 8 dimensions where that divides the dimension (384 → 48), else the largest divisor
    of the dimension not above dimension / 8."""
    target = max(1, dimension // 8)
    return next(n for n in range(target, 0, -1) if dimension % n == 0)


class LanceIndex:
    backend = "lance"

    def __init__(self, folder: Path, table: Any, meta: dict):
        self.folder, self.table, self.meta = folder, table, meta
        self.kind, self.model = meta["kind"], meta.get("model")
        self.dimension, self.size = int(meta["dimension"]), int(meta["size"])
        self.nprobes, self.refine_factor = int(meta["nprobes"]), int(meta["refine_factor"])

    # ------------------------------------------------------------------------------------------ build
    @classmethod
    def build(
        cls, folder: str | Path, batches: Iterable[Batch], model: str | None = None, kind: str = "auto",
        partitions: int | None = None, sub_vectors: int | None = None, nprobes: int = 20,
        refine_factor: int = 10, overwrite: bool = False, documents: dict | None = None, keys: str = "ids",
        settings: dict | None = None,
    ) -> LanceIndex:  # fmt: skip
        """Stream ``batches`` into a new index folder (written whole or not at all); ``documents`` says how a
        corpus of documents was read (index.json records it), and with kept fields each row keeps them as a
        JSON column that results carry, with hashes its content hash. ``keys``: "ids" where a row's key is the
        user's (documents, shards), "rows" where it is only its line. ``settings``: how the vectors were
        encoded (an update is refused under others)."""
        if kind not in KINDS:
            raise ValueError(f"index kind {kind!r} is not one of {', '.join(KINDS)}")
        pa = _pyarrow()
        lancedb = _lancedb()
        folder = Path(folder)
        with atomic_folder(folder, "index", overwrite) as tmp:
            first, rest = _peek(batches)
            dimension = first[2].shape[1]
            columns = [
                ("row", pa.int64()), ("key", pa.string()), ("text", pa.string()),
                ("vector", pa.list_(pa.float32(), dimension)),
            ]  # fmt: skip
            kept = bool(documents and documents.get("keep"))
            hashed = first.hashes is not None
            schema = pa.schema(
                columns
                + ([("fields", pa.string())] if kept else [])
                + ([("hash", pa.string())] if hashed else [])
            )
            counter = {"rows": 0}
            records = _records(pa, schema, chain([first], rest), dimension, counter)
            table = lancedb.connect(str(tmp / "lance")).create_table(TABLE, data=records, schema=schema)
            size = counter["rows"]
            if kind == "auto":
                kind = "flat" if size < FLAT_LIMIT else "ivf_pq"
                if kind == "flat" and (partitions or sub_vectors):
                    logger.warning(
                        "%s: %d rows make a flat index (ivf_pq from %d); --partitions and --sub-vectors are "
                        "not used", folder, size, FLAT_LIMIT,
                    )  # fmt: skip
            meta: dict[str, Any] = {
                "backend": "lance", "kind": kind, "size": size, "dimension": dimension, "model": model,
                "nprobes": nprobes, "refine_factor": refine_factor,
            }  # fmt: skip
            if documents is not None:
                meta["documents"] = documents
            if settings is not None:
                meta["encoder"] = settings
            meta["keys"] = keys
            if kind == "ivf_pq":
                meta["partitions"] = partitions or default_partitions(size)
                meta["sub_vectors"] = sub_vectors or default_sub_vectors(dimension)
                check_sub_vectors(meta["sub_vectors"], dimension)
                config = require("lancedb.index", "lance", "a lance index").IvfPq(
                    distance_type="cosine",
                    num_partitions=meta["partitions"],
                    num_sub_vectors=meta["sub_vectors"],
                )
                table.create_index("vector", config=config)
            meta["version"], meta["next_row"] = table.version, size
            (tmp / "index.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return cls.load(folder)

    @classmethod
    def of_corpus(
        cls, folder: str | Path, embedder: Embedder, corpus: Sequence[str], model: str | None = None,
        batch_rows: int = BATCH_ROWS, ids: Sequence[str] | None = None, kept: Sequence[dict] | None = None,
        hashes: Sequence[str] | None = None, **options: Any,
    ) -> LanceIndex:  # fmt: skip
        """Embed ``corpus`` (its document prompt) in batches of ``batch_rows`` and index it; a row's key is
        its id in ``ids`` (the user's documents) or its line, ``kept`` its fields for results and ``hashes``
        its content hash (for updates)."""
        corpus = list(corpus)
        if not corpus:
            raise ValueError("cannot index an empty corpus")
        keys = [str(i) for i in ids] if ids is not None else [str(i) for i in range(len(corpus))]
        encoder = for_role(embedder, DOCUMENT)

        def batches() -> Iterator[Batch]:
            for start in range(0, len(corpus), batch_rows):
                stop = start + batch_rows
                texts = corpus[start:stop]
                vectors = require_finite(np.asarray(encoder.encode(texts), dtype=np.float32), texts, model)
                yield Batch(
                    keys[start:stop],
                    texts,
                    vectors,
                    None if kept is None else list(kept[start:stop]),
                    None if hashes is None else list(hashes[start:stop]),
                )

        return cls.build(folder, batches(), model=model, keys="ids" if ids is not None else "rows", **options)

    @classmethod
    def from_shards(cls, shards: str | Path, folder: str | Path, **options: Any) -> LanceIndex:
        """The Parquet shards of ``sentcl encode --engine ray`` (``shards``/part-*.parquet, with its
        encode.json), read a batch at a time; the model recorded there is the index's."""
        parquet = require("pyarrow.parquet", "lance", "a lance index")
        shards = Path(shards)
        files = sorted(shards.glob("part-*.parquet"))
        if not files:
            raise IndexFolderError(
                f"{shards}: no part-*.parquet shards (written by sentcl encode --engine ray)"
            )
        try:
            manifest = json.loads((shards / "encode.json").read_text(encoding="utf-8"))
            settings, planned = manifest["settings"], len(manifest["shards"])
        except (OSError, ValueError, KeyError, TypeError):
            raise IndexFolderError(
                f"{shards}/encode.json: missing or unreadable; not a folder sentcl encode --engine ray wrote"
            ) from None
        if settings.get("precision", "float32") != "float32":
            raise IndexFolderError(
                f"{shards}: the shards hold {settings['precision']} codes; a lance index is built from "
                "float32 vectors (encode again without --precision)"
            )
        if len(files) != planned:
            raise IndexFolderError(
                f"{shards}: {len(files)} of its {planned} shards are written; finish the encode (run it "
                "again) before indexing"
            )

        def batches() -> Iterator[Batch]:
            for path in files:
                for batch in parquet.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
                    vectors = column_matrix(batch.column("vector"))
                    yield Batch(batch.column("id").to_pylist(), batch.column("text").to_pylist(), vectors)

        options.setdefault("model", settings.get("model"))
        return cls.build(folder, batches(), **options)

    # ------------------------------------------------------------------------------------------- load
    @classmethod
    def load(cls, folder: str | Path) -> LanceIndex:
        folder = Path(folder)
        meta_path = folder / "index.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            size, dimension = int(meta["size"]), int(meta["dimension"])
        except (OSError, ValueError, KeyError, TypeError):
            raise IndexFolderError(f"{meta_path}: missing or unreadable; not a sentcl lance index") from None
        try:
            table = _lancedb().connect(str(folder / "lance")).open_table(TABLE)
            if "version" in meta:  # the version this index is (an update writes later ones before naming one)
                table.checkout(int(meta["version"]))
            rows = table.count_rows()
            width = table.schema.field("vector").type.list_size
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise IndexFolderError(
                f"{folder / 'lance'}: not the table index.json describes ({exc})"
            ) from None
        if rows != size or width != dimension:
            raise IndexFolderError(
                f"{folder}: index.json says {size} × {dimension}, the table holds {rows} × {width}; build it "
                "again"
            )
        return cls(folder, table, meta)

    # ----------------------------------------------------------------------------------------- search
    @property
    def has_ids(self) -> bool:
        """Whether a row's key is the user's id (documents, shards) rather than its line."""
        return self.meta.get("keys", "ids") != "rows"

    def __len__(self) -> int:
        return self.size

    def check_dimension(self, dimension: int, model: str, where: str = "the index") -> None:
        if dimension != self.dimension:
            built = self.model or "an unrecorded model"
            raise IndexFolderError(
                f"{where} holds {self.dimension}-dim vectors (built with {built}), but {model} gives "
                f"{dimension}-dim ones"
            )

    def search(
        self, query_embeddings: np.ndarray, top_k: int = 5, threshold: float | None = None
    ) -> list[list[Hit]]:
        """For each query the ``top_k`` nearest rows by cosine (IVF-PQ candidates rescored exactly)."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        queries = np.atleast_2d(np.asarray(query_embeddings, dtype=np.float32))
        self.check_dimension(queries.shape[1], "the query embedding")
        results = []
        for query in queries:
            search = self.table.search(query, vector_column_name="vector").distance_type("cosine")
            if self.kind == "ivf_pq":
                search = search.nprobes(self.nprobes).refine_factor(self.refine_factor)
            else:
                search = search.bypass_vector_index()
            kept = bool((self.meta.get("documents") or {}).get("keep"))
            columns = ["row", "key", "text"] + (["fields"] if kept else [])
            found = search.select(columns).limit(min(top_k, self.size)).to_arrow()
            fields = (
                [json.loads(f) for f in found.column("fields").to_pylist()] if kept else [None] * len(found)
            )
            hits = [
                Hit(text, 1.0 - float(distance), int(row), key, kept_fields)
                for row, key, text, distance, kept_fields in zip(
                    *(found.column(c).to_pylist() for c in ("row", "key", "text", "_distance")), fields,
                    strict=True,
                )
            ]  # fmt: skip
            results.append([h for h in hits if threshold is None or h.score >= threshold])
        return results

    def query(
        self, embedder: Embedder, queries: str | Sequence[str], top_k: int = 5, threshold: float | None = None
    ) -> list[list[Hit]]:
        queries = [queries] if isinstance(queries, str) else list(queries)
        vectors = np.asarray(for_role(embedder, QUERY).encode(queries))
        return self.search(vectors, top_k=top_k, threshold=threshold)

    # ----------------------------------------------------------------------------------------- update
    @property
    def settings(self) -> dict | None:
        """How the vectors were encoded (the model, a digest of its weights, pooler, length, prompt and
        precision); None for an index built without the record."""
        return self.meta.get("encoder")

    def stored_documents(self) -> DocumentRows | None:
        """The rows' ids and content hashes (read without the vectors) and how the documents were read; None
        for an index of sentences or one built without hashes (it cannot be updated)."""
        if "documents" not in self.meta or "hash" not in self.table.schema.names:
            return None
        found = self.table.search().select(["key", "hash"]).limit(None).to_arrow()
        return DocumentRows(
            found.column("key").to_pylist(), None, self.meta["documents"], found.column("hash").to_pylist()
        )

    def updated(self, before: DocumentRows, update: Update, now: Batch) -> LanceIndex:
        """This index with the rows of ``before`` (:meth:`stored_documents`) the ``update`` removes or changes
        deleted and the new and changed rows of ``now`` (the corpus as it is; its vectors for the rows
        ``update.encode`` only) appended, published as one change (the module docstring)."""
        assert now.hashes is not None
        fresh = update.encode
        stale = set(before.ids) - {now.ids[row] for row, old in enumerate(update.reuse) if old is not None}
        if not stale and not fresh:
            return self  # nothing to change: nothing written
        table = _lancedb().connect(str(self.folder / "lance")).open_table(TABLE)
        if table.version != int(self.meta["version"]):  # an update stopped before it was named: start again
            table.restore(int(self.meta["version"]))
        if stale:
            table.delete(f"key IN ({', '.join(_sql_string(key) for key in sorted(stale))})")
        start = int(self.meta.get("next_row", self.size))
        if fresh:
            pa = _pyarrow()
            batch = Batch(
                [now.ids[r] for r in fresh], [now.texts[r] for r in fresh], now.vectors,
                None if now.kept is None else [now.kept[r] for r in fresh], [now.hashes[r] for r in fresh],
            )  # fmt: skip
            table.add(pa.Table.from_batches(_records(pa, table.schema, iter([batch]), self.dimension,
                                                     {"rows": start})))  # fmt: skip
        table.optimize(cleanup_older_than=KEEP_ALL)  # new rows into the IVF cells; small files merged
        meta = self.meta | {
            "size": table.count_rows(),
            "version": table.version,
            "next_row": start + len(fresh),
        }
        with atomic_file(self.folder / "index.json") as handle:
            handle.write(json.dumps(meta, indent=2) + "\n")
        table.optimize(cleanup_older_than=KEEP_VERSIONS)
        return LanceIndex.load(self.folder)

    def hybrid_search(self, query_embeddings, queries, top_k: int = 5, depth: int = 100) -> list[list[Hit]]:
        raise IndexFolderError(
            f"{self.folder}: hybrid search (BM25 over the texts) needs the in-memory index (sentcl index "
            "without --backend lance)"
        )


def _peek(batches: Iterable[Batch]) -> tuple[Batch, Iterator[Batch]]:
    iterator = iter(batches)
    for first in iterator:
        if len(first[0]):
            return first, iterator
    raise ValueError("cannot index an empty corpus")


def _sql_string(value: str) -> str:
    """``value`` as a SQL string literal (LanceDB's filters)."""
    return "'" + value.replace("'", "''") + "'"


def _records(pa, schema, batches: Iterator[Batch], dimension: int, counter: dict) -> Iterator[Any]:
    """Record batches for the table: each row's number, key, text and L2-normalised vector (and its kept
    fields and content hash where the schema has them)."""
    for ids, texts, vectors, kept, hashes in batches:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != dimension:
            raise IndexFolderError(
                f"a batch of {vectors.shape[-1]}-dim vectors in an index of {dimension}-dim ones"
            )
        if not np.isfinite(vectors).all():
            raise IndexFolderError("a vector with NaN or infinity; the encoder's output is broken")
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        start = counter["rows"]
        counter["rows"] += len(ids)
        yield pa.record_batch(
            [
                pa.array(np.arange(start, start + len(ids), dtype=np.int64)),
                pa.array([str(i) for i in ids], pa.string()),
                pa.array(list(texts), pa.string()),
                vector_column(vectors, "lance", "a lance index"),
                *(
                    [pa.array([json.dumps(f, ensure_ascii=False) for f in kept or ()], pa.string())]
                    if "fields" in schema.names
                    else []
                ),
                *([pa.array(list(hashes or ()), pa.string())] if "hash" in schema.names else []),
            ],
            schema=schema,
        )
