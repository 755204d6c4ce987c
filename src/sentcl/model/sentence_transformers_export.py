"""Write the files that let ``SentenceTransformer(path)`` load a sentcl model folder.

The layout is sentence-transformers' classic one (modules.json → Transformer at the root, Pooling in
``1_Pooling``, an optional Dense in ``2_Dense`` for the MLP head, then the model's own Dense and Normalize
modules, model/modules.py), which every version from 2.x to 6.x reads.
Only poolers sentence-transformers can express are exported: ``avg`` → mean pooling,
``cls_before_pooler`` → CLS pooling, ``cls`` → CLS pooling plus the MLP as a tanh Dense layer when
the head is used for encoding, ``max`` / ``avg_sqrt_len`` / ``weighted_avg`` / ``last_token`` → its max,
mean_sqrt_len_tokens, weightedmean and lasttoken modes (model/pooling.py). ``avg_first_last`` and
``avg_top2`` have no sentence-transformers equivalent, so such folders carry no modules.json (sentcl.json
says why).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from sentcl.model.heads import MLPHead
from sentcl.model.pooling import LEGACY_POOLING_KEYS, sentence_transformers_mode


def unsupported_reason(pooler: str) -> str | None:
    if sentence_transformers_mode(pooler) is not None:
        return None
    if pooler == "prompt":
        return "pooler 'prompt' has no sentence-transformers equivalent (it reads the sentence in a template)"
    if pooler.startswith("ditto"):
        return f"pooler {pooler!r} has no sentence-transformers equivalent (it weights tokens by a head)"
    return f"pooler {pooler!r} has no sentence-transformers equivalent (it averages intermediate layers)"


def write_sentence_transformers_files(
    folder: Path,
    pooler: str,
    hidden_size: int,
    max_seq_length: int,
    head: MLPHead | None,
    prompts: dict[str, str] | None = None,
    output_rows: list[dict] | None = None,
    similarity_fn_name: str = "cosine",
    include_prompt: bool = True,
    default_prompt_name: str | None = None,
) -> None:
    """modules.json and the configs beside it; ``output_rows``: the modules.json rows of the Dense and
    Normalize modules already written after the pooling (model/modules.py)."""
    mode = sentence_transformers_mode(pooler)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    # the boolean keys every version reads (2.x on); include_prompt only where it is not the default
    pooling: dict = {"word_embedding_dimension": hidden_size}
    pooling |= {key: mode == theirs for key, theirs in LEGACY_POOLING_KEYS.items()}
    if not include_prompt:
        pooling["include_prompt"] = False
    (folder / "1_Pooling").mkdir()
    _write_json(folder / "1_Pooling" / "config.json", pooling)
    if pooler == "cls" and head is not None and head.used_when_encoding():
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
        dense_dir = folder / "2_Dense"
        dense_dir.mkdir()
        _write_json(
            dense_dir / "config.json",
            {
                "in_features": hidden_size,
                "out_features": hidden_size,
                "bias": True,
                "activation_function": "torch.nn.modules.activation.Tanh",
            },
        )
        weights = {
            "linear.weight": head.dense.weight.detach().to("cpu", torch.float32).contiguous(),
            "linear.bias": head.dense.bias.detach().to("cpu", torch.float32).contiguous(),
        }
        save_file(weights, str(dense_dir / "model.safetensors"))
    _write_json(folder / "modules.json", modules + list(output_rows or []))
    _write_json(
        folder / "sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False}
    )
    # the prompts load there too: SentenceTransformer(path).encode_query / encode(prompt_name=...)
    settings = {
        "prompts": dict(prompts or {}), "default_prompt_name": default_prompt_name,
        "similarity_fn_name": similarity_fn_name,
    }  # fmt: skip
    _write_json(folder / "config_sentence_transformers.json", settings)


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
