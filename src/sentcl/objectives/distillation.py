"""Distillation from a teacher, alone or with SimCSE's contrastive loss: a smaller student (a layer-reduced
transformer, model.keep_layers) learns a teacher's embedding space.

    L = w_nce · InfoNCE(z, z⁺)  +  w_emb · D(P z, t)  +  γ · L_rank(sim(z, z⁺)/τ, sim(t, t)/τ₂)
        + β · JS(softmax(sim(z, z⁺)/τ), softmax(sim(z⁺, z)/τ))

* ``z``, ``z⁺``: the student's two dropout views of each sentence [B, D_s]; ``t``: the teacher's embedding
  of the sentence [B, D_t], from a table computed once (objectives/teacher.py);
* embedding distillation (sentence-transformers' ``MSELoss``, Reimers & Gurevych 2020): D is the mean
  squared error or 1 − cosine; ``P`` a learned linear map when D_s ≠ D_t (trained with the student, not
  saved with it), else the identity;
* listwise ranking distillation (RankCSE, Liu et al., ACL 2023): each anchor's in-batch similarity list
  (the student's at SimCSE's τ, the teacher's at τ₂) follows the teacher's, by ListNet (cross-entropy
  between the two top-1 distributions, the self-pair left out) or ListMLE (the negative log-likelihood of
  the teacher's order under the student's scores, summed over the list); RankCSE's consistency term β·JS
  between the two directions' distributions is optional.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.simcse import info_nce_loss
from sentcl.objectives.similarity import cosine_matrix
from sentcl.objectives.teacher import teacher_table

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder

EMBEDDING_LOSSES = ("mse", "cosine")
LISTWISE = ("none", "listnet", "listmle")


@dataclass
class DistillationConfig(ContrastiveConfig):
    #: the teacher: any model sentcl loads (a folder, a hub id); its embeddings are cached per data
    teacher: str = ""
    #: the teacher's pooler (None: the one saved with it)
    teacher_pooler: str | None = None
    #: w_nce: SimCSE's InfoNCE on the student's dropout views (0: distillation alone)
    contrastive_weight: float = 1.0
    #: w_emb and D: embedding distillation (0: none)
    embedding_weight: float = 1.0
    embedding_loss: str = "mse"
    #: γ and the ranking loss: listwise distillation of the in-batch similarities (none: off)
    listwise: str = "none"
    listwise_weight: float = 1.0
    #: τ₂: the temperature of the teacher's similarity lists (the student's is ``temperature``)
    listwise_temperature: float = 0.05
    #: β: RankCSE's consistency term, the Jensen–Shannon divergence of z→z⁺ and z⁺→z (0: off)
    consistency_weight: float = 0.0

    def validate(self) -> None:
        super().validate()
        if not self.teacher:
            raise ConfigError("teacher: a teacher model (folder or hub id) is required")
        if self.embedding_loss not in EMBEDDING_LOSSES:
            known = ", ".join(EMBEDDING_LOSSES)
            raise ConfigError(f"embedding_loss: {self.embedding_loss!r} is not one of {known}")
        if self.listwise not in LISTWISE:
            raise ConfigError(f"listwise: {self.listwise!r} is not one of {', '.join(LISTWISE)}")
        for key in ("contrastive_weight", "embedding_weight", "listwise_weight", "consistency_weight"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: a weight cannot be negative, got {getattr(self, key)}")
        if not self.listwise_temperature > 0:
            raise ConfigError(f"listwise_temperature: must be positive, got {self.listwise_temperature}")
        ranking = self.listwise_weight if self.listwise != "none" else 0.0
        if self.contrastive_weight + self.embedding_weight + ranking + self.consistency_weight == 0:
            raise ConfigError("contrastive_weight, embedding_weight, listwise: every term is off")


def embedding_distillation(student: torch.Tensor, teacher: torch.Tensor, loss: str = "mse") -> torch.Tensor:
    """D(student [B, D], teacher [B, D]): the mean squared error over every coordinate (sentence-
    transformers' MSELoss), or the mean of 1 − cosine."""
    if loss == "mse":
        return F.mse_loss(student, teacher)
    return (1 - F.cosine_similarity(student, teacher, dim=-1)).mean()


def _off_diagonal(scores: torch.Tensor) -> torch.Tensor:
    """[B, B] → [B, B − 1]: each row without its own column (the self-pair)."""
    size = scores.shape[0]
    keep = ~torch.eye(size, dtype=torch.bool, device=scores.device)
    return scores[keep].view(size, size - 1)


def listnet_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over rows of −Σ_j softmax(teacher)_j · log softmax(student)_j (rows without the self-pair)."""
    student, teacher = _off_diagonal(student), _off_diagonal(teacher)
    return -(F.softmax(teacher, dim=-1) * F.log_softmax(student, dim=-1)).sum(dim=-1).mean()


def listmle_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean over rows of Σ_r (log Σ_{k ≥ r} e^{s_π(k)} − s_π(r)), π the row's teacher order (descending, ties
    by position), over the whole row (RankCSE's ListMLE keeps the self-pair, first in the teacher's order)."""
    order = teacher.argsort(dim=-1, descending=True, stable=True)
    ranked = student.gather(-1, order)  # [B, B]: the student's scores in the teacher's order
    tails = torch.logcumsumexp(ranked.flip(-1), dim=-1).flip(-1)  # log Σ over each position and after
    return (tails - ranked).sum(dim=-1).mean()


def consistency_loss(forward: torch.Tensor, backward: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence of the rows' softmax distributions of the z→z⁺ and z⁺→z scores [B, B],
    summed over a row, averaged over rows (RankCSE's Divergence)."""
    p, q = F.softmax(forward, dim=-1).clamp(min=1e-7), F.softmax(backward, dim=-1).clamp(min=1e-7)
    m = (0.5 * (p + q)).log()
    return 0.5 * ((p * (p.log() - m)).sum(-1).mean() + (q * (q.log() - m)).sum(-1).mean())


class Distillation(ContrastiveObjective):
    """The student's views (view 0 and view 1 of each sentence) against the teacher's table, looked up by
    the batch's row indices."""

    config: DistillationConfig
    matryoshka_refusal = "distils the full embedding (its projection is sized to it)"
    held_out_refusal = "looks the teacher's vectors up by training row, and held-out rows have none"

    paper = (
        "Reimers & Gurevych, Making Monolingual Sentence Embeddings Multilingual using Knowledge "
        "Distillation, EMNLP 2020; Liu et al., RankCSE: Unsupervised Sentence Representations Learning via "
        "Learning to Rank, ACL 2023"
    )

    def __init__(
        self,
        config: DistillationConfig | None = None,
        encoder: TrainableEncoder | None = None,
        data: Any = None,
    ):
        super().__init__(config or DistillationConfig(), encoder)
        c = self.config
        self.table: np.ndarray | None = None
        if data is not None:
            records = getattr(data, "records", None)
            if records is None:
                raise ConfigError(
                    "objective.teacher: distillation looks the teacher's vectors up by row, so it needs the "
                    "training data in memory (data.streaming: false)"
                )
            texts = [row[0] for row in records.rows]
            self.table = teacher_table(c.teacher, texts, c.teacher_pooler, getattr(data, "max_length", None))
        self.projection: nn.Module = nn.Identity()
        if encoder is not None and self.table is not None and int(self.table.shape[1]) != encoder.output_dim:
            self.projection = nn.Linear(encoder.output_dim, int(self.table.shape[1]))

    def teacher_vectors(self, batch: Batch | None, device: torch.device) -> torch.Tensor:
        if self.table is None or batch is None:
            raise ValueError("Distillation needs the training data (data=) and the batch's row indices")
        rows = batch.indices.cpu().numpy()
        return torch.from_numpy(np.ascontiguousarray(self.table[rows])).to(device)  # [B, D_t]

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        c = self.config
        if embeddings.shape[1] < 2 and (c.contrastive_weight or c.consistency_weight):
            raise ValueError(
                f"Distillation's InfoNCE and consistency terms need 2 views, got {embeddings.shape[1]}"
            )
        anchor = embeddings[:, 0]  # [B, D_s]
        other = embeddings[:, 1] if embeddings.shape[1] > 1 else anchor  # one view: the list against itself
        teacher = self.teacher_vectors(batch, embeddings.device)  # [B, D_t]
        terms: dict[str, torch.Tensor] = {}
        loss = embeddings.new_zeros(())
        if c.contrastive_weight:
            nce = info_nce_loss(anchor, embeddings[:, 1], temperature=c.temperature)
            loss = loss + c.contrastive_weight * nce
            terms["info_nce"] = nce.detach()
        if c.embedding_weight:
            distilled = embedding_distillation(self.projection(anchor), teacher, c.embedding_loss)
            loss = loss + c.embedding_weight * distilled
            terms["embedding"] = distilled.detach()
        if c.listwise != "none" or c.consistency_weight:
            student_scores = cosine_matrix(anchor, other) / c.temperature  # [B, B]
            if c.listwise != "none":
                teacher_scores = cosine_matrix(teacher, teacher) / c.listwise_temperature  # [B, B]
                rank = listnet_loss if c.listwise == "listnet" else listmle_loss
                ranking = rank(student_scores, teacher_scores)
                loss = loss + c.listwise_weight * ranking
                terms[c.listwise] = ranking.detach()
            if c.consistency_weight:
                backward = cosine_matrix(embeddings[:, 1], anchor) / c.temperature  # [B, B]
                consistency = consistency_loss(student_scores, backward)
                loss = loss + c.consistency_weight * consistency
                terms["consistency"] = consistency.detach()
        return ObjectiveOutput(loss=loss, terms=terms)
