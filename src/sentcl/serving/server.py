"""HTTP API over one sentence encoder (and optionally one faiss index), plus the search page at ``/``.

Endpoints:

- ``POST /v1/embeddings``: OpenAI-compatible (``input`` is a string or a list of strings;
  ``encoding_format`` ``float`` or ``base64``; unit-length vectors, as OpenAI's are);
- ``POST /similarity``: cosine similarity of every text of ``a`` with every text of ``b``;
- ``POST /search``: nearest sentences of the index for one or several queries;
- ``GET /health``: model, dimension, index size, limits.

Every bad request gets a 4xx with one message in OpenAI's error shape
(``{"error": {"message", "type", "param"}}``), never a 500; a server too busy to take it gets 503 with
Retry-After. The model's work runs on one worker thread, smallest request first, with a bounded queue
(admission.py): two cores gain nothing from two forward passes at once, and a small request waits for at
most the request already running. So that no request holds the model for long, each has a budget of
tokens (what the model reads, after truncation), counted only as far as the budget, besides its text and
character limits. The body limit is enforced while the body is read, with or without a Content-Length
(chunked uploads are cut at the limit and the connection closed, not read whole), and all bodies held at
once have a budget too. Connections have timeouts and a cap (connections.py). Types are strict: ``"5"``
is not an integer and ``true`` is not a ``top_k``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from sentcl.embedder import (
    DOCUMENT,
    QUERY,
    Embedder,
    EmbeddingError,
    encode_with_prompt,
    require_finite,
    unit_rows,
)
from sentcl.search.index import SentenceIndex
from sentcl.search.lance_index import LanceIndex
from sentcl.serving.admission import Admission, BusyError
from sentcl.serving.api import (
    DELETE_RESPONSES,
    MODEL_RESPONSES,
    PAGE_RESPONSES,
    PLAIN_RESPONSES,
    SEARCH_RESPONSES,
    WRITE_RESPONSES,
    DeletedResponse,
    DocumentsResponse,
    EmbeddingsResponse,
    HealthResponse,
    SearchResponse,
    SimilarityResponse,
    request_models,
)
from sentcl.serving.connections import RateLimitedLog, fit_open_file_limit, protocol_class
from sentcl.serving.documents import ChangeError, DocumentWriter

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
    #: characters of all a request's texts: tokenising costs by character even where truncation drops
    #: most of them (2 million characters took ~1 s), so this bounds it before any tokenising; None:
    #: 16 per token of max_tokens (an English token is ~4.5 characters)
    max_request_chars: int | None = None
    #: requests waiting for the model (the smallest runs first); beyond them 503 with Retry-After
    max_waiting: int = 16
    #: a request that waited this long for the model is answered 503 rather than served late
    max_wait_s: float = 60.0
    #: request bodies held at once, all requests together; a body beyond it is answered 503 at once
    max_bodies_bytes: int = 64 * 1024 * 1024
    #: open connections; a new one beyond them closes the longest-idle one (connections.py)
    max_connections: int = 1024
    #: request headers must be complete this long after a connection opens (or after its last response)
    header_timeout_s: float = 10.0
    #: a request body must arrive within this long of its headers
    body_timeout_s: float = 30.0
    #: a client must read its response within this long
    write_timeout_s: float = 30.0


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


def _error(
    status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param}}
    return JSONResponse(body, status_code=status, headers=dict(headers) if headers else None)


@dataclass
class ModelService:
    """What the endpoints share, one per app (``app.state.service``): the model and its prompts, the index,
    the limits and the admission queue, with the three steps every model endpoint takes (``run``: the
    character budget, then the queue; ``check_tokens``: the token budget; ``embed``: unit vectors)."""

    embedder: Embedder
    model_name: str
    dimension: int
    index: SentenceIndex | LanceIndex | None
    limits: ServerLimits
    count_tokens: Callable[[list[str], int], int] | None
    admission: Admission
    request_chars: int
    prompts: dict[str, str]
    #: a writable server's (``--writable``) changes to its index; None: the index is read-only
    writer: DocumentWriter | None = None
    #: held by a change from its turn in the queue until the changed index is served
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def embed(
        self, texts: list[str], dimensions: int | None = None, prompt: str = "", cost: int = 0
    ) -> np.ndarray:
        """Unit vectors of ``texts`` (each after ``prompt``); with ``dimensions``, of their first
        ``dimensions`` coordinates."""
        try:  # a vector of NaN is never served as [null, ...]
            parts, stop_of, start = [], dict(slices(texts)), 0
            chars = max(sum(len(t) for t in texts), 1)
            left = chars
            while start < len(texts):
                if start:  # smaller waiting requests run between slices; the cost left, pro rata
                    self.admission.yield_point(int(cost * left / chars))
                # one slice while others wait, else the rest at once (a batch is fastest whole)
                stop = stop_of[start] if self.admission.waiting() else len(texts)
                part = encode_with_prompt(self.embedder, texts[start:stop], prompt)
                parts.append(np.asarray(part, dtype=np.float32))
                left -= sum(len(t) for t in texts[start:stop])
                start = stop
            vectors = np.concatenate(parts)
            require_finite(vectors, texts, self.model_name)
        except EmbeddingError as exc:
            logger.error("%s", exc)
            raise APIError(500, "the model gave NaN or infinite values for this input") from None
        return unit_rows(vectors[:, :dimensions])

    def check_tokens(self, texts: list[str], param: str) -> int:
        """The request's tokens; over ``max_tokens`` a 413, found without tokenising more than needed."""
        if self.count_tokens is None:
            return 0
        limit = self.limits.max_tokens
        tokens = self.count_tokens(texts, limit)
        if tokens > limit:  # counting stopped once over the limit: the true count is ≥ tokens
            raise APIError(413, f"'{param}' has at least {tokens} tokens; at most {limit} per request", param)
        return tokens

    async def run(
        self, texts: list[str], param: str, work: Callable[[int], bytes], request: Request
    ) -> Response:
        """``work(cost)`` on the model's worker when admitted (smallest request first); 503 when it is not.
        A request over the character budget is a 413 before it is queued. Its cost is its body's bytes:
        known from Content-Length before the body is read, so BodyLimit refuses what admission would."""
        return Response(await self.admitted(texts, param, work, request), media_type="application/json")

    async def change(
        self, texts: list[str], param: str, work: Callable[[int], tuple[Any, dict]], request: Request
    ) -> Response:
        """A change to a writable index: ``work(cost)`` gives the changed index and the answer, on the
        model's worker as an exclusive job (admitted as ``run`` admits); the folder is then written off the
        worker, searches going on with the index as it was, and only then is the changed index served. One
        change at a time, from its turn in the queue to its swap."""
        assert self.writer is not None
        async with self.write_lock:
            try:
                changed, answer = await self.admitted(texts, param, work, request, exclusive=True)
            except ChangeError as exc:  # refused as a whole: nothing changed
                raise APIError(exc.status, exc.message, exc.param) from None
            if changed is not self.index:
                await asyncio.to_thread(self.writer.save, changed)
                self.index = changed
        return Response(_json(answer), media_type="application/json")

    async def admitted(
        self,
        texts: list[str],
        param: str,
        work: Callable[[int], Any],
        request: Request,
        exclusive: bool = False,
    ) -> Any:
        """``work(cost)``'s result once admitted (``run``)."""
        total = sum(len(t) for t in texts)
        if total > self.request_chars:
            raise APIError(
                413,
                f"'{param}' has {total} characters in all; at most {self.request_chars} per request",
                param,
            )
        cost = len(await request.body())
        return await self.admission.run(cost, lambda: work(cost), exclusive)


