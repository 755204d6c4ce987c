"""What every objective returns, and the contract objectives follow.

An objective is an ``nn.Module`` whose ``forward`` takes the encoder's output (embeddings [B, V, D])
and the batch (token ids [B, V, L], for objectives that run extra passes: a momentum encoder, a frozen
copy, a masked-LM pass) and returns an ``ObjectiveOutput``. Extra networks (momentum or frozen copies,
an MLM head) are built in the constructor from the encoder it is given, never by reaching into the
model during a step. Objectives that run their own passes on the ids cannot be split by GradCache and
say so with ``supports_gradcache = False``; those that read only labels from the batch (EASE's entity
rows) get the batch under GradCache too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from sentcl.config import ConfigError


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor  # scalar, what the optimiser minimises
    #: named parts of the loss, logged separately (detached copies are fine)
    terms: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class ObjectiveConfig:
    """Keys every objective accepts: SimCSE's auxiliary masked-LM loss (``do_mlm``) can be added to any."""

    #: λ of the auxiliary MLM loss (SimCSE: 0.1 when do_mlm); 0 switches it off.
    mlm_weight: float = 0.0
    #: share of tokens selected for masking (80 % [MASK], 10 % random, 10 % kept).
    mlm_probability: float = 0.15

    def validate(self) -> None:
        if self.mlm_weight < 0:
            raise ConfigError(f"mlm_weight: must be ≥ 0, got {self.mlm_weight}")
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"mlm_probability: must be in (0, 1), got {self.mlm_probability}")


@dataclass
class ContrastiveConfig(ObjectiveConfig):
    """Keys every contrastive objective shares: the temperature τ of its similarities (one place, one
    check); an objective whose paper uses another τ redeclares the field with its default."""

    temperature: float = 0.05

    def validate(self) -> None:
        super().validate()
        if not self.temperature > 0:
            raise ConfigError(f"temperature: must be positive, got {self.temperature}")


class Objective(nn.Module):
    #: False when the objective runs passes of its own on the token ids (GradCache cannot chunk them).
    supports_gradcache: bool = True
    #: False when the objective needs no sentence embeddings (the loop then skips the encoder pass and
    #: passes ``encoded=None``), e.g. TaCL's token-level loss.
    uses_embeddings: bool = True
    #: True when the objective computes its own MLM term from ``mlm_weight`` (no WithMLM wrapper).
    includes_mlm: bool = False

    #: poolers whose sentence vector the objective's loss never trains, each with the reason: a recipe
    #: asking for one of them is refused (the row would measure the untrained start model)
    untrained_poolers: ClassVar[dict[str, str]] = {}

    def forward(self, encoded, batch=None) -> ObjectiveOutput:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def check_pooler(cls, pooler: str) -> None:
        if pooler in cls.untrained_poolers:
            raise ConfigError(f"model.pooler: {pooler!r} {cls.untrained_poolers[pooler]}")

    def bind_records(self, records) -> None:
        """See the training rows before the optimiser is built (``batch.indices`` index them); objectives
        whose data carries labels (EASE's entities) build their tables here."""


def keep_reference(module: nn.Module, name: str, other: nn.Module) -> None:
    """Hold ``other`` without registering it: its parameters stay the encoder's, not counted twice."""
    module.__dict__[name] = other


def frozen(module: nn.Module) -> nn.Module:
    """``module`` without gradients and in eval mode (no dropout); keep it so with ``FrozenParts``."""
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module.eval()


class FrozenParts:
    """Mixin for objectives holding frozen networks (named in ``frozen_parts``): they stay in eval mode
    when the loop calls ``train()``."""

    frozen_parts: tuple[str, ...] = ()

    def train(self, mode: bool = True):
        super().train(mode)  # type: ignore[misc]
        for name in self.frozen_parts:
            getattr(self, name).eval()
        return self
