"""Single sentences for masked-LM pre-training (``sentcl pretrain``), tokenised once with the word of
every token, so that whole-word masking can select all pieces of a word together."""

from __future__ import annotations

import numpy as np
import torch

from sentcl.data.collate import Batch, TokenizedColumn, collate_views, encode_in_chunks
from sentcl.data.readers import DataError


class SentenceTokens:
    """Sentences tokenised once, with the word index of every token (−1 for special tokens)."""

    def __init__(self, sentences: list[str], tokenizer, max_length: int):
        if not tokenizer.is_fast:
            raise DataError("pre-training needs a fast tokenizer (word ids for whole-word masking)")
        ids, words = [], []
        for encoded in encode_in_chunks(tokenizer, sentences, max_length):
            ids.extend(encoded["input_ids"])
            for i in range(len(encoded["input_ids"])):
                words.append([-1 if w is None else w for w in encoded.word_ids(i)])
        self.ids, self.words = TokenizedColumn(ids), TokenizedColumn(words)
        self.pad_token_id = int(tokenizer.pad_token_id)

    def __len__(self) -> int:
        return len(self.ids)


class SentencesDataset(torch.utils.data.Dataset):
    """The sentences ``indices`` of ``tokens``: item i is one view of sentence ``indices[i]``; batches
    carry ``word_ids`` [B, 1, L] (−1 on special tokens and padding)."""

    n_views = 1

    def __init__(self, tokens: SentenceTokens, indices, source: str):
        self.tokens, self.indices, self.source = tokens, np.asarray(indices, dtype=np.int64), source

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[int, list[np.ndarray]]:
        return i, [self.tokens.ids[int(self.indices[i])]]

    def collate(self, items: list[tuple[int, list[np.ndarray]]]) -> Batch:
        batch = collate_views(items, self.tokens.pad_token_id)
        words = torch.full(batch.input_ids.shape, -1, dtype=torch.long)
        for row, (i, _) in enumerate(items):
            word = self.tokens.words[int(self.indices[i])]
            words[row, 0, : len(word)] = torch.from_numpy(word.astype(np.int64))
        batch.word_ids = words
        return batch

    def lengths(self) -> np.ndarray:
        return self.tokens.ids.lengths()[self.indices]

    def describe(self, rows) -> str:
        shown = [int(self.indices[int(i)]) + 1 for i in rows]
        return f"sentences {shown[:10]}{' …' if len(shown) > 10 else ''} of {self.source}"
