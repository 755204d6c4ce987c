"""``sentcl index``: a faiss index of a corpus in memory, saved with its texts; or with ``--backend lance``
a LanceDB index on disk (IVF-PQ, larger than memory), also from the Parquet shards ``sentcl encode --engine
ray`` writes (``--shards``). A corpus is a text file (one sentence a line, known by its line) or documents
with ids and fields (a BEIR folder, JSON lines, Parquet: sentcl/data/documents.py), whose results carry their
ids. ``--update`` brings an index of documents up to date with its corpus as it is now: only the new and
the changed documents are encoded (a content hash per document), removed ones leave it, with the model and
settings it was built with (refused otherwise): a faiss index's folder is replaced atomically, a lance index
deletes and appends rows in new table versions that its index.json then names."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from sentcl.atomic_write import check_replaceable
from sentcl.cli.common import (
    PICKLES,
    add_dtype_arguments,
    add_overwrite_argument,
    inference_encoder,
    positive_int,
)
from sentcl.config import ConfigError
from sentcl.data import read_sentences
from sentcl.data.documents import DocumentFields, Documents, is_document_corpus, read_documents
from sentcl.embedder import DOCUMENT, Batched, for_role
from sentcl.extras import require
from sentcl.model import pooler_argument
from sentcl.model.int8_gate import model_key
from sentcl.passages import model_window, split_passages
from sentcl.search import LanceIndex, SentenceIndex, load_index
from sentcl.search.index import (
    DocumentRows,
    IndexFolderError,
    PassageRows,
    content_hash,
    embed_documents,
    plan_update,
)
from sentcl.search.lance_index import Batch, check_sub_vectors

NAMES = ("index",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "index", parents=[PICKLES], help="build an index of a corpus (sentences, or documents with ids)"
    )
    p.add_argument("model", nargs="?", help="(not with --shards: their encode.json names it)")
    p.add_argument(
        "corpus", nargs="?",
        help="a text file (one sentence a line), or documents: a BEIR folder, JSON lines or Parquet",
    )  # fmt: skip
    docs = p.add_argument_group(
        "documents (a BEIR folder, .jsonl, .parquet): what a row's id, text and results are"
    )
    docs.add_argument("--id-field", help="the id's field (default _id where the corpus has it, else id)")
    docs.add_argument(
        "--text-field", action="append", metavar="FIELD",
        help="a field of the text encoded, repeatable or comma-separated, joined by a space in order "
        "(default: title and text, as BEIR)",
    )  # fmt: skip
    docs.add_argument(
        "--field", action="append", metavar="FIELD",
        help="a field kept with each document and returned with its results (repeatable or comma-separated)",
    )  # fmt: skip
    p.add_argument("--out", required=True, help="index folder")
    p.add_argument(
        "--kind", default="auto", choices=["auto", "flat", "ivf", "binary", "ivf_pq"],
        help="flat: exact; ivf: approximate (auto from 100k sentences); binary: 1 bit per dimension in "
        "memory, rescored with int8 codes (docs/serving.md); lance: flat or ivf_pq (auto from 100k)",
    )  # fmt: skip
    lance = p.add_argument_group("--backend lance: on disk, larger than memory (pip install 'sentcl[lance]')")
    lance.add_argument("--backend", choices=["faiss", "lance"], default="faiss", help="(default faiss)")
    lance.add_argument("--shards", help="a folder sentcl encode --engine ray wrote (instead of MODEL CORPUS)")
    lance.add_argument("--partitions", type=positive_int, help="IVF cells (default about √rows)")
    lance.add_argument("--sub-vectors", type=positive_int, help="PQ codes per vector (default dimension / 8)")
    lance.add_argument("--nprobes", type=positive_int, default=20, help="cells a query visits (default 20)")
    lance.add_argument(
        "--refine-factor", type=positive_int, default=10,
        help="rescore the best N × top-k candidates with the exact vectors (default 10)",
    )  # fmt: skip
    p.add_argument(
        "--rescore", type=positive_int, default=4, metavar="M",
        help="binary: rescore the M × top-k nearest by Hamming distance (default 4)",
    )  # fmt: skip
    p.add_argument(
        "--update", action="store_true",
        help="--out is an index of documents: bring it up to date with CORPUS, encoding only the documents "
        "that are new or changed, dropping those no longer there (same model and settings, or refused)",
    )  # fmt: skip
    p.add_argument(
        "--passages", action="store_true",
        help="a document longer than the model reads is split into overlapping token windows (its title "
        "before each), one vector each; a document scores its best passage and a hit shows that passage",
    )  # fmt: skip
    p.add_argument(
        "--passage-overlap", type=int, metavar="N",
        help="with --passages: tokens neighbouring windows share (default: an eighth of the window)",
    )  # fmt: skip
    add_overwrite_argument(p, "--out")
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--batch-size", type=positive_int, default=128)
    add_dtype_arguments(p, default="auto", dim=False)


def run_command(args: argparse.Namespace) -> int:
    check_replaceable(args.out, "index", args.overwrite, "--out")
    check_passage_options(args)
    if args.update:
        return run_update(args)
    if args.backend == "lance":
        return run_lance(args)
    if args.shards or args.kind == "ivf_pq":
        raise ConfigError(f"{'--shards' if args.shards else '--kind ivf_pq'}: for --backend lance")
    if not (args.model and args.corpus):
        raise ConfigError("MODEL and CORPUS are needed (or --backend lance --shards FOLDER)")
    texts, documents = corpus_rows(args)
    encoder = inference_encoder(args, texts=len(texts))
    rows = None if documents is None else document_rows(documents)
    embedder = Batched(encoder, args.batch_size, show_progress=True)
    settings = encoder_settings(encoder)
    if args.passages:
        passages = cut_passages(args, embedder, texts, documents)
        vectors = embed_documents(embedder, passages.texts, encoder.source)
        index = SentenceIndex.build(
            vectors,
            texts,
            args.kind,
            model=encoder.source,
            documents=rows,
            settings=settings,
            passages=passages,
        )
    else:
        index = SentenceIndex.of_corpus(
            embedder, texts, kind=args.kind, model=encoder.source, documents=rows, settings=settings
        )
    index.rescore_multiplier = args.rescore
    index.save(args.out, overwrite=args.overwrite)
    cut = "" if index.passages is None else f" as {len(index.passages.texts):,} passages"
    print(f"{args.out}: {len(index)} {what(documents)}{cut}, {index.kind} index, model {index.model}")
    return 0


def check_passage_options(args: argparse.Namespace) -> None:
    """``--passages`` for a faiss index built (not updated); ``--passage-overlap`` only with it."""
    if args.passage_overlap is not None and not args.passages:
        raise ConfigError("--passage-overlap: for --passages (documents are not split without it)")
    if args.passage_overlap is not None and args.passage_overlap < 0:
        raise ConfigError(f"--passage-overlap {args.passage_overlap}: tokens shared, 0 or more")
    if args.passages and (args.backend != "faiss" or args.update):
        raise ConfigError(
            "--passages: for a faiss index built from its corpus (not --backend lance, not --update: an "
            "index of passages is built again when its documents change)"
        )


def cut_passages(
    args: argparse.Namespace, embedder: Batched, texts: list[str], documents: Documents | None
) -> PassageRows:
    """Every document as passages of the model's length (sentcl/passages.py): a BEIR-style title (the first
    of several text fields) before each window of the rest; a text file's lines have no title."""
    tokenizer, length = model_window(embedder)
    titles = [""] * len(texts) if documents is None else documents.titles
    bodies = texts if documents is None else [documents.body(row) for row in range(len(texts))]
    prompt = getattr(for_role(embedder, DOCUMENT), "prompt", "")
    split = split_passages(titles, bodies, tokenizer, length, args.passage_overlap, prompt)
    settings = {"score": "max", "overlap": args.passage_overlap, "length": length}
    return PassageRows(split.texts, split.starts, settings | {"split": split.split_documents})


