"""``sentcl index``: a faiss index of a corpus (one sentence per line) in memory, saved with its texts; or
with ``--backend lance`` a LanceDB index on disk (IVF-PQ, larger than memory), also from the Parquet shards
``sentcl encode --engine ray`` writes (``--shards``)."""

from __future__ import annotations

import argparse
from pathlib import Path

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
from sentcl.embedder import Batched
from sentcl.extras import require
from sentcl.model import pooler_argument
from sentcl.search import LanceIndex, SentenceIndex
from sentcl.search.lance_index import check_sub_vectors

NAMES = ("index",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "index", parents=[PICKLES], help="build a faiss index of a corpus (one sentence per line)"
    )
    p.add_argument("model", nargs="?", help="(not with --shards: their encode.json names it)")
    p.add_argument("corpus", nargs="?")
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
    add_overwrite_argument(p, "--out")
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--batch-size", type=positive_int, default=128)
    add_dtype_arguments(p, default="auto", dim=False)


def run_command(args: argparse.Namespace) -> int:
    check_replaceable(args.out, "index", args.overwrite, "--out")
    if args.backend == "lance":
        return run_lance(args)
    if args.shards or args.kind == "ivf_pq":
        raise ConfigError(f"{'--shards' if args.shards else '--kind ivf_pq'}: for --backend lance")
    if not (args.model and args.corpus):
        raise ConfigError("MODEL and CORPUS are needed (or --backend lance --shards FOLDER)")
    sentences = corpus_sentences(args.corpus)
    encoder = inference_encoder(args, texts=len(sentences))
    index = SentenceIndex.of_corpus(
        Batched(encoder, args.batch_size, show_progress=True), sentences, kind=args.kind, model=encoder.source
    )
    index.rescore_multiplier = args.rescore
    index.save(args.out, overwrite=args.overwrite)
    print(f"{args.out}: {len(index)} sentences, {index.kind} index, model {index.model}")
    return 0


#: corpora of documents (ids and fields) that a one-sentence-per-line reader would take line by line
DOCUMENT_SUFFIXES = (".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz")


def corpus_sentences(path: str) -> list[str]:
    """The sentences of a one-per-line corpus; a folder (a BEIR collection), JSON lines or Parquet is refused
    in one line: each raw JSON line, braces and keys included, would be indexed as a text."""
    name = path.lower()
    if Path(path).is_dir() or name.endswith(DOCUMENT_SUFFIXES):
        raise ConfigError(
            f"CORPUS {path}: sentcl index reads one sentence per line (a .txt file); documents with ids "
            f"and fields (a BEIR folder, JSON lines, Parquet) are not read as documents by it — write their "
            f"texts one per line (e.g. jq -r '.title + \" \" + .text' corpus.jsonl > corpus.txt)"
        )
    return [row[0] for row in read_sentences(path).rows]


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
    if args.shards:
        if args.corpus or args.model:
            raise ConfigError("--shards: the shards hold the vectors; give no MODEL or CORPUS")
        index = LanceIndex.from_shards(args.shards, args.out, **options)
    else:
        if not (args.model and args.corpus):
            raise ConfigError("MODEL and CORPUS are needed (or --shards FOLDER)")
        sentences = corpus_sentences(args.corpus)
        # --sub-vectors checked against the model's dimension before any text is encoded
        encoder = inference_encoder(
            args, lambda model: check_sub_vectors(args.sub_vectors, model.dimension), len(sentences)
        )
        embedder = Batched(encoder, args.batch_size, show_progress=True)
        index = LanceIndex.of_corpus(args.out, embedder, sentences, model=encoder.source, **options)
    print(f"{args.out}: {len(index)} rows, lance {index.kind} index, model {index.model}")
    return 0
