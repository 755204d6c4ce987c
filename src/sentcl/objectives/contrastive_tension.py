"""Contrastive Tension, in-batch variant (Carlsson, Gyllensten, Gogoulou, Hellqvist & Sahlgren, ICLR 2021).

Two independent copies of the encoder, both trained: θ₁ (a copy made at the start) and θ₂ (the encoder, the
one kept). Each sentence of the batch is encoded by both (dropout on), u_i = f_θ₁(x_i), v_i = f_θ₂(x_i); the
pair (u_i, v_i) is the positive, every (u_i, v_j), j ≠ i, a negative, in both directions:

    S_ij = e^{s} · cos(u_i, v_j),   L = ½ [CE(S, I) + CE(Sᵀ, I)]

with a learnable scale s initialised at ln 20 — sentence-transformers'
``ContrastiveTensionLossInBatchNegatives`` (the test equals it on the same batch and weights); the paper's
binary form with sampled negatives is its other loss. The copies pull each other's vectors of the same
sentence together and push the others apart, which undoes the final layers' anisotropy; only θ₂ is kept
(docs/methods/contrastive_tension.md).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError
from sentcl.objectives.base import Objective, ObjectiveConfig, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix


@dataclass
class ContrastiveTensionConfig(ObjectiveConfig):
    #: the similarities' initial scale e^{s} (learned from there; sentence-transformers' default 20)
    scale: float = 20.0

    def validate(self) -> None:
        super().validate()
        if not self.scale > 0:
            raise ConfigError(f"scale: must be positive, got {self.scale}")


def tension_loss(first: torch.Tensor, second: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """½ [CE(S, I) + CE(Sᵀ, I)] with S = e^{log_scale} · cos(first_i, second_j), in fp32."""
    scores = cosine_matrix(first, second) * log_scale.float().exp()
    labels = torch.arange(len(scores), device=scores.device)
    return (F.cross_entropy(scores, labels) + F.cross_entropy(scores.t(), labels)) / 2


class ContrastiveTension(Objective):
    paper = "Carlsson et al., Semantic Re-tuning with Contrastive Tension, ICLR 2021"
    matryoshka_refusal = "compares two models' full vectors with a learned scale"
    config: ContrastiveTensionConfig

    def __init__(self, config: ContrastiveTensionConfig | None = None, encoder: Any = None, data: Any = None):
        super().__init__(config or ContrastiveTensionConfig(), encoder)
        self.twin = copy.deepcopy(self.require_encoder())  # θ₁: trained, never kept
        self.log_scale = nn.Parameter(torch.tensor(math.log(self.config.scale)))

    def forward(self, batch: Any) -> ObjectiveOutput:
        encoder = self.require_encoder()
        ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
        first = self.twin.embed_tokens(ids, mask)
        second = encoder.embed_tokens(ids, mask)
        loss = tension_loss(first, second, self.log_scale)
        return ObjectiveOutput(loss=loss, terms={"contrastive_tension": loss.detach(),
                                                 "scale": self.log_scale.detach().exp()})  # fmt: skip
