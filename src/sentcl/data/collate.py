"""Tokenise once, then collate examples into ``Batch`` tensors of shape ``[B, V, L]``.

V is the number of views of an example: unsupervised SimCSE uses V=2 copies of the same ids (dropout
is the augmentation), supervised uses V=2 (anchor, positive) or V=3 (anchor, positive, hard negative).
Padding is dynamic: L is the longest sequence in the batch, at most ``max_length`` (SimCSE: 32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from sentcl.data.readers import DataError, Records

DEFAULT_MAX_LENGTH = 32


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, V, L]
    attention_mask: torch.Tensor  # [B, V, L]
    indices: torch.Tensor  # [B] row indices into the source Records
    #: [B, C] ids of the rows' label columns (the columns after ``data.text_columns``, e.g. EASE's entity
    #: and hard-negative entity) in the dataset's ``label_names``; None when the data has none
    labels: torch.Tensor | None = None
    #: [B, V, L] per-token labels a view maker adds (CLINE's replaced-token flags, −100 where none)
    token_labels: torch.Tensor | None = None
    #: [B, V, L] the word each token belongs to (−1 for special tokens and padding), for whole-word masking
    word_ids: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.input_ids.shape)  # type: ignore[return-value]

    def to(self, device: torch.device | str) -> Batch:
        def move(tensor):
            return None if tensor is None else tensor.to(device)

        return Batch(
            self.input_ids.to(device), self.attention_mask.to(device), self.indices,
            move(self.labels), move(self.token_labels), move(self.word_ids),
        )  # fmt: skip


class TokenizedColumn:
    """The token ids of one column of texts, stored flat (int32 + offsets) to stay small."""

    def __init__(self, ids: list[list[int]]):
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        self.offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.flat = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(self.offsets[-1]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def encode_in_chunks(
    tokenizer, texts: list[str], max_length: int, chunk: int = 4096, desc: str | None = None
):
    """Tokenise with truncation to ``max_length`` (special tokens included), no padding; yields one
    ``BatchEncoding`` per chunk of ``chunk`` texts, with a progress bar for large inputs."""
    progress = tqdm(total=len(texts), desc=desc or "tokenising", unit="sent", disable=len(texts) < 20_000)
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        yield tokenizer(part, truncation=True, max_length=max_length, add_special_tokens=True)
        progress.update(len(part))
    progress.close()


def tokenize_texts(
    tokenizer, texts: list[str], max_length: int, chunk: int = 4096, desc: str | None = None
) -> TokenizedColumn:
    """Token ids of ``texts``, truncated to ``max_length`` (special tokens included), unpadded."""
    ids: list[list[int]] = []
    for encoded in encode_in_chunks(tokenizer, texts, max_length, chunk, desc):
        ids.extend(encoded["input_ids"])
    return TokenizedColumn(ids)


def sorted_batches(
    tokenizer, sentences: list[str], max_length: int, batch_size: int, show_progress=None,
    max_tokens: int | None = None,
):  # fmt: skip
    """Tokenise ``sentences`` once and yield ``(rows, Batch [n, 1, L])`` from the longest to the shortest
    sentence, so each batch holds sentences of similar length (little padding): how models encode.
    ``max_tokens``: a batch also holds at most this many tokens with its padding (rows × its longest), so
    a batch of long texts has fewer rows than one of short texts (a text longer than the budget alone)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    tokens = tokenize_texts(tokenizer, sentences, max_length, desc="tokenising")
    lengths = tokens.lengths()
    order = np.argsort(-lengths, kind="stable")
    pad = int(tokenizer.pad_token_id or 0)
    bounds = batch_bounds(lengths[order], batch_size, max_tokens)
    show = show_progress if show_progress is not None else len(sentences) > 5 * batch_size
    for start, end in tqdm(bounds, desc="encoding", unit="batch", disable=not show):
        rows = order[start:end]
        yield rows, collate_views([(int(i), [tokens[int(i)]]) for i in rows], pad)