def _service(request: Request) -> ModelService:
    return request.app.state.service


# ------------------------------------------------------------------------------------------- endpoints
def health(request: Request) -> dict:
    service = _service(request)
    return {
        "status": "ok",
        "model": service.model_name,
        "dimension": service.dimension,
        "index_size": None if service.index is None else len(service.index),
        "limits": {**asdict(service.limits), "max_request_chars": service.request_chars},  # enforced
        "queue": service.admission.stats(),
    }


async def embeddings(body, request: Request) -> Response:
    service, texts = _service(request), _as_list(body.input)

    def work(cost: int) -> bytes:
        tokens = service.check_tokens(texts, "input")
        prompt = service.prompts[body.prompt_name] if getattr(body, "prompt_name", None) else ""
        vectors = service.embed(texts, body.dimensions, prompt, cost)  # a prefix (Matryoshka), unit length
        data = [
            {"object": "embedding", "index": i, "embedding": _format(v, body.encoding_format)}
            for i, v in enumerate(vectors)
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json({"object": "list", "data": data, "model": service.model_name, "usage": usage})

    return await service.run(texts, "input", work, request)


async def similarity(body, request: Request) -> Response:
    service, a, b = _service(request), _as_list(body.a), _as_list(body.b)

    def work(cost: int) -> bytes:
        service.check_tokens(a + b, "a")
        vectors = service.embed(a + b, cost=cost)
        return _json({"scores": (vectors[: len(a)] @ vectors[len(a) :].T).tolist()})

    return await service.run(a + b, "a", work, request)


async def search(body, request: Request) -> Response:
    return await _search(body, request, hybrid=False)


async def hybrid_search(body, request: Request) -> Response:
    return await _search(body, request, hybrid=True)


async def _search(body, request: Request, hybrid: bool) -> Response:
    """The index's nearest texts of each query: by cosine, or (``hybrid``) fused with BM25's by rank."""
    service = _service(request)
    index = service.index
    if index is None:
        raise APIError(409, "no index is loaded: start the server with --index DIR", "query")
    if hybrid and isinstance(index, LanceIndex):
        raise APIError(
            409, "hybrid search needs the in-memory index; this server's is a lance index", "query"
        )
    queries = _as_list(body.query)

    def work(cost: int) -> bytes:
        service.check_tokens(queries, "query")
        query_vectors = service.embed(queries, prompt=service.prompts.get(QUERY, ""), cost=cost)
        if hybrid:
            hits = index.hybrid_search(query_vectors, queries, top_k=body.top_k)
        else:
            hits = index.search(query_vectors, top_k=body.top_k, threshold=body.threshold)
        rows = [[_hit(h) for h in row] for row in hits]
        return _json({"results": rows})

    return await service.run(queries, "query", work, request)


async def add_documents(body, request: Request) -> Response:
    """Documents added or replaced in a writable server's index (serving/documents.py)."""
    service = _service(request)
    texts = [document.text for document in body.documents]

    def work(cost: int) -> tuple[SentenceIndex, dict]:
        service.check_tokens(texts, "documents")
        assert service.writer is not None and isinstance(service.index, SentenceIndex)

        def encode(fresh: list[str]) -> np.ndarray:
            return service.embed(fresh, prompt=service.prompts.get(DOCUMENT, ""), cost=cost)

        return service.writer.upsert(service.index, body.documents, encode)

    return await service.change(texts, "documents", work, request)


async def delete_document(key: str, request: Request) -> Response:
    """A document removed from a writable server's index; 404 when no document has the id."""
    service = _service(request)

    def work(cost: int) -> tuple[SentenceIndex, dict]:
        assert service.writer is not None and isinstance(service.index, SentenceIndex)
        return service.writer.delete(service.index, key)

    return await service.change([], "key", work, request)


def _hit(hit) -> dict:
    found = {"text": hit.text, "score": hit.score, "id": hit.id}
    found |= {} if hit.key is None else {"key": hit.key}
    return found if hit.fields is None else found | {"fields": hit.fields}


@functools.cache
def home() -> str:
    return resources.files("sentcl.serving").joinpath("static/index.html").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Endpoint:
    """One route: ``model`` names its request model (api.py's, built for the server's limits), ``queued``
    says that its work waits in the admission queue (BodyLimit refuses it early when the queue is full)."""

    path: str
    handler: Callable
    method: str
    response_model: type | None
    responses: dict
    model: str | None = None
    queued: bool = False
    operation_id: str | None = None
    response_class: type[Response] = JSONResponse


#: every route of the API: adding an endpoint is a handler above and a row here (docs/extending.md)
ENDPOINTS = (
    # HEAD answers as GET does, for load balancers; one operation id each
    Endpoint("/health", health, "GET", HealthResponse, PLAIN_RESPONSES, operation_id="health_get"),
    Endpoint("/health", health, "HEAD", HealthResponse, PLAIN_RESPONSES, operation_id="health_head"),
    Endpoint("/v1/embeddings", embeddings, "POST", EmbeddingsResponse, MODEL_RESPONSES, "embeddings", True),
    Endpoint("/similarity", similarity, "POST", SimilarityResponse, MODEL_RESPONSES, "similarity", True),
    Endpoint("/search", search, "POST", SearchResponse, SEARCH_RESPONSES, "search", True),
    Endpoint(
        "/search/hybrid", hybrid_search, "POST", SearchResponse, SEARCH_RESPONSES, "hybrid_search", True
    ),
    Endpoint("/", home, "GET", None, PAGE_RESPONSES, response_class=HTMLResponse),
)
#: the routes of a writable server (``sentcl serve --writable``) besides those
WRITE_ENDPOINTS = (
    Endpoint("/documents", add_documents, "POST", DocumentsResponse, WRITE_RESPONSES, "documents", True),
    Endpoint("/documents/{key:path}", delete_document, "DELETE", DeletedResponse, DELETE_RESPONSES),
)


def _with_body(handler: Callable, model: type) -> Callable:
    """``handler`` for one app, its ``body`` read as ``model`` (a request model built for this server's
    limits: FastAPI reads the annotation, so each app gets a function of its own)."""

    async def endpoint(body, request: Request) -> Response:
        return await handler(body, request)

    endpoint.__annotations__ = {"body": model, "request": Request, "return": Response}
    endpoint.__name__ = endpoint.__qualname__ = handler.__name__  # the operation id as before
    return endpoint


# -------------------------------------------------------------------------------- errors, one shape
async def api_error(request: Request, exc: APIError):
    return _error(exc.status, exc.message, exc.param)


async def busy(request: Request, exc: BusyError):
    return _error(503, str(exc), headers={"Retry-After": str(exc.retry_after)})


async def validation_error(request: Request, exc: RequestValidationError):
    errors = exc.errors()
    ours = [e for e in errors if e.get("type") in ("texts", "token_ids")]
    first = ours[0] if ours else errors[0]
    if first.get("type") == "json_invalid":  # its loc is a character position, not a parameter
        return _error(422, f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}".strip())
    loc = [p for p in first.get("loc", ()) if p != "body"]
    if ours:  # the message names the text at fault itself
        return _error(422, first["msg"], str(loc[0]) if loc else None)
    where = ".".join(str(p) for p in loc if not _is_branch(p)) or "body"
    return _error(422, f"{where}: {first.get('msg', 'invalid')}", where)


async def http_error(request: Request, exc: StarletteHTTPException):
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:  # Allow: every method of the path (HEAD /health is a route of its own)
        routes = [
            r for r in request.app.routes if isinstance(r, Route) and r.path_regex.match(request.url.path)
        ]
        allowed = {m for r in routes for m in r.methods or ()}
        headers = {**(headers or {}), "Allow": ", ".join(sorted(allowed))}
    return _error(exc.status_code, str(exc.detail), headers=headers)


async def server_error(request: Request, exc: Exception):  # a bug: logged whole, answered in the API's shape
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _error(500, "internal error: the server's log has the details")


EXCEPTION_HANDLERS: dict[Any, Callable] = {
    APIError: api_error,
    BusyError: busy,
    RequestValidationError: validation_error,
    StarletteHTTPException: http_error,
    Exception: server_error,
}


def create_app(
    embedder: Embedder,
    *,
    model_name: str,
    dimension: int,
    index: SentenceIndex | LanceIndex | None = None,
    limits: ServerLimits = ServerLimits(),
    count_tokens: Callable[[list[str], int], int] | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES,
    writer: DocumentWriter | None = None,
) -> FastAPI:
    """The ASGI app; ``embedder.encode(texts)`` gives the raw vectors (normalised here). The embedder's
    ``prompts`` (if any) are applied as sentence-transformers applies them: a search's queries get the
    ``query`` prompt, an embeddings request the prompt it names."""
    prompts = dict(getattr(embedder, "prompts", None) or {})
    admission = Admission(limits.max_waiting, limits.max_wait_s)
    request_chars = limits.max_request_chars or 16 * limits.max_tokens
    service = ModelService(
        embedder,
        model_name,
        dimension,
        index,
        limits,
        count_tokens,
        admission,
        request_chars,
        prompts,
        writer,
    )
    # no /docs or /redoc: their pages load scripts from a CDN (the API's description is /openapi.json)
    app = FastAPI(
        title="sentcl", summary=f"sentence embeddings from {model_name}", version="1", docs_url=None,
        redoc_url=None,
    )  # fmt: skip
    app.router.route_class = _StrictJSONRoute
    app.state.admission, app.state.service = admission, service
    kept = writer.keep if writer is not None else ()
    models = request_models(
        limits.max_inputs, limits.max_chars, limits.max_top_k, dimension, sorted(prompts), kept
    )
    _document_budgets(app, {"max_request_chars": request_chars, "max_tokens": limits.max_tokens})
    app.add_middleware(
        BodyLimit, max_bytes=limits.max_body_bytes, max_total_bytes=limits.max_bodies_bytes,
        admission=admission, queued_paths=MODEL_PATHS,
    )  # fmt: skip
    app.add_middleware(AllowedHosts, hosts=allowed_hosts)  # the outermost: checked before anything else
    for kind, handler in EXCEPTION_HANDLERS.items():
        app.add_exception_handler(kind, handler)
    for route in ENDPOINTS + (WRITE_ENDPOINTS if writer is not None else ()):
        app.add_api_route(
            route.path, _with_body(route.handler, models[route.model]) if route.model else route.handler,
            methods=[route.method], response_model=route.response_model, responses=route.responses,
            operation_id=route.operation_id, response_class=route.response_class,
        )  # fmt: skip
    return app


#: the endpoints whose work waits in the admission queue (BodyLimit refuses them early when it is full):
#: derived from the route table, so the two cannot drift apart
MODEL_PATHS = frozenset(route.path for route in ENDPOINTS + WRITE_ENDPOINTS if route.queued)
#: characters of one slice of a request's texts (~2,000-2,700 tokens of English): a large request is encoded
#: slice by slice, and smaller waiting requests run between its slices (admission.py's yield_point)
SLICE_CHARS = 12_000


def slices(texts: list[str], size: int = SLICE_CHARS) -> list[tuple[int, int]]:
    """(start, stop) of consecutive slices of ``texts`` of about ``size`` characters (one text at least)."""
    bounds, start, held = [], 0, 0
    for i, text in enumerate(texts):
        if i > start and held + len(text) > size:
            bounds.append((start, i))
            start, held = i, 0
        held += len(text)
    bounds.append((start, len(texts)))
    return bounds


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: an object naming a key twice is refused, not read as "the last wins"."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise json.JSONDecodeError(f"the key {key[:40]!r} appears twice in one object", "", 0)
        seen[key] = value
    return seen


class _StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), object_pairs_hook=_unique_keys)
        return self._json


