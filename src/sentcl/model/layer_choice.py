"""Which layers a layer-reduced student keeps: every subset of a teacher's layers scored on STS-B dev as it
starts (untrained), best first.

Which layers to keep decides most of a small student's quality: of all-MiniLM-L6-v2's six layers, keeping
0, 2, 4 starts at STS-B dev 73.81 and 0, 3, 5 at 84.21 (docs/students.md), a gap that 2,000 steps of
distillation from the worse start did not close. ``rank_layer_subsets`` makes that choice a measured one (on
STS-B dev, where sentcl makes its choices; never on the data a report uses).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import torch
from tqdm.auto import tqdm

from sentcl.config import ConfigError
from sentcl.evaluation import STSEvaluator
from sentcl.model.encoder import ModelConfig, SentenceEncoder


@torch.no_grad()
def rank_layer_subsets(
    name_or_path: str, size: int, data_dir: str | Path, pooler: str = "avg"
) -> list[tuple[float, tuple[int, ...]]]:
    """[(STS-B dev Spearman ×100, kept layers)] for every ``size`` of the model's layers (in order), best
    first: each the student ``model.keep_layers`` would start from, read with ``pooler``."""
    encoder = SentenceEncoder.from_config(ModelConfig(name_or_path, pooler=pooler)).eval()
    body = getattr(encoder.backbone, "encoder", None)
    stack = getattr(body, "layer", None)
    if body is None or not isinstance(stack, torch.nn.ModuleList):
        raise ConfigError(f"{name_or_path}: {type(encoder.backbone).__name__} has no encoder.layer stack")
    total = len(stack)
    if not 0 < size <= total:
        raise ConfigError(f"size: a student keeps 1…{total} of the model's {total} layers, not {size}")
    evaluate = STSEvaluator(Path(data_dir), "stsb-dev")
    config, scores = encoder.backbone.config, []
    try:
        subsets = list(itertools.combinations(range(total), size))
        for layers in tqdm(subsets, desc="layer subsets on STS-B dev"):
            body.layer = torch.nn.ModuleList([stack[i] for i in layers])
            config.num_hidden_layers = size
            scores.append((float(evaluate(encoder)["stsb_dev_spearman"]), layers))
    finally:  # the loaded model is whole again
        body.layer, config.num_hidden_layers = stack, total
    return sorted(scores, key=lambda row: -row[0])
