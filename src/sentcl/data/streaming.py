"""``data.streaming: true``: train from a file larger than memory.

The file is read as a stream every epoch (``readers.iter_records``: line by line, Parquet batch by batch);
nothing but the current shuffle block and the label vocabulary is held. The epoch's order is a *block
shuffle*: rows are read in file order in blocks of ``data.shuffle_buffer``, and each block is permuted by
a generator seeded with (training seed, epoch, block). Batches are tokenised as they are formed. This is
the order Hugging Face ``datasets`` streaming gives with a shuffle buffer: rows far apart in the file never
share a batch, so a file sorted by topic or source should be shuffled once on disk first (or use a buffer
larger than its runs).

Before the first step, one validation pass reads every row with the same checks and ``file:line`` errors
as the in-memory readers, counts the rows (so epochs, the schedule and the progress bar are known) and
collects the label columns' vocabulary (EASE's entities). A run therefore fails on bad input before it
trains, never in the middle.

The order is a function of (seed, epoch, position) alone, so exact resume needs no saved state: a resumed
run re-reads the epoch up to its position (reading, not tokenising) and goes on with the very batches an
uninterrupted run would have seen.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

from sentcl.config import ConfigError
from sentcl.data.collate import Batch, collate_views, rank_slice
from sentcl.data.readers import DataError, iter_records
from sentcl.data.recipe import DataConfig


class StreamingDataset:
    """A training file streamed every epoch; see the module's docstring."""

    def __init__(self, path: str | Path, config: DataConfig, tokenizer, shuffle_buffer: int):
        self.path = Path(path)
        self.header = config.header
        self.tokenizer, self.max_length, self.shuffle_buffer = tokenizer, config.max_length, shuffle_buffer
        self.unit = "row" if self.path.suffix.lower() == ".parquet" else "line"
        count, width, labels = 0, 0, set[str]()
        for _, cells in iter_records(self.path, self.header):  # the validation pass
            count += 1
            width = len(cells)
            labels.update(cells[config.text_columns :] if config.text_columns else ())
        self.length, self.n_columns = count, width
        if config.text_columns is not None and config.text_columns > width:
            raise DataError(f"{path}: data.text_columns is {config.text_columns} but the rows have {width}")
        self.text_columns = config.text_columns or width
        self.n_views = (
            config.n_views if config.n_views is not None else (2 if self.text_columns == 1 else width)
        )
        if self.text_columns > 1 and self.n_views != self.text_columns:
            raise DataError(f"{path}: {self.text_columns} columns but {self.n_views} views were asked for")
        self.label_columns = width - self.text_columns
        self.label_names: list[str] = sorted(labels)
        self.label_index = {name: i for i, name in enumerate(self.label_names)}
        if tokenizer.pad_token_id is None:
            raise DataError(f"{path}: the tokenizer has no pad token")
        self.pad_token_id = int(tokenizer.pad_token_id)

    def __len__(self) -> int:
        return self.length

    def epoch_rows(self, seed: int, epoch: int):
        """(line, cells) of one epoch in its block-shuffled order."""
        rows = iter_records(self.path, self.header)
        for block in itertools.count():
            chunk = list(itertools.islice(rows, self.shuffle_buffer))
            if not chunk:
                return
            order = np.random.default_rng([seed, epoch, block]).permutation(len(chunk))
            yield from (chunk[i] for i in order)

    def epoch_batches(
        self, seed: int, epoch: int, start: int, batch_size: int, rank: int = 0, world: int = 1
    ):
        """This rank's slice (equal slices for the ``world`` ranks, a short last batch cut to a multiple of
        ``world``) of every global batch of ``epoch`` from batch ``start`` on."""
        rows = self.epoch_rows(seed, epoch)
        for _ in itertools.islice(rows, start * batch_size):  # resume: read, do not tokenise
            pass
        while True:
            batch = list(itertools.islice(rows, batch_size))
            if not batch:
                return
            yield self.collate(rank_slice(batch, rank, world))

    def collate(self, rows: list[tuple[int, tuple[str, ...]]]) -> Batch:
        columns = [
            self.tokenizer([cells[c] for _, cells in rows], truncation=True, max_length=self.max_length)[
                "input_ids"
            ]
            for c in range(self.text_columns)
        ]
        items = []
        for r, (line, _) in enumerate(rows):
            ids = [np.asarray(column[r], dtype=np.int64) for column in columns]
            items.append((line, ids * self.n_views if len(ids) == 1 else ids))
        batch = collate_views(items, self.pad_token_id)
        if self.label_columns:
            labels = [[self.label_index[name] for name in cells[self.text_columns :]] for _, cells in rows]
            batch.labels = torch.tensor(labels, dtype=torch.long)
        return batch

    def describe(self, lines) -> str:
        """Where the examples of a batch come from (its ``indices`` are their source lines)."""
        shown = [int(x) for x in lines]
        return f"{self.path} {self.unit}s {shown[:10]}{' …' if len(shown) > 10 else ''}"


def check_streaming(config: DataConfig, training) -> None:
    """What ``data.streaming`` cannot do yet, refused by key before anything is read."""
    refused = {
        "data.group_by_length": config.group_by_length,
        "data.augment": config.augment != "none",
        "training.select_by": training.select_by != "stsb-dev",  # its held-out split needs the rows
        "training.child_tuning": training.child_tuning.mode == "D",  # its Fisher sample too
    }
    for key, on in refused.items():
        if on:
            raise ConfigError(f"{key}: not available with data.streaming (the rows are not held in memory)")
