"""VaSCL (Zhang et al., 2022): virtual augmentation supported contrastive learning.

On top of SimCSE's InfoNCE between dropout views, each anchor h_i gets a *virtual augmentation* found
in the representation space:

1. its neighbourhood N_i: the top-K in-batch neighbours by cosine (K = ``topk``, at most B − 1);
2. the neighbourhood discrimination loss of a perturbed anchor a = h_i + δ,
       ℓ_i(a) = −log e^{cos(a, h_i)/τ} / (e^{cos(a, h_i)/τ} + Σ_{j∈N_i} e^{cos(a, h_j)/τ});
3. δ_i maximises ℓ_i within the ball ‖δ_i‖ ≤ Δ·‖h_i‖, taken as one normalised gradient step from 0
   (the fast-gradient approximation of the inner maximisation);
4. the loss trains the encoder to discriminate its own hardest virtual view from its neighbours:
       L = InfoNCE(view 0, view 1) + w · mean_i ℓ_i(h_i + δ_i*)     (δ* carries no gradient)

Defaults: τ = 0.05, K = 16, Δ = 0.1 (relative to ‖h_i‖), w = 1. This is our reading of the paper:
the perturbation radius is relative so that it does not depend on the backbone's embedding scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.info_nce import info_nce_loss
from sentcl.objectives.similarity import cosine_matrix, fp32_products, full, gather_with_grad


@dataclass
class VaSCLConfig(ContrastiveConfig):
    topk: int = 16
    radius: float = 0.1  # Δ, relative to ‖h_i‖
    virtual_weight: float = 1.0

    def validate(self) -> None:
        super().validate()
        if self.topk < 1:
            raise ConfigError(f"topk: must be at least 1, got {self.topk}")
        if self.radius < 0 or self.virtual_weight < 0:
            raise ConfigError("radius and virtual_weight must be ≥ 0")


def neighbourhood_loss(
    perturbed: torch.Tensor, anchors: torch.Tensor, neighbours: torch.Tensor, temperature: float
) -> torch.Tensor:
    """mean_i ℓ_i: ``perturbed`` [B, D], ``anchors`` [B, D], ``neighbours`` [B, K] indices into anchors."""
    perturbed, anchors = full(perturbed), full(anchors)
    own = F.cosine_similarity(perturbed, anchors, dim=-1)[:, None]  # [B, 1]
    with fp32_products(anchors.device):  # the similarities in fp32 under training.autocast too
        others = torch.einsum(
            "bd,bkd->bk", F.normalize(perturbed, dim=-1), F.normalize(anchors, dim=-1)[neighbours]
        )
    logits = torch.cat([own, others], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(len(anchors), dtype=torch.long, device=anchors.device))


def virtual_perturbation(anchors: torch.Tensor, neighbours: torch.Tensor, radius: float, temperature: float):
    """δ* = Δ‖h‖ · ∇_δ ℓ / ‖∇_δ ℓ‖ at δ = 0, with h detached."""
    base = anchors.detach()
    delta = torch.zeros_like(base, requires_grad=True)
    with torch.enable_grad():
        loss = neighbourhood_loss(base + delta, base, neighbours, temperature)
        (grad,) = torch.autograd.grad(loss, delta)
    return radius * base.norm(dim=-1, keepdim=True) * F.normalize(grad, dim=-1)


class VaSCL(ContrastiveObjective):
    paper = (
        "Zhang et al., Virtual Augmentation Supported Contrastive Learning of Sentence Representations, "
        "Findings of ACL 2022"
    )

    def __init__(self, config: VaSCLConfig | None = None, encoder=None, data=None):
        super().__init__(config or VaSCLConfig(), encoder)

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch=None) -> ObjectiveOutput:
        c = self.config
        if embeddings.shape[1] != 2 or embeddings.shape[0] < 2:
            raise ValueError("VaSCL needs 2 views and at least 2 examples")
        anchors = embeddings[:, 0]
        candidates, offset = gather_with_grad(embeddings[:, 1])
        nce = info_nce_loss(anchors, candidates, temperature=c.temperature, offset=offset)
        k = min(c.topk, len(anchors) - 1)
        with torch.no_grad():
            similarity = cosine_matrix(anchors, anchors)
            similarity.fill_diagonal_(float("-inf"))
            neighbours = similarity.topk(k, dim=1).indices  # [B, K]
        delta = virtual_perturbation(anchors, neighbours, c.radius, c.temperature)
        virtual = neighbourhood_loss(anchors + delta, anchors, neighbours, c.temperature)
        loss = nce + c.virtual_weight * virtual
        return ObjectiveOutput(loss=loss, terms={"info_nce": nce.detach(), "virtual": virtual.detach()})
