"""DCLR (Zhou et al., ACL 2022): debiased contrastive learning with instance weights and noise negatives.

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
This is our reading of the paper's description; the noise update follows its stated purpose (maximise
non-uniformity by gradient) with Wang & Isola's uniformity kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.model import SentenceEncoder
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix, gather_with_grad

#: ``complementary_model: start``: a frozen copy of the starting encoder
START = "start"


@dataclass
class DCLRConfig(ContrastiveConfig):
    phi: float = 0.85  # complementary cosine at or above which an in-batch negative is dropped
    noise_times: float = 1.0  # noise negatives per batch example
    noise_steps: int = 1
    noise_step_size: float = 0.1  # β, on the unit sphere
    #: a model folder / run folder / hub id (the paper: a trained SimCSE), or "start": a frozen copy
    #: of the starting encoder. Required.
    complementary_model: str = ""

    def validate(self) -> None:
        super().validate()
        if not -1 <= self.phi <= 1:
            raise ConfigError(f"phi: a cosine threshold in [-1, 1], got {self.phi}")
        if self.noise_times < 0 or self.noise_steps < 0 or self.noise_step_size < 0:
            raise ConfigError("noise_times, noise_steps and noise_step_size must be ≥ 0")
        if not self.complementary_model:
            raise ConfigError(
                "complementary_model: DCLR weighs negatives with a trained encoder (the paper: a SimCSE "
                "model); give its folder or run folder, or 'start' for a frozen copy of the starting encoder"
            )


def refine_noise(noise: torch.Tensor, points: torch.Tensor, steps: int, step_size: float, t: float = 2.0):
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


class DCLR(ContrastiveObjective):
    paper = (
        "Zhou, Zhang, Zhao & Wen, "
        "Debiased Contrastive Learning of Unsupervised Sentence Representations, ACL 2022"
    )

    def __init__(self, config: DCLRConfig | None = None, encoder: SentenceEncoder | None = None, data=None):
        super().__init__(config or DCLRConfig(complementary_model=START), encoder)
        self.config.validate()
        if self.config.complementary_model != START:
            self.complementary = SentenceEncoder.load(self.config.complementary_model).frozen_copy()
        else:
            self.complementary = self.require_encoder().frozen_copy()  # always without dropout

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch=None) -> ObjectiveOutput:
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
        weights = (cosine_matrix(reference, everyone_reference) < c.phi).float()
        rows = torch.arange(len(reference), device=reference.device)
        weights[rows, offset + rows] = 1.0
        count = math.ceil(c.noise_times * len(embeddings))
        noise = torch.randn(count, embeddings.shape[-1], device=embeddings.device)
        noise = refine_noise(noise, candidates, c.noise_steps, c.noise_step_size)
        loss = dclr_loss(embeddings[:, 0], candidates, weights, noise, c.temperature, offset)
        dropped = 1.0 - weights.mean()
        return ObjectiveOutput(
            loss=loss, terms={"dclr": loss.detach(), "dropped_negatives": dropped.detach()}
        )
