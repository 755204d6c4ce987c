"""SimCLR's NT-Xent (Chen et al., ICML 2020) on sentence views.

For a batch of N examples with two views each (2N embeddings z), every embedding is an anchor; its
positive is the other view of the same example and its negatives are the other 2N − 2 embeddings —
both views of every other example. Its own similarity is excluded from the denominator:

    ℓ(i, j) = −log  e^{sim(z_i, z_j)/τ} / Σ_{k ≠ i} e^{sim(z_i, z_k)/τ}
    L = 1/(2N) Σ_k [ℓ(2k−1, 2k) + ℓ(2k, 2k−1)]

Unlike SimCSE's InfoNCE (anchors are view 0 only; candidates are view 1 only) the loss is symmetric and
the negatives include same-view embeddings. The projection head is the encoder's MLP head, used in
training and dropped when encoding (``model.pooler: cls`` with ``mlp_only_train: true``). Under
torch.distributed both views of every rank are gathered with gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput
from sentcl.objectives.similarity import cosine_matrix, gather_with_grad

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class NTXentConfig(ContrastiveConfig):
    def validate(self) -> None:
        super().validate()


def nt_xent_loss(
    local: torch.Tensor,  # [B, 2, D]: this rank's two views
    everyone: torch.Tensor,  # [N, 2, D]: every rank's two views (N = B on one process)
    temperature: float,
    offset: int = 0,  # row of local[0] in everyone
) -> torch.Tensor:
    batch, total = local.shape[0], everyone.shape[0]
    anchors = torch.cat([local[:, 0], local[:, 1]])  # [2B]
    candidates = torch.cat([everyone[:, 0], everyone[:, 1]])  # [2N]: view 0 rows, then view 1 rows
    logits = cosine_matrix(anchors, candidates) / temperature  # [2B, 2N]
    rows = torch.arange(batch, device=local.device)
    own = torch.cat([offset + rows, total + offset + rows])  # each anchor's own column
    other = torch.cat([total + offset + rows, offset + rows])  # the other view of the same example
    logits = logits.masked_fill(F.one_hot(own, 2 * total).bool(), float("-inf"))
    return F.cross_entropy(logits, other)


class NTXent(ContrastiveObjective):
    config: NTXentConfig
    paper = (
        "Chen, Kornblith, Norouzi & Hinton, "
        "A Simple Framework for Contrastive Learning of Visual Representations, ICML 2020"
    )

    def __init__(
        self, config: NTXentConfig | None = None, encoder: TrainableEncoder | None = None, data: Any = None
    ):
        super().__init__(config or NTXentConfig(), encoder)

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        if embeddings.shape[1] != 2:
            raise ValueError(f"NT-Xent needs exactly 2 views per example, got {embeddings.shape[1]}")
        everyone, offset = gather_with_grad(embeddings)
        loss = nt_xent_loss(embeddings, everyone, self.config.temperature, offset)
        return ObjectiveOutput(loss=loss, terms={"nt_xent": loss.detach()})
