"""SimCSE's contrastive objective (Gao, Yao & Chen, EMNLP 2021), unsupervised and supervised.

    ℓ_i = −log  e^{sim(h_i, h_i⁺)/τ} / ( Σ_j e^{sim(h_i, h_j⁺)/τ} + Σ_j α^{[i=j]} e^{sim(h_i, h_j⁻)/τ} )

* unsupervised: V=2 views of the same sentence (dropout is the augmentation), in-batch negatives;
* supervised: V=2 (anchor, entailment) or V=3 (+ contradiction as hard negative). SimCSE's code adds
  ``hard_negative_weight`` to the logit of each anchor's *own* hard negative; that is log α, so we take
  α and add log α (α = 1 adds nothing, the paper's setting).
sim is cosine similarity, τ the temperature (0.05). Under torch.distributed the positives and hard
negatives of every rank are gathered (with gradient), so the negatives are the global batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix, gather_with_grad

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class SimCSEConfig(ContrastiveConfig):
    #: α: weight of each anchor's own hard negative in the denominator (V=3 only); 1 = unweighted.
    hard_negative_weight: float = 1.0

    def validate(self) -> None:
        super().validate()
        if not self.hard_negative_weight > 0:
            raise ConfigError(f"hard_negative_weight: α must be positive, got {self.hard_negative_weight}")


def info_nce_loss(
    anchor: torch.Tensor,  # [B, D]
    positive: torch.Tensor,  # [N, D]; N = B, or the global batch with positives gathered from all ranks
    hard_negative: torch.Tensor | None = None,  # [N, D]
    temperature: float = 0.05,
    hard_negative_weight: float = 1.0,
    offset: int = 0,  # row of anchor[0]'s positive (and hard negative) among the N candidates
) -> torch.Tensor:
    rows = torch.arange(anchor.shape[0], device=anchor.device)
    logits = cosine_matrix(anchor, positive) / temperature  # [B, N]; positives at (i, offset + i)
    if hard_negative is not None:
        negatives = cosine_matrix(anchor, hard_negative) / temperature  # [B, N]
        if hard_negative_weight != 1.0:
            weight = torch.zeros_like(negatives)
            weight[rows, offset + rows] = math.log(hard_negative_weight)
            negatives = negatives + weight
        logits = torch.cat([logits, negatives], dim=1)  # [B, 2N]
    return F.cross_entropy(logits, offset + rows)


class SimCSE(ContrastiveObjective):
    """SimCSE's loss on encoded views: view 0 anchors, view 1 positives, view 2 hard negatives."""

    config: SimCSEConfig

    paper = "Gao, Yao & Chen, SimCSE: Simple Contrastive Learning of Sentence Embeddings, EMNLP 2021"
    accepted_views = (2, 3)

    def __init__(
        self, config: SimCSEConfig | None = None, encoder: TrainableEncoder | None = None, data: Any = None
    ):
        super().__init__(config or SimCSEConfig(), encoder)

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        views = embeddings.shape[1]
        if views not in (2, 3):
            raise ValueError(f"SimCSE needs 2 or 3 views per example, got {views}")
        candidates, offset = gather_with_grad(embeddings[:, 1:])  # [N, V − 1, D]: every rank's candidates
        loss = info_nce_loss(
            embeddings[:, 0],
            candidates[:, 0],
            candidates[:, 1] if views == 3 else None,
            temperature=self.config.temperature,
            hard_negative_weight=self.config.hard_negative_weight,
            offset=offset,
        )
        return ObjectiveOutput(loss=loss, terms={"info_nce": loss.detach()})