def document_rows(documents: Documents) -> DocumentRows:
    """The documents as an index keeps them: ids, kept fields, how they were read, content hashes."""
    kept_fields = kept(documents)
    hashes = [
        content_hash(text, None if kept_fields is None else kept_fields[row])
        for row, text in enumerate(documents.texts)
    ]
    return DocumentRows(documents.ids, kept_fields, documents.fields, hashes)


def encoder_settings(encoder: Any) -> dict[str, Any]:
    """What the vectors of an index depend on besides the text: the model (and a digest of its weights,
    pooling and length), its pooler, length, document prompt, dimension and precision."""
    precision = getattr(encoder, "precision", None) or (
        "bf16" if getattr(encoder, "inference_autocast", None) is not None else "fp32"
    )
    try:
        weights = model_key(encoder, False, precision)
    except (AttributeError, TypeError):  # an ONNX export: its file is the model
        weights = None
    return {
        "model": encoder.source,
        "weights": weights,
        "pooler": getattr(encoder, "pooler", None),
        "max_length": getattr(encoder, "max_length", None),
        "document_prompt": (getattr(encoder, "prompts", None) or {}).get("document", ""),
        "dimension": encoder.dimension,
        "precision": precision,
    }


def check_same_settings(built: dict[str, Any], now: dict[str, Any], where: str, advice: str) -> None:
    """One ConfigError naming the first setting in which ``now`` (the encoder at hand) differs from ``built``
    (what an index records)."""
    for key, value in now.items():
        if value != built.get(key):
            raise ConfigError(
                f"{where} was built with {key} {built.get(key)!r}, this run encodes with {value!r}; {advice}"
            )


