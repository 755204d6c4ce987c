"""Debiased SimCSE: the debiased contrastive loss (Chuang, Robinson, Lin, Torralba & Jegelka, NeurIPS
2020), on SimCSE's views.

In-batch negatives are drawn from the data, so with probability τ⁺ (the class prior) a "negative" shares
the anchor's meaning. The negative term of InfoNCE is corrected with the positive's score:

    g_i = max( (Σ_{j ∈ neg(i)} e^{s_ij/τ} − τ⁺ · N · e^{s_i+/τ}) / (1 − τ⁺),  N · e^{−1/τ} )
    ℓ_i = −log e^{s_i+/τ} / (e^{s_i+/τ} + g_i)

with s the cosine, i+ the other view of anchor i, N = |neg(i)| and the floor N · e^{−1/τ} the smallest the
negative term can be for cosines (≥ −1). As the reference code (chingyaoc/DCL, main.py) runs it
(``symmetric: true``, the default): both views are anchors and neg(i) is every other embedding of the
batch, both views of the other sentences, N = 2B − 2, at τ = 0.5. ``symmetric: false`` is SimCSE's form:
view 0 anchors, the other sentences' view 1 the N = B − 1 negatives. τ⁺ = 0 is the uncorrected loss
(NT-Xent, or SimCSE's InfoNCE). Under torch.distributed the views of every rank are gathered (with
gradient).

The correction needs a temperature near the reference's: the positive is a dropout view (cosine ≈ 0.85
where negatives sit near 0.5), and at SimCSE's τ = 0.05 the subtracted τ⁺ · N · e^{s_i+/τ} exceeds the
negatives' sum for every anchor, so g is the floor, the loss ≈ 0 and nothing trains. The share of anchors
at the floor is logged (``floor_share``), and a τ that puts a typical batch there is warned about.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix, gather_with_grad

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder

logger = logging.getLogger(__name__)

#: a dropout positive's and an in-batch negative's typical cosines (a pre-trained encoder, MiniLM): the
#: probe of the warning below
TYPICAL_POSITIVE, TYPICAL_NEGATIVE = 0.85, 0.5


@dataclass
class DebiasedSimCSEConfig(ContrastiveConfig):
    #: the reference's τ (chingyaoc/DCL main.py: --temperature 0.5); SimCSE's 0.05 floors every anchor
    temperature: float = 0.5
    #: τ⁺: the probability that an in-batch negative is a positive (the paper's class prior)
    class_prior: float = 0.1
    #: the reference's form: both views anchor, negatives from both views (N = 2B − 2); false: SimCSE's
    symmetric: bool = True

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.class_prior < 1:
            raise ConfigError(f"class_prior: τ⁺ must be in [0, 1), got {self.class_prior}")


def floors_a_typical_anchor(temperature: float, class_prior: float) -> bool:
    """Whether τ⁺ · N · e^{s+/τ} ≥ N · e^{s−/τ} for the typical cosines: the corrected term is then the
    floor for a typical anchor whatever N is."""
    return (
        class_prior > 0 and class_prior * math.exp((TYPICAL_POSITIVE - TYPICAL_NEGATIVE) / temperature) >= 1
    )


def debiased_info_nce_loss(
    anchor: torch.Tensor,  # [A, D]
    candidates: torch.Tensor,  # [C, D]
    positive: torch.Tensor,  # [A]: the column of each anchor's positive in candidates
    temperature: float = 0.5,
    class_prior: float = 0.1,
    own: torch.Tensor | None = None,  # [A]: the column of the anchor itself in candidates (excluded), if any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss (mean over the anchors) and the share of anchors whose corrected term is the floor."""
    rows = torch.arange(anchor.shape[0], device=anchor.device)
    # e^{(s − 1)/τ}: the common factor e^{1/τ} cancels in the ratio and keeps the exponentials ≤ 1
    logits = (cosine_matrix(anchor, candidates).float() - 1.0) / temperature  # [A, C]
    if own is not None:
        logits = logits.index_put((rows, own), logits.new_tensor(float("-inf")))
    scaled = logits.exp()
    pos = scaled[rows, positive]
    negatives = scaled.sum(1) - pos
    count = candidates.shape[0] - 1 - (own is not None)
    corrected = (negatives - class_prior * count * pos) / (1.0 - class_prior)
    floor = count * math.exp(-2.0 / temperature)  # N·e^{−1/τ}, scaled by e^{−1/τ} like the rest
    at_floor = (corrected <= floor).float().mean()
    corrected = corrected.clamp(min=floor)
    return (torch.log(pos + corrected) - logits[rows, positive]).mean(), at_floor


class DebiasedSimCSE(ContrastiveObjective):
    """``symmetric`` (the reference): both views anchor against every other embedding; else view 0 anchors
    and the other anchors' positives are the negatives."""

    config: DebiasedSimCSEConfig

    paper = "Chuang, Robinson, Lin, Torralba & Jegelka, Debiased Contrastive Learning, NeurIPS 2020"
    accepted_views = (2,)

    def __init__(
        self,
        config: DebiasedSimCSEConfig | None = None,
        encoder: TrainableEncoder | None = None,
        data: Any = None,
    ):
        super().__init__(config or DebiasedSimCSEConfig(), encoder)
        c = self.config
        if floors_a_typical_anchor(c.temperature, c.class_prior):
            logger.warning(
                "objective: at temperature %g with class_prior %g the debiased correction exceeds the "
                "negatives' sum for a typical anchor (positive cosine %.2f, negatives %.2f): the loss sits "
                "at its floor and barely trains; the reference runs τ = 0.5 (see floor_share in the log)",
                c.temperature, c.class_prior, TYPICAL_POSITIVE, TYPICAL_NEGATIVE,
            )  # fmt: skip

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        if embeddings.shape[1] != 2:
            raise ValueError(f"debiased InfoNCE needs 2 views per example, got {embeddings.shape[1]}")
        c = self.config
        size = embeddings.shape[0]
        rows = torch.arange(size, device=embeddings.device)
        if c.symmetric:
            everyone, offset = gather_with_grad(embeddings)  # [N, 2, D]
            total = everyone.shape[0]
            anchors = torch.cat([embeddings[:, 0], embeddings[:, 1]])  # [2B]
            candidates = torch.cat([everyone[:, 0], everyone[:, 1]])  # [2N]: view 0 rows, then view 1 rows
            own = torch.cat([offset + rows, total + offset + rows])
            positive = torch.cat([total + offset + rows, offset + rows])
            loss, at_floor = debiased_info_nce_loss(
                anchors, candidates, positive, c.temperature, c.class_prior, own
            )
        else:
            candidates, offset = gather_with_grad(embeddings[:, 1])
            loss, at_floor = debiased_info_nce_loss(
                embeddings[:, 0], candidates, offset + rows, c.temperature, c.class_prior
            )
        return ObjectiveOutput(loss=loss, terms={"debiased_info_nce": loss.detach(), "floor_share": at_floor})
