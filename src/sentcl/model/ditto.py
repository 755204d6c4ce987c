"""Ditto's head, chosen on STS-B dev: every (layer, head) of a model ranked in one pass over the split.

Ditto (Chen et al., *Ditto: A Simple and Efficient Approach to Improve Sentence Embeddings*, EMNLP 2023)
weights each token by the diagonal of one attention head; which head is the model's own property (the
reference hard-codes layer 0 head 9 for bert-base-uncased, chosen on its dev results). ``rank_heads`` encodes
STS-B dev once with every layer's attention and scores every head's pooling (model/pooling.py ``ditto``), so
the choice costs one pass, not one per head.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sentcl.data.collate import sorted_batches
from sentcl.errors import MissingDataError
from sentcl.evaluation.sts import correlate, cosine_scores
from sentcl.evaluation.sts_data import load_task
from sentcl.model.pooling import ditto


@torch.no_grad()
def rank_heads(encoder, data_dir: str | Path, batch_size: int = 64) -> list[tuple[float, int, int]]:
    """[(STS-B dev Spearman ×100, layer, head)] for every head of ``encoder``'s backbone, best first."""
    task = load_task(Path(data_dir), "STSBenchmark", ("dev",))
    if task.missing:
        raise MissingDataError(f"STS-B dev: {task.missing}")
    pairs = task.datasets["dev"]
    first, second, gold = pairs.sentences1, pairs.sentences2, pairs.scores
    sentences = sorted(set(first) | set(second))
    backbone = encoder.backbone
    backbone.set_attn_implementation("eager")
    layers, heads = int(backbone.config.num_hidden_layers), int(backbone.config.num_attention_heads)
    vectors = np.zeros((layers, heads, len(sentences), backbone.config.hidden_size), dtype=np.float32)
    was_training = encoder.training
    encoder.eval()
    try:
        for index, batch in sorted_batches(
            encoder.tokenizer, sentences, encoder.max_length, batch_size, False
        ):
            ids, mask = (
                batch.input_ids[:, 0].to(encoder.device),
                batch.attention_mask[:, 0].to(encoder.device),
            )
            out = backbone(
                input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True
            )
            for layer in range(layers):
                diagonal = out.attentions[layer].diagonal(dim1=-2, dim2=-1)  # [N, heads, L]
                for head in range(heads):
                    pooled = ditto(out.hidden_states, diagonal[:, head], mask)
                    vectors[layer, head, index] = pooled.float().cpu().numpy()
    finally:
        encoder.train(was_training)
    row = {sentence: i for i, sentence in enumerate(sentences)}
    left, right = [row[s] for s in first], [row[s] for s in second]
    scores = []
    for layer in range(layers):
        for head in range(heads):
            cosines = cosine_scores(vectors[layer, head, left], vectors[layer, head, right])
            scores.append((correlate(cosines, gold).spearman, layer, head))  # as STSEvaluator scores it
    return sorted(scores, reverse=True)