def updatable(args: argparse.Namespace) -> tuple[SentenceIndex | LanceIndex, DocumentRows]:
    """The index at ``--out`` (either backend) and its documents, with the options an update cannot change
    refused in one line."""
    if args.shards:
        raise ConfigError("--shards: an update reads MODEL and CORPUS (the corpus as it is now)")
    if not (args.model and args.corpus):
        raise ConfigError("--update: MODEL and CORPUS are needed (the corpus as it is now)")
    if not Path(args.out, "index.json").is_file():
        raise ConfigError(f"--update: {args.out} is no index folder; build it first (without --update)")
    old = load_index(args.out)
    if args.backend != "faiss" and old.backend != args.backend:
        raise ConfigError(
            f"--backend {args.backend}: {args.out} is a faiss index; an update keeps its backend"
        )
    cells = [f for f, v in (("--partitions", args.partitions), ("--sub-vectors", args.sub_vectors)) if v]
    if cells:
        raise ConfigError(f"{cells[0]}: an update keeps the index's cells and codes")
    if isinstance(old, SentenceIndex) and old.passages is not None:
        raise ConfigError(f"--update: {args.out} is an index of passages; build it again (without --update)")
    before = old.documents if isinstance(old, SentenceIndex) else old.stored_documents()
    if before is None or before.hashes is None or old.settings is None:
        raise IndexFolderError(
            f"--update: {args.out} is an index of {'sentences' if before is None else 'documents'} "
            f"without content hashes or the model's settings; build it again (without --update)"
        )
    if args.kind not in ("auto", old.kind):
        raise ConfigError(f"--kind {args.kind}: {args.out} is a {old.kind} index; an update keeps its kind")
    return old, before


def run_update(args: argparse.Namespace) -> int:
    """``--update``: the index at ``--out`` brought up to date with CORPUS (module docstring)."""
    old, before = updatable(args)
    assert old.settings is not None
    texts, documents = corpus_rows(args)
    if documents is None:
        raise ConfigError(f"--update: {args.corpus} is a text file; {args.out} is an index of documents")
    if documents.fields != before.fields:
        raise ConfigError(
            f"--update: {args.out} read its documents with {before.fields}, this run with "
            f"{documents.fields}; the same --id-field, --text-field and --field, or build a new index"
        )
    rows = document_rows(documents)
    started = time.perf_counter()
    update = plan_update(before, rows.ids, rows.hashes or [])
    if args.dtype == "auto":  # the precision the index was built in, not a new decision for a few texts
        args.dtype = old.settings.get("precision", "auto")
    encoder = inference_encoder(args, texts=len(update.encode))
    check_same_settings(
        old.settings, encoder_settings(encoder), f"--update: {args.out}",
        "an index holds one model's vectors: build a new index beside it and swap (docs/serving.md)",
    )  # fmt: skip
    fresh = [texts[row] for row in update.encode]
    embedder = Batched(encoder, args.batch_size, show_progress=len(fresh) > 1000)
    empty = np.zeros((0, encoder.dimension), dtype=np.float32)
    vectors = embed_documents(embedder, fresh, encoder.source) if fresh else empty
    index: SentenceIndex | LanceIndex
    if isinstance(old, LanceIndex):
        index = old.updated(before, update, Batch(rows.ids, texts, vectors, rows.kept, rows.hashes))
    else:
        index = old.updated(update, texts, rows, vectors)
        index.save(args.out, overwrite=args.overwrite)
    print(
        f"{args.out}: {update.describe()}; {len(fresh):,} documents encoded, {len(index):,} in the "
        f"{index.kind} index ({time.perf_counter() - started:.1f} s)"
    )
    return 0


