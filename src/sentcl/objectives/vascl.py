"""VaSCL (Zhang et al., 2022): virtual augmentation supported contrastive learning.

Two variants (``variant``). ``reference`` (the default) is the authors' code (amazon-research/
sentence-representations, VaSCL/): a contrast head g (Linear D→D, ReLU, Linear D→128, no biases; trained at
``head_lr_scale`` × the learning rate) maps the pooled embeddings to unit features; the main loss is the
symmetric NT-Xent of the two dropout views' features (τ = 0.05); the neighbourhood N_i is the top-K
(K = 16) in-batch neighbours of view 0 by inner product; the virtual augmentation perturbs the *detached*
embedding h_i by a vector of fixed length ε = 15, its direction found by one power-iteration step from a
random direction on the loss of the perturbed feature g(h_i + ξd) against g(h_i) and N_i's features; the
virtual loss is the bidirectional NT-Xent of [g(h_i), g(h_i + εd)] over the hard negatives N_i only. As the
embeddings are detached, the virtual term trains the contrast head alone. ``paper`` is our earlier reading:

On top of SimCSE's InfoNCE between dropout views, each anchor h_i gets a *virtual augmentation* found
in the representation space:

1. its neighbourhood N_i: the top-K in-batch neighbours by cosine (K = ``topk``, at most B − 1);
2. the neighbourhood discrimination loss of a perturbed anchor a = h_i + δ,
       ℓ_i(a) = −log e^{cos(a, h_i)/τ} / (e^{cos(a, h_i)/τ} + Σ_{j∈N_i} e^{cos(a, h_j)/τ});
3. δ_i maximises ℓ_i within the ball ‖δ_i‖ ≤ Δ·‖h_i‖, taken as one normalised gradient step from 0
   (the fast-gradient approximation of the inner maximisation);
4. the loss trains the encoder to discriminate its own hardest virtual view from its neighbours:
       L = InfoNCE(view 0, view 1) + w · mean_i ℓ_i(h_i + δ_i*)     (δ* carries no gradient)

Defaults: τ = 0.05, K = 16, Δ = 0.1 (relative to ‖h_i‖), w = 1: the radius is relative so that it does
not depend on the backbone's embedding scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.nt_xent import nt_xent_loss
from sentcl.objectives.simcse import info_nce_loss
from sentcl.objectives.similarity import cosine_matrix, fp32_products, full, gather_with_grad

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder

#: each variant's radius: the reference's ε = ξ = 15 (absolute), the paper reading's 0.1 × ‖h_i‖
RADIUS = {"reference": 15.0, "paper": 0.1}


@dataclass
class VaSCLConfig(ContrastiveConfig):
    #: reference: the authors' code; paper: our earlier reading (module docstring)
    variant: Literal["reference", "paper"] = "reference"
    topk: int = 16
    #: ε; unset: the variant's (reference: 15, an absolute length; paper: 0.1, relative to ‖h_i‖)
    radius: float | None = None
    virtual_weight: float = 1.0
    #: reference: the contrast head's output size, and its learning rate as a multiple of the run's
    #: (main.py: --lr_scale 100; scripts/run_vascl.sh: 100000 with lr 5e-6)
    head_dim: int = 128
    head_lr_scale: float = 100.0

    def validate(self) -> None:
        super().validate()
        if self.topk < 1:
            raise ConfigError(f"topk: must be at least 1, got {self.topk}")
        if (self.radius or 0) < 0 or self.virtual_weight < 0:
            raise ConfigError("radius and virtual_weight must be ≥ 0")
        if self.head_dim < 1 or self.head_lr_scale <= 0:
            raise ConfigError("head_dim and head_lr_scale must be positive")


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


def virtual_perturbation(
    anchors: torch.Tensor, neighbours: torch.Tensor, radius: float, temperature: float
) -> torch.Tensor:
    """δ* = Δ‖h‖ · ∇_δ ℓ / ‖∇_δ ℓ‖ at δ = 0, with h detached."""
    base = anchors.detach()
    delta = torch.zeros_like(base, requires_grad=True)
    with torch.enable_grad():
        loss = neighbourhood_loss(base + delta, base, neighbours, temperature)
        (grad,) = torch.autograd.grad(loss, delta)
    scaled: torch.Tensor = radius * base.norm(dim=-1, keepdim=True) * F.normalize(grad, dim=-1)
    return scaled


def hard_negative_loss(
    features: torch.Tensor,  # [B, F] unit features g(h)
    perturbed: torch.Tensor,  # [B, F] unit features g(h + ξd) or g(h + εd)
    neighbours: torch.Tensor,  # [B, K] indices into the batch
    temperature: float,
    bidirectional: bool,
) -> torch.Tensor:
    """The reference's VaSCL_NUniDir / VaSCL_NBiDir: −log e^{⟨f_i, p_i⟩/τ} / (e^{⟨f_i, p_i⟩/τ} + Σ_{j∈N_i} …)
    with the hard negatives only. One direction: the perturbed p_i against the originals f_j. Both: each of
    f_i and p_i against f_j and p_j of its neighbours, averaged over the 2B anchors."""
    positive = (features * perturbed).sum(-1) / temperature  # [B]
    if not bidirectional:
        negatives = torch.einsum("bf,bkf->bk", perturbed, features[neighbours]) / temperature
        return (torch.logsumexp(torch.cat([positive[:, None], negatives], 1), 1) - positive).mean()
    both = torch.cat([features, perturbed])  # [2B, F]
    index = torch.cat([neighbours, neighbours + len(features)], 1)  # [B, 2K]: the neighbours in both halves
    anchors_negatives = torch.einsum("af,akf->ak", both, both[torch.cat([index, index])]) / temperature
    positives = torch.cat([positive, positive])
    return (torch.logsumexp(torch.cat([positives[:, None], anchors_negatives], 1), 1) - positives).mean()


class ContrastHead(nn.Sequential):
    """The reference's contrast head: Linear D→D, ReLU, Linear D→F, no biases; trained faster (lr_scale)."""

    def __init__(self, dimension: int, features: int, lr_scale: float):
        super().__init__(
            nn.Linear(dimension, dimension, bias=False), nn.ReLU(), nn.Linear(dimension, features, bias=False)
        )
        self.lr_scale = lr_scale  # read by training.optim.build_optimizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projected: torch.Tensor = super().forward(x)  # type: ignore[no-untyped-call]  # nn.Sequential's
        return F.normalize(projected, dim=-1)


