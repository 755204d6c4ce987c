"""Alignment and uniformity as the training loss (Wang & Isola, ICML 2020).

On L2-normalised embeddings x (view 0) and y (view 1) of the same examples:

    ℓ_align   = E ‖x_i − y_i‖^α                                (α = 2)
    ℓ_uniform = log E_{i≠j} e^{−t ‖x_i − x_j‖²}                 (t = 2), averaged over the two views
    L = w_align · ℓ_align + λ · ℓ_uniform  [+ w_nce · InfoNCE]   (their defaults: w_align = λ = 1)

Usable alone (``info_nce_weight: 0``) or added to SimCSE's InfoNCE. Uniformity is taken over this
process's batch (under torch.distributed each rank contributes its own term, then gradients average).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.simcse import SimCSE, SimCSEConfig

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class AlignUniformConfig(ContrastiveConfig):
    alpha: float = 2.0
    t: float = 2.0
    align_weight: float = 1.0
    uniform_weight: float = 1.0  # λ
    info_nce_weight: float = 0.0  # > 0 adds SimCSE's InfoNCE

    def validate(self) -> None:
        super().validate()
        for key in ("alpha", "t"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be positive, got {getattr(self, key)}")
        for key in ("align_weight", "uniform_weight", "info_nce_weight"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be ≥ 0, got {getattr(self, key)}")


def align_loss(x: torch.Tensor, y: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    loss: torch.Tensor = (x - y).norm(dim=1).pow(alpha).mean()
    return loss


def uniform_loss(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()


class AlignUniform(ContrastiveObjective):
    config: AlignUniformConfig
    accepted_views = (2,)
    paper = (
        "Wang & Isola, Understanding Contrastive Representation Learning through Alignment and "
        "Uniformity on the Hypersphere, ICML 2020"
    )

    def __init__(
        self,
        config: AlignUniformConfig | None = None,
        encoder: TrainableEncoder | None = None,
        data: Any = None,
    ):
        super().__init__(config or AlignUniformConfig(), encoder)
        c = self.config
        self.info_nce = SimCSE(SimCSEConfig(temperature=c.temperature)) if c.info_nce_weight > 0 else None

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        c = self.config
        if embeddings.shape[1] != 2 or embeddings.shape[0] < 2:
            raise ValueError("alignment/uniformity needs 2 views and at least 2 examples")
        x, y = F.normalize(embeddings[:, 0], dim=-1), F.normalize(embeddings[:, 1], dim=-1)
        align = align_loss(x, y, c.alpha)
        uniform = (uniform_loss(x, c.t) + uniform_loss(y, c.t)) / 2
        loss = c.align_weight * align + c.uniform_weight * uniform
        terms = {"align": align.detach(), "uniform": uniform.detach()}
        if self.info_nce is not None:
            nce = self.info_nce.loss_from_embeddings(embeddings).loss
            loss = loss + c.info_nce_weight * nce
            terms["info_nce"] = nce.detach()
        return ObjectiveOutput(loss=loss, terms=terms)
