"""Long documents as passages: a document longer than the model reads is split into overlapping token
windows, each encoded with the document's title in front, and a document is scored by its best passage
(``max``, as BEIR's and Contriever's evaluations of long documents do) or by its first (``first``: what a
model that truncates sees, kept for comparison).

The windows, per document, with the model's tokenizer and its length ``L`` (its ``max_length``):

* the body (BEIR's ``text``) is tokenized without special tokens; a window holds
  ``W = L − specials − prompt − title`` of its tokens (the tokenizer's special tokens around a text, the
  document prompt's tokens where the model has one, the title's tokens), at least ``L // 2`` (a title that
  long is cut by the model, not here);
* a window ends at a word's end (never inside a word, unless one word fills it) and the next one starts
  ``overlap`` tokens before it ends, moved back to its word's start (``overlap`` by default an eighth of
  the window: 29 tokens for a 256-token model and a short title); the last one ends at the body's end. A
  body of at most ``W`` tokens is one passage: the document as a truncating model reads it;
* a passage's text is the title, a space and the body's characters the window covers (the tokenizer's
  offsets: the passage is the user's text, never decoded tokens).

Sits beside the Embedder protocol: evaluation and search use it with any encoder that has a fast
tokenizer and a length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sentcl.errors import UserError

#: how a document is scored from its passages' scores
PASSAGE_SCORES = ("max", "first")
#: by default, neighbouring windows share this share of a window's tokens
DEFAULT_OVERLAP_SHARE = 1 / 8


class PassageError(UserError, ValueError):
    """Passages asked of a model without a fast tokenizer or a length, or settings that make no windows."""


@dataclass(frozen=True)
class PassageSettings:
    score: str = "max"  # max | first
    overlap: int | None = None  # tokens shared by neighbouring windows; None: an eighth of the window

    def validate(self, where: str = "--passages") -> None:
        if self.score not in PASSAGE_SCORES:
            raise PassageError(f"{where}: {self.score!r} is not one of {', '.join(PASSAGE_SCORES)}")
        if self.overlap is not None and self.overlap < 0:
            raise PassageError(f"{where}: an overlap of {self.overlap} tokens; it must be ≥ 0")


@dataclass
class Passages:
    """Every document's passages in document order: passage ``p`` belongs to document ``owner[p]``; the
    passages of document ``d`` are rows ``starts[d]`` to ``starts[d + 1]``."""

    texts: list[str]
    owner: np.ndarray  # [P] int64
    starts: np.ndarray  # [D + 1] int64

    @property
    def split_documents(self) -> int:
        """How many documents have more than one passage."""
        return int((np.diff(self.starts) > 1).sum())


def _unwrapped(embedder, name: str):
    """``name`` of the encoder inside ``embedder``'s wrappers (prompt, batching), or None."""
    seen = 0
    while embedder is not None and seen < 8:
        value = getattr(type(embedder), name, None) or vars(embedder).get(name)
        if value is not None:
            return getattr(embedder, name)
        embedder = vars(embedder).get("embedder") or vars(embedder).get("encoder")
        seen += 1
    return None


def model_window(embedder) -> tuple[object, int]:
    """The fast tokenizer and the length (tokens, special ones included) of the encoder ``embedder`` wraps;
    one PassageError when it has neither (a static model reads whole texts: it needs no passages)."""
    tokenizer = _unwrapped(embedder, "tokenizer")
    length = _unwrapped(embedder, "max_length")
    if tokenizer is None or not getattr(tokenizer, "is_fast", False) or not isinstance(length, int):
        raise PassageError(
            "--passages: the model has no fast tokenizer with a length (a static model reads whole texts, "
            "so it has nothing to split)"
        )
    return tokenizer, length


def split_passages(
    titles: Sequence[str],
    bodies: Sequence[str],
    tokenizer,
    length: int,
    overlap: int | None = None,
    prompt: str = "",
) -> Passages:
    """The passages of documents ``titles[i]`` + ``bodies[i]`` for a model of ``length`` tokens (above)."""
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    prompt_tokens = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
    title_tokens = [len(ids) for ids in tokenizer(list(titles), add_special_tokens=False)["input_ids"]]
    tokens = tokenizer(list(bodies), add_special_tokens=False, return_offsets_mapping=True)
    texts: list[str] = []
    owner: list[int] = []
    starts = [0]
    for row, (title, body, spans, title_length) in enumerate(
        zip(titles, bodies, tokens["offset_mapping"], title_tokens, strict=True)
    ):
        words = tokens.word_ids(row)
        window = max(length - specials - prompt_tokens - title_length, length // 2)
        shared = int(window * DEFAULT_OVERLAP_SHARE) if overlap is None else overlap
        if shared >= window:
            raise PassageError(
                f"--passage-overlap {overlap}: not below the window of {window} tokens the model leaves"
            )
        first = 0
        while True:
            last = min(first + window, len(spans))
            if last < len(spans):  # end at a word's end
                last = _word_start(words, last, first)
            piece = body[spans[first][0] : spans[last - 1][1]] if last > first else body
            texts.append(f"{title.strip()} {piece.strip()}".strip())
            owner.append(row)
            if last >= len(spans):
                break
            first = _word_start(words, max(last - shared, first + 1), first)
        starts.append(len(texts))
    return Passages(texts, np.asarray(owner, dtype=np.int64), np.asarray(starts, dtype=np.int64))


def _word_start(words: list[int | None], token: int, after: int) -> int:
    """``token`` moved back to the first token of its word, but kept after ``after`` (a word longer than a
    window is cut inside)."""
    moved = token
    while moved > after + 1 and words[moved] is not None and words[moved] == words[moved - 1]:
        moved -= 1
    return moved if moved > after + 1 or words[moved] != words[moved - 1] else token


def document_scores(passage_scores: np.ndarray, starts: np.ndarray, score: str = "max") -> np.ndarray:
    """[Q, D] document scores from [Q, P] passage scores: each document's best passage, or its first."""
    if score == "first":
        return passage_scores[:, starts[:-1]]
    return np.maximum.reduceat(passage_scores, starts[:-1], axis=1)


def rank_documents(
    queries: np.ndarray,
    passages: np.ndarray,
    starts: np.ndarray,
    depth: int,
    exclude: list[int | None],
    score: str = "max",
    cells: int = 1 << 24,
) -> np.ndarray:
    """The ``depth`` best documents per query by their passages' dot products (ties: the lower document
    first), ``exclude[q]`` a document query q never gets; in blocks of queries of at most ``cells`` scores."""
    documents = len(starts) - 1
    depth = min(depth, documents)
    block = max(1, cells // max(len(passages), 1))
    best = np.empty((len(queries), depth), dtype=np.int64)
    for first in range(0, len(queries), block):
        scores = document_scores(queries[first : first + block] @ passages.T, starts, score)
        for offset, row in enumerate(exclude[first : first + block]):
            if row is not None:
                scores[offset, row] = -np.inf
        order = np.lexsort((np.broadcast_to(np.arange(documents), scores.shape), -scores), axis=1)
        best[first : first + block] = order[:, :depth]
    return best