class VaSCL(ContrastiveObjective):
    config: VaSCLConfig
    paper = (
        "Zhang et al., Virtual Augmentation Supported Contrastive Learning of Sentence Representations, "
        "Findings of ACL 2022"
    )

    def __init__(
        self,
        config: VaSCLConfig | None = None,
        encoder: TrainableEncoder | None = None,
        data: Any = None,
        dimension: int | None = None,
    ):
        """``dimension``: the embeddings' size where there is no ``encoder`` (for the reference's head)."""
        super().__init__(config or VaSCLConfig(), encoder)
        c = self.config
        self.radius = RADIUS[c.variant] if c.radius is None else c.radius
        self.head = None
        if c.variant == "reference":
            size = encoder.output_dim if encoder is not None else dimension
            if size is None:
                raise ValueError("VaSCL's reference variant needs the encoder (or dimension=) for its head")
            self.head = ContrastHead(size, c.head_dim, c.head_lr_scale)

    def refuses_matryoshka(self) -> str | None:
        if self.config.variant == "reference":
            return "(variant: reference) maps the full embedding through its contrast head"
        return None

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        if self.config.variant == "reference":
            return self.reference_loss(embeddings)
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
        delta = virtual_perturbation(anchors, neighbours, self.radius, c.temperature)
        virtual = neighbourhood_loss(anchors + delta, anchors, neighbours, c.temperature)
        loss = nce + c.virtual_weight * virtual
        return ObjectiveOutput(loss=loss, terms={"info_nce": nce.detach(), "virtual": virtual.detach()})

    def reference_loss(self, embeddings: torch.Tensor) -> ObjectiveOutput:
        """The authors' training step (VaSCL/training.py ``train_step``); the head runs in fp32 under
        ``training.autocast`` too, as every similarity does."""
        with fp32_products(embeddings.device):
            return self._reference_loss(full(embeddings))

    def _reference_loss(self, embeddings: torch.Tensor) -> ObjectiveOutput:
        c = self.config
        if embeddings.shape[1] != 2 or embeddings.shape[0] < 2:
            raise ValueError("VaSCL needs 2 views and at least 2 examples")
        head = self.head
        assert head is not None, "the reference variant builds its contrast head"
        features = head(embeddings.reshape(-1, embeddings.shape[-1])).reshape(*embeddings.shape[:2], -1)
        everyone, offset = gather_with_grad(features)
        nce = nt_xent_loss(features, everyone, c.temperature, offset)
        anchors = embeddings[:, 0].detach()  # the reference perturbs the detached embeddings
        with torch.no_grad():
            similarity = anchors @ anchors.T  # inner products, as the reference ranks the neighbours
            similarity.fill_diagonal_(float("-inf"))
            neighbours = similarity.topk(min(c.topk, len(anchors) - 1), dim=1).indices  # [B, K]
            original = head(anchors)
        direction = F.normalize(torch.rand_like(anchors) - 0.5, dim=-1)
        direction.requires_grad_(True)
        with torch.enable_grad():
            first = hard_negative_loss(original, head(anchors + self.radius * direction), neighbours,
                                       c.temperature, bidirectional=False)  # fmt: skip
            (grad,) = torch.autograd.grad(first, direction)
        direction = F.normalize(grad, dim=-1)
        perturbed = head(anchors + self.radius * direction)
        virtual = hard_negative_loss(original, perturbed, neighbours, c.temperature, bidirectional=True)
        loss = nce + c.virtual_weight * virtual
        return ObjectiveOutput(loss=loss, terms={"nt_xent": nce.detach(), "virtual": virtual.detach()})
