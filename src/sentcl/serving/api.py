"""The HTTP API's contract: request and response models built from the server's limits, so that the OpenAPI
document (``/openapi.json``) states every constraint the server enforces and every status it answers.

A text is a string of 1 to ``max_chars`` characters, not all whitespace, without a lone surrogate or a
control character other than tab and line breaks; a list holds 1 to ``max_inputs`` of them. The document
says so in JSON Schema (``minLength``, ``maxLength``, ``pattern``, ``minItems``, ``maxItems``); the server
checks the same rules in code, so that a refusal names the text at fault (``'input[3]' holds the invalid
character U+0000``), and answers 422 for any request the schema does not allow. What JSON Schema cannot
express, the budgets of a whole request (its characters and its tokens), is declared as the 413 answer
and in ``x-sentcl-budgets``; a server started with ``max_inputs × max_chars`` within the character budget
and ``max_inputs × max_length`` within the token budget accepts every request its document allows
(``tests/serving/test_openapi.py`` runs schemathesis against one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    create_model,
)
from pydantic_core import PydanticCustomError

#: control characters (Cc) other than tab and line breaks; lone surrogates (Cs) are refused too, but are
#: not Unicode scalar values, so JSON Schema's regexes cannot name them (a string holding one is no text)
CONTROL = "\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f"
#: a regex, so a 2-million-character request is scanned in C, not per character
_FORBIDDEN = re.compile(f"[{CONTROL}\\ud800-\\udfff]")
#: whitespace as Python's str.isspace() has it, less what CONTROL has already (spelled out, as ECMA's and
#: Rust's \\s differ from Python's: U+FEFF), so the schema and the server's ``text.strip()`` agree
SPACE = "\\t\\n\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
#: a text: no control character, and at least one character that is neither that nor whitespace
TEXT_PATTERN = f"^[^{CONTROL}]*[^{SPACE}{CONTROL}][^{CONTROL}]*$"


def _text_schema(max_chars: int) -> dict:
    return {"type": "string", "minLength": 1, "maxLength": max_chars, "pattern": TEXT_PATTERN}


def texts_type(param: str, max_inputs: int, max_chars: int) -> Any:
    """``str | list[str]`` with the rules above: checked in code with a message naming the text, and stated
    in the schema."""

    def no_token_ids(value: Any) -> Any:
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            raise PydanticCustomError("token_ids", "token-id input is not supported: send text")
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            raise PydanticCustomError("token_ids", "token-id input is not supported: send text")
        return value

    def check(value: str | list[str]) -> str | list[str]:
        texts = [value] if isinstance(value, str) else value
        if not texts:
            raise PydanticCustomError("texts", "'{param}' is empty: give at least one text", {"param": param})
        if len(texts) > max_inputs:
            raise PydanticCustomError(
                "texts", "'{param}' has {n} texts; at most {limit} per request",
                {"param": param, "n": len(texts), "limit": max_inputs},
            )  # fmt: skip
        for i, text in enumerate(texts):
            where = param if isinstance(value, str) else f"{param}[{i}]"
            if not text.strip():
                raise PydanticCustomError("texts", "'{where}' is an empty string", {"where": where})
            if len(text) > max_chars:
                raise PydanticCustomError(
                    "texts", "'{where}' has {n} characters; at most {limit}",
                    {"where": where, "n": len(text), "limit": max_chars},
                )  # fmt: skip
            bad = _FORBIDDEN.search(text)
            if bad is not None:
                raise PydanticCustomError(
                    "texts", "'{where}' holds the invalid character {code}",
                    {"where": where, "code": f"U+{ord(bad.group()):04X}"},
                )  # fmt: skip
        return value

    item = _text_schema(max_chars)
    schema = {"anyOf": [item, {"type": "array", "items": item, "minItems": 1, "maxItems": max_inputs}]}
    return Annotated[
        str | list[str], BeforeValidator(no_token_ids), AfterValidator(check), WithJsonSchema(schema)
    ]


def text_type(max_chars: int) -> Any:
    """One text with the rules above (a document's ``text``)."""

    def check(value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("texts", "the text is empty")
        bad = _FORBIDDEN.search(value)
        if bad is not None:
            raise PydanticCustomError(
                "texts", "the text holds the invalid character {code}", {"code": f"U+{ord(bad.group()):04X}"}
            )
        return value

    return Annotated[
        str, Field(max_length=max_chars), AfterValidator(check), WithJsonSchema(_text_schema(max_chars))
    ]


def _plain_json(value: Any) -> Any:
    """Values a document keeps for its results: JSON that can be written as UTF-8 (no lone surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("fields", "a field holds a lone surrogate, which is no text") from None
    return value


def _plain_id(value: str) -> str:
    bad = _FORBIDDEN.search(value)
    if bad is not None:
        raise PydanticCustomError(
            "id", "the id holds the invalid character {code}", {"code": f"U+{ord(bad.group()):04X}"}
        )
    return value


#: a document's id: 1 to 512 characters, none of them a control character or a lone surrogate
DOCUMENT_ID = Annotated[
    str, Field(min_length=1, max_length=512), AfterValidator(_plain_id),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 512, "pattern": f"^[^{CONTROL}]+$"}),
]  # fmt: skip


def kept_fields_type(kept: Sequence[str]) -> Any:
    """A document's ``fields``: an object of the fields the index keeps (each any JSON value), no other."""

    def check(value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(kept))
        if unknown:
            names = ", ".join(kept) or "none"
            raise PydanticCustomError(
                "fields",
                "the index keeps no field '{name}' (it keeps: {names})",
                {"name": unknown[0], "names": names},
            )
        return _plain_json(value)

    schema = {"type": "object", "properties": {name: {} for name in kept}, "additionalProperties": False}
    return Annotated[dict[str, Any], AfterValidator(check), WithJsonSchema(schema)]


def _whole(value: Any) -> Any:
    """JSON Schema's integer: 5.0 is one (a whole number), "5" and true are not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def json_int(ge: int, le: int) -> Any:
    """An integer in [ge, le] as JSON Schema defines one (5.0 is one), under a strict model."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_whole)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def request_models(
    max_inputs: int,
    max_chars: int,
    max_top_k: int,
    dimension: int,
    prompt_names: Sequence[str] = (),
    kept_fields: Sequence[str] = (),
) -> dict[str, type[BaseModel]]:
    """The request bodies, with this server's limits in their schema; ``prompt_names``: the model's
    prompts, which an embeddings request may name (sentence-transformers' ``prompt_name``);
    ``kept_fields``: the fields a writable index's documents keep."""  # fmt: skip
    prompted = {"prompt_name": (Literal[tuple(prompt_names)] | None, None)} if prompt_names else {}

    def texts(param: str):
        return texts_type(param, max_inputs, max_chars)

    embeddings = create_model(  # type: ignore[call-overload]  # fields built at run time
        "EmbeddingsRequest",
        __base__=Strict,
        __doc__="OpenAI's embeddings request. Every field OpenAI defines is accepted (``user`` only "
        "identifies the caller); any other is refused, so a typo such as ``dimension`` is a 422.",
        input=(texts("input"), ...),
        model=(str | None, None),
        encoding_format=(Literal["float", "base64"], "float"),
        dimensions=(json_int(1, dimension) | None, None),
        user=(str | None, None),
        **prompted,
    )
    similarity = create_model("SimilarityRequest", __base__=Strict, a=(texts("a"), ...), b=(texts("b"), ...))
    search = create_model(
        "SearchRequest",
        __base__=Strict,
        query=(texts("query"), ...),
        top_k=(json_int(1, max_top_k), 5),
        threshold=(Annotated[float, Field(ge=-1.0, le=1.0)] | None, None),
    )
    # hybrid search: the index's ranking fused with BM25's over its texts; its scores are fused ranks, so it
    # takes no cosine threshold
    hybrid = create_model(
        "HybridSearchRequest", __base__=Strict, query=(texts("query"), ...), top_k=(json_int(1, max_top_k), 5)
    )
    # a writable server's documents: each one's id, the text its model encodes, the fields its results carry
    document = create_model(
        "Document", __base__=Strict, id=(DOCUMENT_ID, ...), text=(text_type(max_chars), ...),
        fields=(kept_fields_type(kept_fields) | None, None),
    )  # fmt: skip
    documents = create_model(
        "DocumentsRequest", __base__=Strict,
        documents=(Annotated[list[document], Field(min_length=1, max_length=max_inputs)], ...),  # type: ignore[valid-type,arg-type]
    )  # fmt: skip
    return {"embeddings": embeddings, "similarity": similarity, "search": search, "hybrid_search": hybrid,
            "documents": documents}  # fmt: skip


class ErrorDetail(BaseModel):
    message: str
    type: Literal["invalid_request_error", "server_error"]
    param: str | None


class ErrorResponse(BaseModel):
    """OpenAI's error shape."""

    error: ErrorDetail


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    #: unit length; with encoding_format base64, little-endian float32 bytes in base64
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage


class SimilarityResponse(BaseModel):
    #: cos(a_i, b_j)
    scores: list[list[float]]


class Hit(BaseModel):
    text: str
    score: float
    id: int
    #: the row's id in its input, where the index keeps one (a corpus of documents, encoded shards)
    key: str | None = None
    #: the document's fields kept for results (sentcl index --field)
    fields: dict[str, Any] | None = None


class SearchResponse(BaseModel):
    results: list[list[Hit]]


class DocumentsResponse(BaseModel):
    #: of the request's documents: new ids, ids whose text or fields changed (encoded again), the same
    added: int
    changed: int
    unchanged: int
    index_size: int


class DeletedResponse(BaseModel):
    deleted: str
    index_size: int


class Queue(BaseModel):
    waiting: int
    running: bool
    max_waiting: int
    refused: int


class HealthResponse(BaseModel):
    status: Literal["ok"]
    model: str
    dimension: int
    index_size: int | None
    limits: dict[str, int | float | None]
    queue: Queue


def _error(description: str) -> dict:
    return {"model": ErrorResponse, "description": description}


#: every status an endpoint that runs the model answers besides 200, and why
MODEL_RESPONSES: dict[int | str, dict] = {
    400: _error("the Host header is not one this server answers (--allowed-hosts)"),
    413: _error(
        "the body is over the byte limit, or the texts are over the request's character or token budget"
    ),
    422: _error("the body is not valid JSON or breaks the schema (the message names the field and the text)"),
    500: _error("the model gave NaN or infinite values for this input, or an unexpected failure"),
    503: _error("the server is busy (its queue is full, or the request waited too long): see Retry-After"),
}
SEARCH_RESPONSES = MODEL_RESPONSES | {
    409: _error("no index is loaded: the server was started without --index")
}
#: a writable server's changes to its index (``--writable``)
WRITE_RESPONSES = MODEL_RESPONSES | {
    409: _error("the change would leave the index empty, or names an id twice"),
}
DELETE_RESPONSES = {
    400: MODEL_RESPONSES[400], 404: _error("no document has this id (the index is unchanged)"),
    409: WRITE_RESPONSES[409], 500: MODEL_RESPONSES[500], 503: MODEL_RESPONSES[503],
}  # fmt: skip
PLAIN_RESPONSES: dict[int | str, dict] = {400: MODEL_RESPONSES[400]}
#: the page's error is JSON too, though its 200 is HTML
PAGE_RESPONSES: dict[int | str, dict] = {
    400: {
        "description": MODEL_RESPONSES[400]["description"],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
    }
}
