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


def trains_three_steps(tiny_model_dir, train_file, run_dir, data_dir, objective: str, **data) -> bool:
    """A 3-step run of ``objective`` on ``train_file`` (mean pooling, the tiny model) writes its model."""
    from sentcl.training import recipe_from_dict, train

    recipe = {
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
        "data": {"train_file": str(train_file), "max_length": 16} | data,
        "objective": {"name": objective},
        "training": {"output_dir": str(run_dir), "batch_size": 4, "learning_rate": 1e-3, "max_steps": 3,
                     "eval_steps": 0, "eval_data_dir": str(data_dir)},
    }  # fmt: skip
    return train(recipe_from_dict(recipe)).steps == 3 and (run_dir / "model").is_dir()
