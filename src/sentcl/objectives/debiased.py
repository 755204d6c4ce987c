"""Debiased InfoNCE (Chuang, Robinson, Lin, Torralba & Jegelka, NeurIPS 2020), on SimCSE's views.

In-batch negatives are drawn from the data, so with probability τ⁺ (the class prior) a "negative" shares
the anchor's meaning. The negative term of InfoNCE is corrected with the positive's score:

    g_i = max( (Σ_{j≠i} e^{s_ij/τ} − τ⁺ · N · e^{s_ii/τ}) / (1 − τ⁺),  N · e^{−1/τ} )
    ℓ_i = −log e^{s_ii/τ} / (e^{s_ii/τ} + g_i)

with s the cosine between anchor i (view 0) and candidate j (view 1), N the number of negatives of each
anchor, and the floor N · e^{−1/τ} the smallest the negative term can be for cosines (≥ −1). τ⁺ = 0 is
SimCSE's InfoNCE. Under torch.distributed the candidates of every rank are gathered (with gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix, gather_with_grad


@dataclass
class DebiasedConfig(ContrastiveConfig):
    #: τ⁺: the probability that an in-batch negative is a positive (the paper's class prior)
    class_prior: float = 0.1

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.class_prior < 1:
            raise ConfigError(f"class_prior: τ⁺ must be in [0, 1), got {self.class_prior}")


def debiased_info_nce_loss(
    anchor: torch.Tensor,  # [B, D]
    positive: torch.Tensor,  # [N + 1, D]: each anchor's positive at offset + i, the others its negatives
    temperature: float = 0.05,
    class_prior: float = 0.1,
    offset: int = 0,
) -> torch.Tensor:
    rows = torch.arange(anchor.shape[0], device=anchor.device)
    # e^{(s − 1)/τ}: the common factor e^{1/τ} cancels in the ratio and keeps the exponentials ≤ 1
    logits = (cosine_matrix(anchor, positive).float() - 1.0) / temperature  # [B, N + 1]
    scaled = logits.exp()
    own = scaled[rows, offset + rows]
    negatives = scaled.sum(1) - own
    count = scaled.shape[1] - 1
    corrected = (negatives - class_prior * count * own) / (1.0 - class_prior)
    corrected = corrected.clamp(min=count * math.exp(-2.0 / temperature))  # N·e^{−1/τ}, scaled by e^{−1/τ}
    return (torch.log(own + corrected) - logits[rows, offset + rows]).mean()


class DebiasedInfoNCE(ContrastiveObjective):
    """View 0 anchors, view 1 positives; the other anchors' positives are the negatives."""

    paper = "Chuang, Robinson, Lin, Torralba & Jegelka, Debiased Contrastive Learning, NeurIPS 2020"

    def __init__(self, config: DebiasedConfig | None = None, encoder=None, data=None):
        super().__init__(config or DebiasedConfig(), encoder)

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch=None) -> ObjectiveOutput:
        if embeddings.shape[1] != 2:
            raise ValueError(f"debiased InfoNCE needs 2 views per example, got {embeddings.shape[1]}")
        candidates, offset = gather_with_grad(embeddings[:, 1])
        c = self.config
        loss = debiased_info_nce_loss(embeddings[:, 0], candidates, c.temperature, c.class_prior, offset)
        return ObjectiveOutput(loss=loss, terms={"debiased_info_nce": loss.detach()})
