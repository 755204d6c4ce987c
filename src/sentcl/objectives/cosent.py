"""CoSENT (Su, 2022): a ranking loss over labelled pairs, the pairs' scores ordered as their labels are.

For the batch's pairs (u_i, v_i) with labels y_i (graded, e.g. an STS score, or binary) and their scores
s_i = cos(u_i, v_i):

    L = log(1 + Σ_{(i, j): y_i < y_j} exp(λ · (s_i − s_j)))

λ = ``scale`` (20). Every pair whose label is lower should score lower: only the order of the labels counts,
never their values. Pairs come from the data as

* two text columns and a label column (``data.text_columns: 2``; the label a number: an STS score, 0/1), or
* NLI triplets (anchor, entailment, contradiction): the pairs (anchor, entailment) labelled 1 and (anchor,
  contradiction) labelled 0, as sentence-transformers' ``CoSENTLoss`` and AnglE's reference code make them.

``cosent_loss`` is the loss on scores and labels; AnglE (objectives/angle.py) uses it with its angle score.
Equal to sentence-transformers' ``CoSENTLoss`` on the same embeddings and labels
(``tests/objectives/test_cosent.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from sentcl.config import ConfigError
from sentcl.objectives.base import ContrastiveConfig, ContrastiveObjective, ObjectiveOutput

if TYPE_CHECKING:
    from sentcl.data.collate import Batch
    from sentcl.model import TrainableEncoder


@dataclass
class CoSENTConfig(ContrastiveConfig):
    #: λ: the scores' scale (sentence-transformers' and the reference code's default, 20)
    scale: float = 20.0

    def validate(self) -> None:
        super().validate()
        if not self.scale > 0:
            raise ConfigError(f"scale: must be positive, got {self.scale}")


def cosent_loss(scores: torch.Tensor, labels: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """log(1 + Σ_{y_i < y_j} exp(scale · (s_i − s_j))) over the [N] scores and labels (ties add nothing)."""
    scaled = scores.float() * scale
    differences = scaled[:, None] - scaled[None, :]  # [N, N]: s_i − s_j
    lower = labels[:, None] < labels[None, :]  # pairs (i, j) where i's label is below j's
    terms = differences.masked_fill(~lower, float("-inf")).reshape(-1)
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


def label_values(data: Any, where: str) -> torch.Tensor | None:
    """The dataset's label column as numbers (one per label id), None without one; a label that is not a
    number is one ConfigError naming the data."""
    names = getattr(data, "label_names", None) or []
    if not names:
        return None
    columns = getattr(data, "label_columns", 0)
    if columns != 1:
        raise ConfigError(f"{where}: pairs need one label column after the two texts, the data has {columns}")
    try:
        return torch.tensor([float(name) for name in names])
    except ValueError:
        bad = next(name for name in names if not _is_number(name))
        raise ConfigError(f"{where}: the label {bad[:40]!r} is not a number (a score or 0/1)") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def labelled_pairs(
    embeddings: torch.Tensor, batch: Batch | None, values: torch.Tensor | None, name: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(left [N, D], right [N, D], labels [N]) from the batch: a labelled pair per row (two views and a
    label), or from NLI triplets the (anchor, entailment) pairs labelled 1 and the (anchor, contradiction)
    pairs labelled 0."""
    views = embeddings.shape[1]
    if views == 3:
        anchor, positive, negative = embeddings.unbind(1)
        ones = torch.ones(anchor.shape[0], device=embeddings.device)
        return torch.cat([anchor, anchor]), torch.cat([positive, negative]), torch.cat([ones, 0 * ones])
    if views == 2 and values is not None and batch is not None and batch.labels is not None:
        labels = values.to(embeddings.device)[batch.labels[:, 0]]
        return embeddings[:, 0], embeddings[:, 1], labels
    raise ValueError(
        f"{name} ranks labelled pairs: give it NLI triplets (3 columns) or pairs with a label column "
        f"(data.text_columns: 2), not {views} unlabelled view(s)"
    )


class CoSENT(ContrastiveObjective):
    """CoSENT on the batch's pairs (see the module's docstring)."""

    config: CoSENTConfig
    paper = "Su, CoSENT: a sentence vector scheme more efficient than Sentence-BERT, 2022 (kexue.fm 8847)"

    def __init__(
        self, config: CoSENTConfig | None = None, encoder: TrainableEncoder | None = None, data: Any = None
    ):
        super().__init__(config or CoSENTConfig(), encoder)
        self.values = label_values(data, "data") if data is not None else None

    def loss_from_embeddings(self, embeddings: torch.Tensor, batch: Batch | None = None) -> ObjectiveOutput:
        left, right, labels = labelled_pairs(embeddings, batch, self.values, "CoSENT")
        scores = torch.nn.functional.cosine_similarity(left, right, dim=-1)
        loss = cosent_loss(scores, labels, self.config.scale)
        return ObjectiveOutput(loss=loss, terms={"cosent": loss.detach()})