class _StrictJSONRoute(APIRoute):
    """Routes whose JSON bodies refuse duplicate keys (a 422 naming the key, as any invalid JSON)."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJSONRequest(request.scope, request.receive))

        return strict


def _body(model: type) -> Callable:
    """Give an endpoint's ``body`` parameter a request model built at run time (for this server's limits):
    FastAPI reads the annotation, which a string annotation of a local class would not resolve to."""

    def annotate(endpoint: Callable) -> Callable:
        endpoint.__annotations__["body"] = model
        return endpoint

    return annotate


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _is_branch(part) -> bool:
    """A union branch pydantic names in an error's location (``str``, ``list[str]``), not a field."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part or "-" in part)


def _document_budgets(app: FastAPI, budgets: dict[str, int]) -> None:
    """``x-sentcl-budgets`` in the document's info: the per-request budgets JSON Schema cannot state."""
    original = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = original()
            schema["info"]["x-sentcl-budgets"] = budgets
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema


def _json(payload: dict) -> bytes:
    """The response body, serialised on the model's worker (not the event loop); NaN is never written."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


class _TooLarge(StarletteHTTPException):
    pass


class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` is refused with 413 as soon as it is known — from its
    Content-Length, or while it is read when there is none (chunked) — so no more than the limit and one
    chunk is ever held, and the connection is closed rather than read to the end. All requests together
    hold at most ``max_total_bytes`` of body: a request that would pass it is answered 503 at once
    (Retry-After), so many concurrent large uploads cannot exhaust memory."""

    def __init__(
        self, app, max_bytes: int, max_total_bytes: int | None = None, admission: Admission | None = None,
        queued_paths: frozenset[str] = frozenset(),
    ):  # fmt: skip
        self.app, self.max_bytes = app, max_bytes
        #: a request to these paths whose Content-Length admission would refuse now is answered 503 before
        #: its body is read: a client resending refused requests in a loop then costs headers, not bodies
        self.admission, self.queued_paths = admission, queued_paths
        self.max_total_bytes = max_total_bytes if max_total_bytes is not None else 16 * max_bytes
        self.held = 0  # bytes of body the requests in progress hold or have announced

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        message = f"request body over {self.max_bytes} bytes"
        full = "the server holds as many request bodies as it may: try again later"
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await _error(413, message, headers=CLOSE)(scope, receive, send)
        reserved = int(length) if length is not None else 0
        if reserved and self.admission is not None and scope.get("path") in self.queued_paths:
            refused = self.admission.refusal(reserved)
            if refused is not None:
                headers = {"Retry-After": str(refused.retry_after), **CLOSE}
                return await _error(503, str(refused), headers=headers)(scope, receive, send)
        if reserved and self.held + reserved > self.max_total_bytes:
            return await _error(503, full, headers=BUSY_CLOSE)(scope, receive, send)
        self.held += reserved
        received = 0
        started = False

        async def counted_receive():
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                size = len(event.get("body", b""))
                received += size
                if received > reserved:  # a chunked body counts as it arrives
                    self.held += size
                if received > self.max_bytes:  # FastAPI passes HTTP errors on to the handlers
                    raise _TooLarge(413, message, headers=CLOSE)
                if self.held > self.max_total_bytes:
                    raise _TooLarge(503, full, headers=BUSY_CLOSE)
            return event

        async def tracked_send(event):
            nonlocal started
            started = started or event["type"] == "http.response.start"
            await send(event)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except _TooLarge as exc:
            if not started:
                await _error(exc.status_code, str(exc.detail), headers=exc.headers)(scope, receive, send)
        finally:
            self.held -= max(reserved, received)


