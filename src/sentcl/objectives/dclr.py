"""DCLR (Zhou et al., ACL 2022): debiased contrastive learning with instance weights and noise negatives.

Two variants (``variant``). ``reference`` (the default) is the authors' code (RUCAIBox/DCLR,
simcse/models.py ``cl_vat_forward``): Gaussian noise vectors (unnormalised) take ``noise_steps`` = 4 steps of
size 1e-3 along the normalised gradient of the training loss itself (harder negatives); a negative whose
complementary cosine exceeds φ gets its *logit* multiplied by 0 (it stays in the softmax as e⁰); and the loss
is a binary cross-entropy over the softmax of every row, −[y log p + (1 − y) log(1 − p)], averaged over all
B × (N + M) entries. ``paper`` is our reading of the paper's equation, below.

SimCSE's InfoNCE on dropout views, with two changes to the negative set of anchor h_i:

1. **Instance weights against false negatives.** A frozen *complementary* encoder embeds the anchors;
   an in-batch negative j gets weight 0 when the complementary cosine between sentence i and sentence j
   is at least φ, else 1. The paper's complementary model is an already trained SimCSE: its cosines
   tell paraphrases apart. ``complementary_model`` is required: a model folder or a sentcl run folder
   (its best model), or ``start`` for a frozen copy of the starting encoder, asked for by name. There
   is no silent default: on a raw MLM encoder the starting model's cosines are all high (anisotropy),
   every in-batch negative lands above φ, and the loss is trained on nothing.
2. **Noise-based negatives against anisotropy.** M = ⌈noise_times · B⌉ vectors are drawn from a
   Gaussian, then moved by ``noise_steps`` normalised gradient-*ascent* steps of size β on the
   non-uniformity of the noise with respect to the batch,
       L_nu(ĥ) = log mean_{k,j} exp(−t ‖ĥ_k − h_j‖²)    (unit vectors, t = 2),
   which draws them into the dense regions of the representation space; they join the negatives with
   weight 1 and carry no gradient.

    ℓ_i = −log e^{s_ii/τ} / (Σ_j w_ij e^{s_ij/τ} + Σ_k e^{sim(h_i, ĥ_k)/τ}),   w_ii = 1

DCLR's defaults: φ = 0.85 (0.9 for some backbones), noise_times 1, τ = 0.05, batch 128, 3 epochs.
The ``paper`` variant's noise update follows the paper's stated purpose (maximise non-uniformity by
gradient) with Wang & Isola's uniformity kernel, one 0.1-radian step on the unit sphere by default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.model import SentenceEncoder, TrainableEncoder
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix, gather_with_grad

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder

#: ``complementary_model: start``: a frozen copy of the starting encoder
START = "start"


#: each variant's noise schedule: (steps, step size)
NOISE_DEFAULTS = {"reference": (4, 1e-3), "paper": (1, 0.1)}


@dataclass
class DCLRConfig(ContrastiveConfig):
    #: reference: the authors' code; paper: our reading of the paper's equation (module docstring)
    variant: Literal["reference", "paper"] = "reference"
    phi: float = 0.85  # complementary cosine above which an in-batch negative is dropped
    noise_times: float = 1.0  # noise negatives per batch example
    #: steps and step size of the noise update; unset: the variant's (reference 4 × 1e-3 along the loss's
    #: gradient on unnormalised Gaussians; paper 1 × 0.1 rad along the non-uniformity's on the sphere)
    noise_steps: int | None = None
    noise_step_size: float | None = None
    #: a model folder / run folder / hub id (the paper: a trained SimCSE), or "start": a frozen copy
    #: of the starting encoder. Required.
    complementary_model: str = ""

    def validate(self) -> None:
        super().validate()
        if not -1 <= self.phi <= 1:
            raise ConfigError(f"phi: a cosine threshold in [-1, 1], got {self.phi}")
        if self.noise_times < 0 or (self.noise_steps or 0) < 0 or (self.noise_step_size or 0) < 0:
            raise ConfigError("noise_times, noise_steps and noise_step_size must be ≥ 0")
        if not self.complementary_model:
            raise ConfigError(
                "complementary_model: DCLR weighs negatives with a trained encoder (the paper: a SimCSE "
                "model); give its folder or run folder, or 'start' for a frozen copy of the starting encoder"
            )


def refine_noise(
    noise: torch.Tensor, points: torch.Tensor, steps: int, step_size: float, t: float = 2.0
) -> torch.Tensor:
    """Gradient ascent on the non-uniformity of ``noise`` w.r.t. ``points`` (both normalised, no grad out)."""
    points = F.normalize(points.detach(), dim=-1)
    noise = F.normalize(noise.detach(), dim=-1)
    if len(noise) == 0:
        return noise
    for _ in range(steps):
        noise.requires_grad_(True)
        with torch.enable_grad():
            distances = torch.cdist(noise, points).pow(2)
            non_uniformity = torch.logsumexp(-t * distances.flatten(), 0) - math.log(distances.numel())
            (grad,) = torch.autograd.grad(non_uniformity, noise)
        noise = F.normalize(noise.detach() + step_size * F.normalize(grad, dim=-1), dim=-1)
    return noise.detach()


def dclr_loss(
    anchors: torch.Tensor,  # [B, D]
    positives: torch.Tensor,  # [N, D]
    weights: torch.Tensor,  # [B, N] in {0, 1}; 1 on each anchor's own positive
    noise: torch.Tensor,  # [M, D]
    temperature: float,
    offset: int = 0,
) -> torch.Tensor:
    logits = cosine_matrix(anchors, positives) / temperature
    logits = logits.masked_fill(weights == 0, float("-inf"))
    if len(noise):
        logits = torch.cat([logits, cosine_matrix(anchors, noise) / temperature], dim=1)
    rows = torch.arange(len(anchors), device=anchors.device)
    return F.cross_entropy(logits, offset + rows)


def reference_noise(
    anchors: torch.Tensor,  # [B, D]
    candidates: torch.Tensor,  # [N, D]
    count: int,
    temperature: float,
    steps: int,
    step_size: float,
    offset: int = 0,
) -> torch.Tensor:
    """The authors' noise negatives: ``count`` standard Gaussian vectors (not normalised), each moved
    ``steps`` times by ``step_size`` along its normalised gradient of InfoNCE over [batch, noise] (ascent:
    towards harder negatives); NaNs become 0. No gradient flows out (the reference's update is detached)."""
    noise = torch.randn(count, anchors.shape[-1], device=anchors.device)
    if count == 0:
        return noise
    anchors, candidates = anchors.detach(), candidates.detach()
    fixed = cosine_matrix(anchors, candidates) / temperature
    rows = offset + torch.arange(len(anchors), device=anchors.device)
    for _ in range(steps):
        noise.requires_grad_(True)
        with torch.enable_grad():
            logits = torch.cat([fixed, cosine_matrix(anchors, noise) / temperature], dim=1)
            (grad,) = torch.autograd.grad(F.cross_entropy(logits, rows), noise)
        noise = noise.detach() + step_size * grad / grad.norm(dim=-1, keepdim=True)
        noise = torch.nan_to_num(noise, nan=0.0)
    return noise.detach()


def reference_dclr_loss(
    anchors: torch.Tensor,  # [B, D]
    candidates: torch.Tensor,  # [N, D]
    weights: torch.Tensor,  # [B, N] in {0, 1}; 1 on each anchor's own positive
    noise: torch.Tensor,  # [M, D]
    temperature: float,
    offset: int = 0,
) -> torch.Tensor:
    """The authors' loss: the logits [batch, noise] / τ, a dropped negative's multiplied by 0; softmax per
    row; −[y log p + (1 − y) log(1 − p)] averaged over every entry of the B × (N + M) matrix."""
    logits = cosine_matrix(anchors, candidates) / temperature
    if len(noise):
        logits = torch.cat([logits, cosine_matrix(anchors, noise) / temperature], dim=1)
        weights = torch.cat([weights, weights.new_ones(len(anchors), len(noise))], dim=1)
    log_p = torch.log_softmax(logits * weights, dim=-1)
    rows = torch.arange(len(anchors), device=anchors.device)
    positive = torch.zeros_like(log_p, dtype=torch.bool)
    positive[rows, offset + rows] = True
    # log(1 − p) from log p without cancellation; the positives' entries never use it (the reference's
    # 0 · log(1 − p) there is NaN once p rounds to 1)
    safe = log_p.masked_fill(positive, -1.0)
    log_not_p = torch.where(safe < -math.log(2), torch.log1p(-safe.exp()), torch.log(-torch.expm1(safe)))
    return -torch.where(positive, log_p, log_not_p).mean()


class DCLR(ContrastiveObjective):
    config: DCLRConfig
    accepted_views = (2,)
    paper = (
        "Zhou, Zhang, Zhao & Wen, "
        "Debiased Contrastive Learning of Unsupervised Sentence Representations, ACL 2022"
    )

    def __init__(
        self, config: DCLRConfig | None = None, encoder: SentenceEncoder | None = None, data: Any = None
    ):
        super().__init__(config or DCLRConfig(complementary_model=START), encoder)
        self.config.validate()
        self.complementary: TrainableEncoder
        if self.config.complementary_model != START:
            self.complementary = SentenceEncoder.load(self.config.complementary_model).frozen_copy()
        else:
            self.complementary = self.require_encoder().frozen_copy()  # always without dropout

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        if batch is None:
            raise ValueError("DCLR needs the batch's token ids for its complementary encoder")
        c = self.config
        if embeddings.shape[1] != 2:
            raise ValueError(f"DCLR needs 2 views per example, got {embeddings.shape[1]}")
        with torch.no_grad():
            reference = self.complementary.encode_tokens(batch.input_ids[:, 0], batch.attention_mask[:, 0])
            reference = reference.float()
        candidates, offset = gather_with_grad(embeddings[:, 1])
        everyone_reference, _ = gather_with_grad(reference)
        weights = (cosine_matrix(reference, everyone_reference) <= c.phi).float()
        rows = torch.arange(len(reference), device=reference.device)
        weights[rows, offset + rows] = 1.0
        default_steps, default_size = NOISE_DEFAULTS[c.variant]
        steps = default_steps if c.noise_steps is None else c.noise_steps
        size = default_size if c.noise_step_size is None else c.noise_step_size
        if c.variant == "reference":
            count = int(c.noise_times * len(candidates))  # the global batch, as the reference gathers first
            noise = reference_noise(embeddings[:, 0], candidates, count, c.temperature, steps, size, offset)
            loss = reference_dclr_loss(embeddings[:, 0], candidates, weights, noise, c.temperature, offset)
        else:
            count = math.ceil(c.noise_times * len(embeddings))
            noise = torch.randn(count, embeddings.shape[-1], device=embeddings.device)
            noise = refine_noise(noise, candidates, steps, size)
            loss = dclr_loss(embeddings[:, 0], candidates, weights, noise, c.temperature, offset)
        dropped = 1.0 - weights.mean()
        return ObjectiveOutput(
            loss=loss, terms={"dclr": loss.detach(), "dropped_negatives": dropped.detach()}
        )
