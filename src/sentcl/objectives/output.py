"""What every objective's forward returns: the loss the optimiser minimises and its named parts."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor  # scalar, what the optimiser minimises
    #: named parts of the loss, logged separately (detached copies are fine)
    terms: dict[str, torch.Tensor] = field(default_factory=dict)
