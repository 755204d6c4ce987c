"""HTTP API over one sentence encoder (and optionally one faiss index), plus the search page at ``/``.

Endpoints:

- ``POST /v1/embeddings``: OpenAI-compatible (``input`` is a string or a list of strings;
  ``encoding_format`` ``float`` or ``base64``; unit-length vectors, as OpenAI's are);
- ``POST /similarity``: cosine similarity of every text of ``a`` with every text of ``b``;
- ``POST /search``: nearest sentences of the index for one or several queries;
- ``GET /health``: model, dimension, index size, limits.

Every bad request gets a 4xx with one message in OpenAI's error shape
(``{"error": {"message", "type", "param"}}``), never a 500. The model is shared by the worker
threads behind one lock: two cores gain nothing from running two forward passes at once. So that no
request holds that lock for long, each has a budget of tokens (what the model reads, after truncation)
besides its text and character limits. The body limit is enforced while the body is read, with or
without a Content-Length (chunked uploads are cut at the limit, not read whole). Types are strict:
``"5"`` is not an integer and ``true`` is not a ``top_k``.
"""

from __future__ import annotations

import base64
import logging
import threading
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Annotated, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from sentcl.embedder import Embedder, EmbeddingError, require_finite, unit_rows
from sentcl.serving.index import SentenceIndex

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLimits:
    max_inputs: int = 256  # texts per request (a, b and queries each)
    max_chars: int = 8192  # characters per text
    max_top_k: int = 100
    max_body_bytes: int = 4 * 1024 * 1024
    #: tokens the model reads for one request (all its texts, after truncation): bounds how long one
    #: request holds the model (~1 s for 8,192 tokens of MiniLM on 2 cores)
    max_tokens: int = 8192


#: the names of the loopback interface a browser may use for a server bound there
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def default_allowed_hosts(host: str) -> list[str]:
    """The Host names a server bound to ``host`` answers: the loopback names for a loopback bind, the bound
    name for any other, every name (``*``) for a wildcard bind, which then needs ``--allowed-hosts``."""
    if host in ("0.0.0.0", "::", ""):
        return ["*"]
    if host in LOOPBACK_NAMES or host.startswith("127."):
        return sorted({*LOOPBACK_NAMES, host})
    return [host]


class AllowedHosts:
    """ASGI middleware: a request whose Host header (port aside) is not one the server is meant to answer
    gets 400 with one JSON message, before it reaches the API. Without it a web page an attacker serves can
    read this server's answers (the indexed corpus through /search) by DNS rebinding."""

    def __init__(self, app, hosts: Sequence[str]):
        self.app = app
        self.any = "*" in hosts
        self.hosts = {h.lower().strip("[]") for h in hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.any:
            return await self.app(scope, receive, send)
        raw = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1").strip().lower()
        name = (
            raw[1:].split("]", 1)[0]
            if raw.startswith("[")
            else raw.rsplit(":", 1)[0]
            if raw.count(":") == 1
            else raw
        )
        if name not in self.hosts:
            shown = raw[:100] or "(none)"
            return await _error(400, f"Host {shown!r} is not served here (sentcl serve --allowed-hosts)")(
                scope, receive, send
            )
        return await self.app(scope, receive, send)


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param}}, status_code=status)


Texts = str | list[str]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class EmbeddingsRequest(_Request):
    """OpenAI's embeddings request. Every field OpenAI defines is accepted (``user`` only identifies the
    caller); any other is refused, so a typo such as ``dimension`` is a 422, not a silent 384."""

    input: Texts | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class SimilarityRequest(_Request):
    a: Texts
    b: Texts


class SearchRequest(_Request):
    query: Texts
    top_k: Annotated[int, Field(ge=1)] = 5
    threshold: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None


