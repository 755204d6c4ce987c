"""A tiny encoder and a tokenised batch for the objectives that run passes of their own."""

from __future__ import annotations

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from tests.conftest import SENTENCES


def tiny_encoder(folder, pooler: str = "cls") -> SentenceEncoder:
    return SentenceEncoder.from_config(ModelConfig(name_or_path=str(folder), pooler=pooler))


def batch_of(encoder: SentenceEncoder, sentences=SENTENCES[:6], views: int = 2) -> Batch:
    tokens = encoder.tokenizer(list(sentences), padding=True, return_tensors="pt")
    ids, mask = tokens["input_ids"], tokens["attention_mask"]
    return Batch(
        ids[:, None].repeat(1, views, 1),
        mask[:, None].repeat(1, views, 1),
        indices=ids.new_tensor(range(len(ids))),
    )
