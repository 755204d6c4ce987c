"""AnglE (Li & Li, ACL 2024): CoSENT's ranking of labelled pairs on an angle score, with in-batch negatives.

For pairs (u_i, v_i) with labels y_i (objectives/cosent.py makes them: labelled pairs, or from NLI triplets
the entailment pairs labelled 1 and the contradiction pairs labelled 0):

    L = w_cos · CoSENT_λc(cos) + w_angle · CoSENT_λa(s_angle)
        + (w_ibn · InfoNCE(z, z⁺) + w_cln · InfoNCE(z, [z⁺; z⁻])) / 2

* s_angle(u, v) = |Σ_k Re(u_k / v_k) + Im(u_k / v_k)| · |v| / |u|, each vector split into a real half and an
  imaginary half (u = a + ib, v = c + id): the reference code's ``angle_loss`` with its ``sum`` pooling;
  equal to |cos(u, v) + sin-part| after L2 normalisation, sentence-transformers' ``pairwise_angle_sim``;
* the in-batch terms (only with triplets: anchor z, entailment z⁺, contradiction z⁻) at τ = ``temperature``
  (1/20, the reference's ``ibn_tau``): without and with the hard negatives, averaged, as the reference's
  format C; they are SimCSE's unsupervised-pair and supervised losses;
* defaults: the reference's ``AngleLoss`` (w_cos 0, w_ibn 1, w_cln 1, w_angle 0.02, every scale 20).

Where the paper and the code differ, sentcl follows the code (as sentence-transformers' ``AnglELoss`` does):
the paper's Eq. 3 writes the angle objective with the opposite subtraction order, for an angle difference
Δθ (smaller when closer); the code's score is larger for closer pairs and is ranked like a cosine (see
docs/methods/angle.md). Equal to sentence-transformers' ``AnglELoss`` (the angle term alone) and
``CoSENTLoss`` (the cosine term alone) on the same embeddings and labels (tests/objectives/test_angle.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.cosent import cosent_loss, label_values, labelled_pairs
from sentcl.objectives.simcse import info_nce_loss

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class AnglEConfig(ContrastiveConfig):
    #: τ of the in-batch terms (the reference's ibn_tau 20 = 1 / 0.05)
    temperature: float = 0.05
    cosine_weight: float = 0.0
    angle_weight: float = 0.02
    ibn_weight: float = 1.0
    cln_weight: float = 1.0
    cosine_scale: float = 20.0
    angle_scale: float = 20.0

    def validate(self) -> None:
        super().validate()
        for key in ("cosine_weight", "angle_weight", "ibn_weight", "cln_weight"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be ≥ 0, got {getattr(self, key)}")
        for key in ("cosine_scale", "angle_scale"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be positive, got {getattr(self, key)}")
        if not (self.cosine_weight or self.angle_weight or self.ibn_weight or self.cln_weight):
            raise ConfigError("cosine_weight, angle_weight, ibn_weight, cln_weight: at least one must be > 0")


def angle_scores(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """[N] AnglE scores of the pairs (left_i, right_i): the summed real and imaginary parts of the
    element-wise complex quotient left / right, scaled by |right| / |left| and taken in absolute value."""
    if left.shape[-1] % 2:  # an odd dimension: one zero appended, as sentence-transformers does
        left, right = F.pad(left, (0, 1)), F.pad(right, (0, 1))
    a, b = left.float().chunk(2, dim=-1)
    c, d = right.float().chunk(2, dim=-1)
    denominator = (c**2 + d**2).sum(-1)  # |right|²
    real = ((a * c + b * d).sum(-1)) / denominator
    imaginary = ((b * c - a * d).sum(-1)) / denominator
    ratio = left.float().norm(dim=-1) / right.float().norm(dim=-1)
    difference: torch.Tensor = ((real + imaginary) / ratio).abs()
    return difference


class AnglE(ContrastiveObjective):
    """AnglE on labelled pairs or NLI triplets (see the module's docstring)."""

    config: AnglEConfig
    paper = "Li & Li, AnglE-optimized Text Embeddings, ACL 2024"

    def __init__(
        self, config: AnglEConfig | None = None, encoder: TrainableEncoder | None = None, data: Any = None
    ):
        super().__init__(config or AnglEConfig(), encoder)
        self.values = label_values(data, "data") if data is not None else None

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        c = self.config
        left, right, labels = labelled_pairs(embeddings, batch, self.values, "AnglE")
        terms: dict[str, torch.Tensor] = {}
        loss = embeddings.new_zeros(())
        if c.cosine_weight:
            cosine = cosent_loss(F.cosine_similarity(left, right, dim=-1), labels, c.cosine_scale)
            loss = loss + c.cosine_weight * cosine
            terms["cosent"] = cosine.detach()
        if c.angle_weight:
            angle = cosent_loss(angle_scores(left, right), labels, c.angle_scale)
            loss = loss + c.angle_weight * angle
            terms["angle"] = angle.detach()
        if embeddings.shape[1] == 3 and (c.ibn_weight or c.cln_weight):
            anchor, positive, negative = embeddings.unbind(1)
            in_batch = embeddings.new_zeros(())
            if c.ibn_weight:
                ibn = info_nce_loss(anchor, positive, temperature=c.temperature)
                in_batch = in_batch + c.ibn_weight * ibn
                terms["ibn"] = ibn.detach()
            if c.cln_weight:
                cln = info_nce_loss(anchor, positive, negative, temperature=c.temperature)
                in_batch = in_batch + c.cln_weight * cln
                terms["cln"] = cln.detach()
            loss = loss + in_batch / 2
        return ObjectiveOutput(loss=loss, terms=terms)
