"""What every objective returns, and the shape contract objectives follow.

An objective is an ``nn.Module`` whose ``forward`` takes the encoder's output (embeddings [B, V, D])
and returns an ``ObjectiveOutput``. Extra networks (momentum or frozen copies) come in through the
constructor, never by reaching into the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor  # scalar, what the optimiser minimises
    #: named parts of the loss, logged separately (detached copies are fine)
    terms: dict[str, torch.Tensor] = field(default_factory=dict)