def create_app(
    embedder: Embedder,
    *,
    model_name: str,
    dimension: int,
    index: SentenceIndex | None = None,
    limits: ServerLimits = ServerLimits(),
    count_tokens: Callable[[list[str]], int] | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
) -> FastAPI:
    """The ASGI app; ``embedder.encode(texts)`` gives the raw vectors (normalised here)."""
    # no /docs or /redoc: their pages load scripts from a CDN (the API's description is /openapi.json)
    app = FastAPI(
        title="sentcl", summary=f"sentence embeddings from {model_name}", version="1", docs_url=None,
        redoc_url=None,
    )  # fmt: skip
    lock = threading.Lock()

    def embed(texts: list[str], dimensions: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``; with ``dimensions``, of their first ``dimensions`` coordinates."""
        try:  # a vector of NaN is never served as [null, ...]
            with lock:
                vectors = np.asarray(embedder.encode(texts), dtype=np.float32)
            require_finite(vectors, texts, model_name)
        except EmbeddingError as exc:
            logger.error("%s", exc)
            raise APIError(500, "the model gave NaN or infinite values for this input") from None
        return unit_rows(vectors[:, :dimensions])

    def check_tokens(texts: list[str], param: str) -> int:
        tokens = count_tokens(texts) if count_tokens else 0
        if tokens > limits.max_tokens:
            raise APIError(
                413, f"'{param}' has {tokens} tokens; at most {limits.max_tokens} per request", param
            )
        return tokens

    def texts_of(value: Texts, param: str) -> list[str]:
        texts = [value] if isinstance(value, str) else list(value)
        if not texts:
            raise APIError(400, f"'{param}' is empty: give at least one text", param)
        if len(texts) > limits.max_inputs:
            raise APIError(
                400, f"'{param}' has {len(texts)} texts; at most {limits.max_inputs} per request", param
            )
        for i, text in enumerate(texts):
            where = param if isinstance(value, str) else f"{param}[{i}]"
            if not text.strip():
                raise APIError(400, f"'{where}' is an empty string", param)
            if len(text) > limits.max_chars:
                raise APIError(
                    400, f"'{where}' has {len(text)} characters; at most {limits.max_chars}", param
                )
            bad = next((c for c in text if _forbidden(c)), None)
            if bad is not None:
                raise APIError(400, f"'{where}' holds the invalid character U+{ord(bad):04X}", param)
        return texts

    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(AllowedHosts, hosts=allowed_hosts)  # the outermost: checked before anything else

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return _error(exc.status, exc.message, exc.param)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        if first.get("type") == "json_invalid":  # its loc is a character position, not a parameter
            return _error(422, f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}".strip())
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return _error(422, f"{where}: {first.get('msg', 'invalid')}", where)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.api_route("/health", methods=["GET", "HEAD"])
    def health() -> dict:
        return {
            "status": "ok",
            "model": model_name,
            "dimension": dimension,
            "index_size": None if index is None else len(index),
            "limits": asdict(limits),
        }

    @app.post("/v1/embeddings")
    def embeddings(body: EmbeddingsRequest) -> dict:
        if isinstance(body.input, list) and body.input and not isinstance(body.input[0], str):
            raise APIError(400, "token-id input is not supported: send text", "input")
        if body.dimensions is not None and not 0 < body.dimensions <= dimension:
            raise APIError(
                400, f"dimensions: 1 to {dimension} (this model's), not {body.dimensions}", "dimensions"
            )
        texts = texts_of(body.input, "input")
        tokens = check_tokens(texts, "input")
        vectors = embed(texts, body.dimensions)  # a prefix (Matryoshka), made unit length again
        data = [
            {"object": "embedding", "index": i, "embedding": _format(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        return {
            "object": "list",
            "data": data,
            "model": model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    @app.post("/similarity")
    def similarity(body: SimilarityRequest) -> dict:
        a, b = texts_of(body.a, "a"), texts_of(body.b, "b")
        check_tokens(a + b, "a")
        vectors = embed(a + b)
        return {"scores": (vectors[: len(a)] @ vectors[len(a) :].T).tolist()}

    @app.post("/search")
    def search(body: SearchRequest) -> dict:
        if index is None:
            raise APIError(409, "no index is loaded: start the server with --index DIR", "query")
        if body.top_k > limits.max_top_k:
            raise APIError(400, f"top_k is {body.top_k}; at most {limits.max_top_k}", "top_k")
        queries = texts_of(body.query, "query")
        check_tokens(queries, "query")
        hits = index.search(embed(queries), top_k=body.top_k, threshold=body.threshold)
        return {"results": [[{"text": h.text, "score": h.score, "id": h.id} for h in row] for row in hits]}

    page = resources.files("sentcl.serving").joinpath("static/index.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse)
    def home() -> str:
        return page

    return app


def _forbidden(character: str) -> bool:
    """Lone surrogates (not text: no encoding can write them) and control characters other than tab
    and line breaks."""
    return unicodedata.category(character) in ("Cs", "Cc") and character not in "\t\n\r"


class _TooLarge(StarletteHTTPException):
    pass


class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` is refused with 413 as soon as it is known — from its
    Content-Length, or while it is read when there is none (chunked) — so no more than the limit and one
    chunk is ever held."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        message = f"request body over {self.max_bytes} bytes"
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await _error(413, message)(scope, receive, send)
        received = 0
        started = False

        async def counted_receive():
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(413, message)  # FastAPI passes HTTP errors on to the handlers
            return event

        async def tracked_send(event):
            nonlocal started
            started = started or event["type"] == "http.response.start"
            await send(event)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except _TooLarge:
            if not started:
                await _error(413, message)(scope, receive, send)


def _format(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # OpenAI's: little-endian float32 bytes
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def token_counter(tokenizer, max_length: int | None) -> Callable[[Sequence[str]], int]:
    """Tokens the model actually reads (special tokens included, truncated at ``max_length``)."""

    def count(texts: Sequence[str]) -> int:
        ids = tokenizer(list(texts), truncation=max_length is not None, max_length=max_length)["input_ids"]
        return sum(len(x) for x in ids)

    return count


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, quiet: bool = False) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning" if quiet else "info", access_log=not quiet)
