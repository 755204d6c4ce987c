"""Child-Tuning (Xu et al., EMNLP 2021) as a gradient transform any objective can use.

Between the backward pass and the optimiser step, the gradients of the backbone's parameters are masked
so that only a "child network" is updated:

* **Child-Tuning_F** (task-free): a fresh mask M_t ~ Bernoulli(p_F) per parameter element at every step,
  and the kept gradients are rescaled, g ← g ⊙ M_t / p_F (unbiased in expectation).
* **Child-Tuning_D** (task-driven): a fixed mask of the p_D share of parameter elements with the largest
  Fisher information F(w) = Σ_batches (∂L/∂w)², estimated with the run's own objective on a few batches
  before training (one global threshold across all backbone tensors); g ← g ⊙ M.

Heads outside the backbone (the MLP head, an MLM head) are not masked; AdamW's decoupled weight decay
still acts on every parameter, as in the paper's ChildTuningAdamW. The paper's reserve share: p ∈ {0.1,
0.2, 0.3}. Masks of D are buffers of this module, so they are saved in a checkpoint and a resumed run
uses the very same child network; F's masks come from the global RNG, whose state the checkpoint keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from tqdm.auto import tqdm

from sentcl.config import ConfigError

logger = logging.getLogger(__name__)


@dataclass
class ChildTuningConfig:
    """``training.child_tuning``."""

    mode: Literal["off", "F", "D"] = "off"
    #: p_F (F: probability of keeping a gradient element) or p_D (D: share of elements in the child)
    reserve: float = 0.3
    #: D: batches the Fisher information is estimated on
    fisher_batches: int = 8

    def validate(self) -> None:
        if not 0 < self.reserve <= 1:
            raise ConfigError(f"reserve: must be in (0, 1], got {self.reserve}")
        if self.fisher_batches < 1:
            raise ConfigError(f"fisher_batches: must be positive, got {self.fisher_batches}")


class ChildTuning(nn.Module):
    def __init__(self, config: ChildTuningConfig, backbone: nn.Module):
        super().__init__()
        if config.mode == "off":
            raise ValueError("Child-Tuning is off")
        self.config = config
        self.targets = [p for p in backbone.parameters() if p.requires_grad]
        if config.mode == "D":
            for index, parameter in enumerate(self.targets):
                self.register_buffer(f"mask_{index}", torch.ones_like(parameter, dtype=torch.bool))

    def masks(self) -> list[torch.Tensor]:
        return [getattr(self, f"mask_{index}") for index in range(len(self.targets))]

    @torch.no_grad()
    def estimate_fisher(
        self, batches: Iterable, backward: Callable[[object], object], trained: nn.Module | None = None
    ) -> float:
        """Set D's masks from Σ (∂L/∂w)² over ``batches``; ``backward(batch)`` runs the objective's forward
        and backward pass. Afterwards no gradient is left: not the backbone's, and not those of
        ``trained`` (everything the optimiser updates: the MLP head, an MLM head, an objective's own
        parameters), which the Fisher passes also reach and which would otherwise be added to the first
        training step. Returns the threshold."""
        fisher = [torch.zeros_like(p, dtype=torch.float32) for p in self.targets]
        for batch in tqdm(list(batches), desc="Fisher information", unit="batch", leave=False):
            for parameter in self.targets:
                parameter.grad = None
            with torch.enable_grad():
                backward(batch)
            for total, parameter in zip(fisher, self.targets, strict=True):
                if parameter.grad is not None:
                    total += parameter.grad.float().pow(2)
        for parameter in self.targets + list(trained.parameters() if trained is not None else ()):
            parameter.grad = None
        flat = torch.cat([f.flatten() for f in fisher]).cpu()
        keep = max(1, round(self.config.reserve * flat.numel()))
        chosen = torch.zeros(flat.numel(), dtype=torch.bool)
        chosen[torch.topk(flat, keep, sorted=False).indices] = True  # exactly p_D of them, ties broken
        start = 0
        for mask in self.masks():
            mask.copy_(chosen[start : start + mask.numel()].view_as(mask))
            start += mask.numel()
        threshold = flat[chosen].min().item()
        kept = sum(int(m.sum()) for m in self.masks())
        logger.info("Child-Tuning_D: %d of %d backbone weights in the child network", kept, flat.numel())
        return threshold

    @torch.no_grad()
    def apply(self) -> None:
        """Mask the backbone's gradients in place (call after backward, before clipping and the step)."""
        reserve = self.config.reserve
        if self.config.mode == "F":
            for parameter in self.targets:
                if parameter.grad is not None:
                    keep = torch.rand(parameter.shape, device=parameter.device) < reserve
                    parameter.grad.mul_(keep).div_(reserve)
        else:
            for parameter, mask in zip(self.targets, self.masks(), strict=True):
                if parameter.grad is not None:
                    parameter.grad.mul_(mask)