def _names(values: list[str] | None) -> tuple[str, ...]:
    return tuple(name.strip() for value in values or () for name in value.split(",") if name.strip())


def corpus_rows(args: argparse.Namespace) -> tuple[list[str], Documents | None]:
    """The texts to encode and, for a corpus of documents, the documents (ids, kept fields); the document
    options with a text file are refused in one line (they would be silently unused)."""
    if args.corpus.lower().endswith((".json", ".json.gz")):
        raise ConfigError(
            f"CORPUS {args.corpus}: a JSON file; sentcl index reads documents as JSON lines (.jsonl: one "
            f"object a line), a BEIR folder or Parquet, and sentences from a text file"
        )
    if is_document_corpus(args.corpus):
        fields = DocumentFields(args.id_field, _names(args.text_field), _names(args.field))
        documents = read_documents(args.corpus, fields)
        return documents.texts, documents
    named = [o for o, v in (("--id-field", args.id_field), ("--text-field", args.text_field),
                            ("--field", args.field)) if v]  # fmt: skip
    if named:
        raise ConfigError(
            f"{named[0]}: for a corpus of documents (a BEIR folder, .jsonl, .parquet); {args.corpus} is read "
            f"one sentence a line"
        )
    return [row[0] for row in read_sentences(args.corpus).rows], None


def kept(documents: Documents) -> list[dict] | None:
    return documents.kept if documents.fields.get("keep") else None


def what(documents: Documents | None) -> str:
    return "sentences" if documents is None else "documents"


def run_lance(args: argparse.Namespace) -> int:
    require("lancedb", "lance", "a lance index")  # before the corpus is encoded
    if args.kind not in ("auto", "flat", "ivf_pq"):
        raise ConfigError(f"--kind {args.kind}: a lance index is auto, flat or ivf_pq")
    cells = [f for f, v in (("--partitions", args.partitions), ("--sub-vectors", args.sub_vectors)) if v]
    if args.kind == "flat" and cells:
        raise ConfigError(f"{cells[0]}: for --kind ivf_pq; a flat index has no cells or codes")
    options = {
        "kind": args.kind, "partitions": args.partitions, "sub_vectors": args.sub_vectors,
        "nprobes": args.nprobes, "refine_factor": args.refine_factor, "overwrite": args.overwrite,
    }  # fmt: skip
    documents = None
    if args.shards:
        if args.corpus or args.model:
            raise ConfigError("--shards: the shards hold the vectors; give no MODEL or CORPUS")
        index = LanceIndex.from_shards(args.shards, args.out, **options)
    else:
        if not (args.model and args.corpus):
            raise ConfigError("MODEL and CORPUS are needed (or --shards FOLDER)")
        texts, documents = corpus_rows(args)
        # --sub-vectors checked against the model's dimension before any text is encoded
        encoder = inference_encoder(
            args, lambda model: check_sub_vectors(args.sub_vectors, model.dimension), len(texts)
        )
        embedder = Batched(encoder, args.batch_size, show_progress=True)
        if documents is not None:
            read = document_rows(documents)
            options |= {"ids": read.ids, "kept": read.kept, "documents": read.fields, "hashes": read.hashes}
        options["settings"] = encoder_settings(encoder)
        index = LanceIndex.of_corpus(args.out, embedder, texts, model=encoder.source, **options)
    rows = "rows" if args.shards else what(documents)
    print(f"{args.out}: {len(index)} {rows}, lance {index.kind} index, model {index.model}")
    return 0