def batch_bounds(lengths: np.ndarray, batch_size: int, max_tokens: int | None) -> list[tuple[int, int]]:
    """``(start, end)`` of each batch over ``lengths`` sorted longest first: ``batch_size`` rows, fewer
    where ``max_tokens`` allows fewer of the batch's first (longest) length; at least one row."""
    bounds, start = [], 0
    while start < len(lengths):
        rows = (
            batch_size if max_tokens is None else min(batch_size, max(1, max_tokens // int(lengths[start])))
        )
        bounds.append((start, min(start + rows, len(lengths))))
        start += rows
    return bounds


class ContrastiveDataset(torch.utils.data.Dataset):
    """Records tokenised once; item i is the list of its V views' token ids.

    ``n_views`` defaults to 2 for one-column (unsupervised) data, else the number of columns.
    A one-column source repeats its single tokenisation V times (no re-tokenisation per view).
    """

    def __init__(
        self,
        records: Records,
        tokenizer,
        max_length: int = DEFAULT_MAX_LENGTH,
        n_views: int | None = None,
        text_columns: int | None = None,
    ):
        if max_length < 2:
            raise DataError(f"{records.path}: max_length must be at least 2, got {max_length}")
        self.records = records
        self.max_length = max_length
        if text_columns is not None and text_columns > records.n_columns:
            raise DataError(
                f"{records.path}: data.text_columns is {text_columns} but the rows have {records.n_columns}"
            )
        columns = text_columns or records.n_columns  # columns after these are labels (e.g. EASE's entity)
        self.n_views = n_views if n_views is not None else (2 if columns == 1 else columns)
        if columns > 1 and self.n_views != columns:
            raise DataError(f"{records.path}: {columns} columns but {self.n_views} views were asked for")
        self.columns = [
            tokenize_texts(
                tokenizer, [row[c] for row in records.rows], max_length, desc=f"tokenising col {c}"
            )
            for c in range(columns)
        ]
        pad = tokenizer.pad_token_id
        if pad is None:
            raise DataError(f"{records.path}: the tokenizer has no pad token")
        self.pad_token_id = int(pad)
        # the label columns, as ids into one sorted vocabulary of their values
        self.label_columns = records.n_columns - columns
        self.label_names: list[str] = []
        if self.label_columns:
            self.label_names = sorted({name for row in records.rows for name in row[columns:]})
            index = {name: i for i, name in enumerate(self.label_names)}
            rows = [[index[name] for name in row[columns:]] for row in records.rows]
            self.label_ids = np.array(rows, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> tuple[int, list[np.ndarray]]:
        if len(self.columns) == 1:
            return i, [self.columns[0][i]] * self.n_views
        return i, [column[i] for column in self.columns]

    def collate(self, items: list[tuple[int, list[np.ndarray]]]) -> Batch:
        batch = collate_views(items, self.pad_token_id)
        if self.label_columns:
            batch.labels = torch.from_numpy(self.label_ids[batch.indices.numpy()])
        return batch

    def lengths(self) -> np.ndarray:
        """Tokens of each example: the longest of its views."""
        return np.max([column.lengths() for column in self.columns], axis=0)

    def describe(self, rows) -> str:
        """Where the examples ``rows`` come from, for an error message: the file and its lines."""
        lines = [self.records.lines[int(i)] for i in rows]
        return f"{self.records.path} {self.records.unit}s {lines[:10]}{' …' if len(lines) > 10 else ''}"


def rank_slice(rows, rank: int, world: int):
    """This rank's equal slice of a global batch (``len(rows) // world`` rows from ``rank`` times that): the
    ranks gather equal-sized embeddings, so a short batch leaves its ``len(rows) % world`` last rows out."""
    share = len(rows) // world
    return rows[rank * share : (rank + 1) * share]


def group_by_length(
    order: torch.Tensor, lengths: np.ndarray, batch_size: int, generator: torch.Generator, span: int = 50
) -> torch.Tensor:
    """Reorder a shuffled ``order`` so each batch holds examples of similar length: within windows of
    ``span`` batches the examples are sorted by length and cut into batches, then the full batches are
    shuffled (the last, partial batch stays last). Deterministic given ``generator``."""
    window = span * batch_size
    batches: list[torch.Tensor] = []
    for start in range(0, len(order), window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(-lengths[chunk.numpy()], kind="stable")]
        batches += list(chunk.split(batch_size))
    tail = [batches.pop()] if len(batches[-1]) < batch_size else []
    shuffled = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
    return torch.cat(shuffled + tail)


def collate_views(items: list[tuple[int, list[np.ndarray]]], pad_token_id: int) -> Batch:
    """Pad every view of every example to the longest sequence in the batch."""
    n_views = len(items[0][1])
    longest = max(len(view) for _, views in items for view in views)
    input_ids = torch.full((len(items), n_views, longest), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(items), n_views, longest), dtype=torch.long)
    for b, (_, views) in enumerate(items):
        for v, ids in enumerate(views):
            input_ids[b, v, : len(ids)] = torch.from_numpy(ids.astype(np.int64))
            attention_mask[b, v, : len(ids)] = 1
    indices = torch.tensor([i for i, _ in items], dtype=torch.long)
    return Batch(input_ids, attention_mask, indices)
