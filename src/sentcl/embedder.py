"""The one interface evaluation, analysis and post-processing depend on: texts → vectors."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from sentcl.errors import UserError

logger = logging.getLogger(__name__)


class EmbeddingError(UserError, ValueError):
    """A model gave vectors that are not numbers (NaN or infinity): never written, indexed or served."""


def require_finite(vectors: np.ndarray, sentences: Sequence[str], source: str | None) -> np.ndarray:
    """``vectors`` as they are when every value is finite; else one EmbeddingError naming the first
    sentence whose vector is not (a model with broken weights, or an overflow in low precision)."""
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise EmbeddingError(
            f"{source or 'the model'}: NaN or infinite embedding values for {int(bad.sum())} of "
            f"{len(vectors)} sentences (the first is #{first}: {sentences[first][:80]!r}); the model's "
            f"weights or its precision are broken, so nothing is written"
        )
    return vectors


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Every row scaled to unit L2 norm (a zero row stays zero), in ``x``'s dtype."""
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@runtime_checkable
class Embedder(Protocol):
    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Return one row per sentence, shape [N, D]."""
        ...


class CachedEmbedder:
    """Remembers the vector of every sentence it has encoded: several measurements of one model at one
    moment (STS, alignment/uniformity, spectrum) then encode each sentence once."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        new = sorted({s for s in sentences if s not in self.cache})
        if new:
            self.cache.update(zip(new, self.embedder.encode(new), strict=True))
        return (
            np.stack([self.cache[s] for s in sentences]) if len(sentences) else np.zeros((0, 0), np.float32)
        )


# ------------------------------------------------------------------------------------------------ prompts
#: the prompt names retrieval looks for (sentence-transformers' encode_query / encode_document)
QUERY, DOCUMENT = "query", "document"


class PromptError(UserError, ValueError):
    """A prompt name the model does not have, or prompts that are not name → text."""


def check_prompts(value, where: str) -> dict[str, str]:
    """``value`` as a prompt table (name → the text put before every sentence), or one PromptError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PromptError(f"{where}: prompts are a mapping of name → text, not {type(value).__name__}")
    for name, text in value.items():
        if not isinstance(name, str) or not name or not isinstance(text, str):
            raise PromptError(
                f"{where}: prompt {name!r}: a non-empty name and a text are needed, got {text!r}"
            )
    return dict(value)


def prompt_text(prompts: dict[str, str], name: str | None, prompt: str | None, where: str) -> str:
    """The text put before every sentence, as sentence-transformers resolves it: ``prompt`` when given (a
    ``name`` beside it is ignored, with a warning), else the model's prompt ``name``; ``query`` and
    ``document`` are always known (empty unless the model sets them)."""
    if prompt is not None:
        if not isinstance(prompt, str):
            raise PromptError(f"{where}: prompt must be a text, not {type(prompt).__name__}")
        if name is not None:
            logger.warning("%s: both prompt and prompt_name given; the prompt is used", where)
        return prompt
    if name is None:
        return ""
    if not isinstance(name, str):
        raise PromptError(f"{where}: prompt_name must be a text, not {type(name).__name__}")
    known = {QUERY: "", DOCUMENT: "", **prompts}
    if name not in known:
        raise PromptError(
            f"{where}: the model has no prompt {name!r} (its prompts: {', '.join(sorted(known))})"
        )
    return known[name]


def encode_with_prompt(embedder, sentences: Sequence[str], prompt: str, *args, **kwargs) -> np.ndarray:
    """``embedder``'s vectors of ``sentences``, each after ``prompt``, as sentence-transformers makes them: an
    encoder that takes a ``prompt`` keyword (every sentcl encoder, and the wrappers that say
    ``takes_prompt``) gets it as a keyword, so a pooling with ``include_prompt`` false leaves the prompt's
    tokens out; any other Embedder gets the prompt glued before each text."""
    if not prompt:
        return embedder.encode(sentences, *args, **kwargs)
    if getattr(embedder, "takes_prompt", False):
        return embedder.encode(sentences, *args, prompt=prompt, **kwargs)
    return embedder.encode([prompt + s for s in sentences], *args, **kwargs)


class Prompted:
    """An Embedder whose every text gets ``prompt`` in front (:func:`encode_with_prompt`); what else the
    embedder has passes through."""

    def __init__(self, embedder, prompt: str):
        self.embedder, self.prompt = embedder, prompt

    def encode(self, sentences: Sequence[str], *args, **kwargs) -> np.ndarray:
        return encode_with_prompt(self.embedder, sentences, self.prompt, *args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__") or name == "embedder":  # copy/pickle probe before __init__: no recursion
            raise AttributeError(name)
        return getattr(self.embedder, name)


def for_role(embedder, role: str):
    """``embedder`` with its own prompt for ``role`` (``QUERY`` / ``DOCUMENT``) where its ``prompts`` has
    one; as it is otherwise (a model without prompts, or any plain Embedder)."""
    prompts = getattr(embedder, "prompts", None) or {}
    return Prompted(embedder, prompts[role]) if prompts.get(role) else embedder


class PromptRoles:
    """``encode_query`` / ``encode_document`` for an encoder with ``prompts`` and ``encode``, as
    sentence-transformers has them: ``encode`` with the prompt named for that role unless the call names a
    prompt or a prompt name itself (so the pooling sees the prompt as a prompt)."""

    def encode_query(self, sentences: Sequence[str], **kwargs) -> np.ndarray:
        return self._encode_as(QUERY, sentences, kwargs)

    def encode_document(self, sentences: Sequence[str], **kwargs) -> np.ndarray:
        return self._encode_as(DOCUMENT, sentences, kwargs)

    def _encode_as(self, role: str, sentences: Sequence[str], kwargs: dict) -> np.ndarray:
        if kwargs.get("prompt") is None and kwargs.get("prompt_name") is None:
            kwargs = kwargs | {"prompt_name": role}
        return self.encode(sentences, **kwargs)  # type: ignore[attr-defined]


def keep_prefix(vectors: np.ndarray, dim: int | None) -> np.ndarray:
    """The first ``dim`` dimensions of every row (a Matryoshka prefix; None: all of them)."""
    if dim is None:
        return vectors
    if dim > vectors.shape[1]:
        raise EmbeddingError(f"--dim {dim}: the model gives {vectors.shape[1]} dimensions")
    return vectors[:, :dim]


class Batched:
    """An encoder as an :class:`Embedder` that encodes in batches of ``batch_size`` (with a progress bar:
    True, False, or None for one on long inputs), keeps the first ``dim`` dimensions where given, and
    carries the encoder's prompts (an index applies the document prompt, retrieval the query one)."""

    def __init__(self, encoder, batch_size: int, show_progress: bool | None = None, dim: int | None = None):
        self.encoder, self.batch_size, self.show_progress, self.dim = encoder, batch_size, show_progress, dim
        self.prompts = getattr(encoder, "prompts", {})
        self.takes_prompt = getattr(encoder, "takes_prompt", False)  # the prompt reaches the pooling

    def encode(self, sentences, **options) -> np.ndarray:
        options = {"batch_size": self.batch_size, "show_progress": self.show_progress} | options
        return keep_prefix(self.encoder.encode(sentences, **options), self.dim)
