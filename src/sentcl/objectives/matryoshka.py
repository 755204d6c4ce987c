"""Matryoshka representation learning (Kusupati et al., NeurIPS 2022) as a wrapper around a loss on
embeddings: the loss is the weighted sum of the same loss on the embeddings' prefixes,

    L = Σ_d w_d · L(embeddings[..., :d])

so that every prefix is an embedding of its own (``sentcl evaluate --dim``, the server's ``dimensions``).
Like sentence-transformers' ``MatryoshkaLoss`` it takes any loss; an objective whose loss cannot take a
prefix says so (``Objective.matryoshka_refusal``) and a recipe asking it for prefixes is refused, never
silently trained on the full embedding alone (``tests/objectives/test_matryoshka.py`` checks the whole
registry).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from sentcl.objectives.output import ObjectiveOutput


def matryoshka_loss(
    loss: Callable[[torch.Tensor], ObjectiveOutput],
    embeddings: torch.Tensor,  # [..., D]
    dims: Sequence[int],
    weights: Sequence[float] = (),
) -> ObjectiveOutput:
    """Σ_d w_d · ``loss``(embeddings[..., :d]) with each prefix's loss logged as ``loss@d``; weights all 1
    where none are given (sentence-transformers' default)."""
    if max(dims) > embeddings.shape[-1]:
        raise ValueError(
            f"matryoshka_dims {list(dims)}: the embeddings have {embeddings.shape[-1]} dimensions"
        )
    weights = list(weights) or [1.0] * len(dims)
    total, terms = embeddings.new_zeros(()), {}
    for dim, weight in zip(dims, weights, strict=True):
        part = loss(embeddings[..., :dim])
        total = total + weight * part.loss
        terms[f"loss@{dim}"] = part.loss.detach()
    return ObjectiveOutput(loss=total, terms=terms)