#: a response header that ends the connection after the response (the rest of a refused body is not read)
CLOSE = {"Connection": "close"}
BUSY_CLOSE = {"Retry-After": "1", **CLOSE}


def _format(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":  # OpenAI's: little-endian float32 bytes
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


#: a whitespace-delimited word holding a letter, digit or underscore: every tokenizer (WordPiece, BPE,
#: unigram) reads it as at least one token, since no normaliser deletes those characters
_WORD = re.compile(r"\w\S*")


def token_counter(tokenizer, max_length: int | None, chunk: int = 32) -> Callable[[Sequence[str], int], int]:
    """``count(texts, limit)``: the tokens the model reads (special tokens included, truncated at
    ``max_length``), or, once they pass ``limit``, a number over it found with as little work as possible:
    first a lower bound from the words (no tokenising), then ``chunk`` texts at a time. A request refused
    for its size costs about ``limit`` tokens of tokenising, not all of its text (counting a whole oversized
    request took 1.1 s when it was measured)."""
    cap = max_length or 1 << 30

    def count(texts: Sequence[str], limit: int | None = None) -> int:
        texts = list(texts)
        if limit is not None:
            words = sum(min(len(_WORD.findall(text)), cap) for text in texts)
            if words > limit:
                return words
        total = 0
        for start in range(0, len(texts), chunk):
            part = texts[start : start + chunk]
            ids = tokenizer(part, truncation=max_length is not None, max_length=max_length)["input_ids"]
            total += sum(len(x) for x in ids)
            if limit is not None and total > limit:
                break
        return total

    return count


def serve(
    app: FastAPI, host: str = "127.0.0.1", port: int = 8000, quiet: bool = False,
    limits: ServerLimits = ServerLimits(),
) -> None:  # fmt: skip
    """Run ``app`` under uvicorn with the connection limits of ``limits`` (connections.py) and a log that
    repeats one message at most 10 times a minute."""
    import uvicorn

    connections = fit_open_file_limit(limits.max_connections)
    protocol = protocol_class(
        connections, limits.header_timeout_s, limits.body_timeout_s, limits.write_timeout_s
    )
    quieter = RateLimitedLog()
    for name in ("uvicorn.error", "uvicorn.access", "asyncio", "sentcl"):
        logging.getLogger(name).addFilter(quieter)
    uvicorn.run(
        app, host=host, port=port, http=protocol, log_level="warning" if quiet else "info",
        access_log=not quiet, timeout_keep_alive=5,
    )  # fmt: skip
