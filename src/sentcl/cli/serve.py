"""``sentcl serve``: the HTTP API (OpenAI-compatible embeddings, similarity, search) and the search page."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from sentcl.cli.common import PICKLES, add_dtype_arguments, inference_encoder, positive_int
from sentcl.cli.index import check_same_settings, encoder_settings
from sentcl.config import ConfigError
from sentcl.embedder import Batched
from sentcl.extras import require
from sentcl.model import pooler_argument
from sentcl.search import SentenceIndex, load_index

NAMES = ("serve",)
logger = logging.getLogger("sentcl.serve")


def add_parser(commands) -> None:
    p = commands.add_parser(
        "serve", parents=[PICKLES], help="HTTP API (OpenAI-compatible embeddings, similarity, search) + page"
    )
    p.add_argument("model")
    p.add_argument("--index", help="folder written by sentcl index: enables /search and the page")
    p.add_argument(
        "--writable", action="store_true",
        help="POST /documents and DELETE /documents/{id} change the index (an index of documents, faiss) and "
        "its folder, encoded with the model and settings it was built with (refused otherwise)",
    )  # fmt: skip
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--allowed-hosts",
        help="comma-separated Host names the server answers (default: the bound host's: localhost, 127.0.0.1 "
        "and ::1 for a loopback bind); '*' answers any (a page on another site can then read the API)",
    )
    p.add_argument("--max-inputs", type=positive_int, default=256, help="texts per request")
    p.add_argument("--max-chars", type=positive_int, default=8192, help="characters per text")
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=8192,
        help="tokens the model reads per request (all its texts)",
    )
    p.add_argument(
        "--max-request-chars",
        type=positive_int,
        help="characters of all a request's texts (default: 16 per token of --max-tokens)",
    )
    p.add_argument(
        "--max-waiting", type=positive_int, default=16, help="requests queued for the model; beyond: 503"
    )
    p.add_argument(
        "--max-connections", type=positive_int, default=1024, help="open connections (the idlest go first)"
    )
    p.add_argument("--batch-size", type=positive_int, default=64)
    add_dtype_arguments(p, default="auto", dim=False)


def writable_index(args: argparse.Namespace, index) -> SentenceIndex:
    """``--writable`` needs an index of documents that records its content hashes and model settings; its
    precision is the one the server encodes in unless ``--dtype`` says otherwise."""
    if index is None:
        raise ConfigError("--writable: for an index (--index DIR) of documents")
    if not isinstance(index, SentenceIndex) or index.documents is None or index.settings is None:
        raise ConfigError(
            f"--writable: {args.index} is not a faiss index of documents with its model's settings (build it "
            f"with sentcl index from a BEIR folder, JSON lines or Parquet)"
        )
    if index.passages is not None:
        raise ConfigError(
            f"--writable: {args.index} is an index of passages (sentcl index --passages), built again rather "
            "than changed; serve it read-only"
        )
    if args.dtype == "auto":
        args.dtype = index.settings.get("precision", "auto")
    return index


def run_command(args: argparse.Namespace) -> int:
    for module in ("fastapi", "uvicorn", "pydantic"):  # the web stack is the serve extra
        require(module, "serve", "sentcl serve")
    from sentcl.serving.documents import DocumentWriter
    from sentcl.serving.server import ServerLimits, create_app, default_allowed_hosts, serve, token_counter

    index = load_index(args.index) if args.index else None
    writable = writable_index(args, index) if args.writable else None
    encoder = inference_encoder(args)
    writer = None
    if writable is not None and writable.documents is not None and writable.settings is not None:
        writer = DocumentWriter(Path(args.index), tuple(writable.documents.fields.get("keep") or ()))
        check_same_settings(
            writable.settings, encoder_settings(encoder), f"--writable: {args.index}",
            "serve it with the model and settings that built it",
        )  # fmt: skip
    if index is not None and index.model and index.model != encoder.source:
        logger.warning(
            "%s was built with %s, not %s: its scores may mean little",
            args.index,
            index.model,
            encoder.source,
        )
    if index is not None:
        index.check_dimension(encoder.dimension, encoder.source, args.index)
    if args.allowed_hosts:
        hosts = [h.strip() for h in args.allowed_hosts.split(",") if h.strip()]
    else:
        hosts = default_allowed_hosts(args.host)
    if "*" in hosts:
        logger.warning(
            "any Host header is answered: a web page on another site can read this API by DNS rebinding; "
            "pass --allowed-hosts with the names clients use"
        )
    limits = ServerLimits(
        max_inputs=args.max_inputs, max_chars=args.max_chars, max_tokens=args.max_tokens,
        max_request_chars=args.max_request_chars, max_waiting=args.max_waiting,
        max_connections=args.max_connections,
    )  # fmt: skip
    app = create_app(
        Batched(encoder, args.batch_size, show_progress=False),
        model_name=args.model,
        dimension=encoder.dimension,
        index=index,
        limits=limits,
        count_tokens=token_counter(encoder.tokenizer, encoder.max_length),
        allowed_hosts=hosts,
        writer=writer,
    )
    serve(app, host=args.host, port=args.port, quiet=args.quiet, limits=limits)
    return 0
