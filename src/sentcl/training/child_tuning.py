"""Child-Tuning (Xu et al., EMNLP 2021) as a gradient transform any objective can use.

Between the backward pass and the optimiser step, the gradients of the backbone's parameters are masked
so that only a "child network" is updated:

* **Child-Tuning_F** (task-free): a fresh mask M_t ~ Bernoulli(p_F) per parameter element at every step,
  and the kept gradients are rescaled, g ← g ⊙ M_t / p_F (unbiased in expectation).
* **Child-Tuning_D** (task-driven): a fixed mask of the p_D share of parameter elements with the largest
  Fisher information F(w) = Σ_batches (∂L/∂w)², estimated with the run's own objective before training
  (on the whole training set, or on ``fisher_batches`` batches; each tensor's gradient clipped to the run's
  max_grad_norm first, one global threshold across the tensors); g ← g ⊙ M.

What is masked follows the reference code (alibaba/AliceMind ChildTuning, ``scope: reference``): F masks
every parameter the optimiser updates (heads included), D the parameters of the transformer layers (names
with "layer"), leaving the embeddings and heads free; ``scope: backbone`` masks every backbone parameter in
both modes and nothing else. The masks act on the clipped gradients, as in the reference's optimiser
step. AdamW's decoupled weight decay still acts on every parameter, as in the paper's ChildTuningAdamW.
The paper's reserve share: p ∈ {0.1, 0.2, 0.3}. Masks of D are buffers of this module, so they are saved
in a checkpoint and a resumed run uses the very same child network; F's masks are drawn from a generator
seeded by (run seed, step), so a resumed run draws the very same masks.

Under torchrun the masks are applied to the averaged gradients and must be the same on every rank, or the
replicas drift apart: F's generator is seeded alike on every rank, and D's Fisher sums are added over the
ranks (each rank saw its slice of every estimation batch) before the one threshold is taken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

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
    #: D: batches the Fisher information is estimated on; 0: one pass over the training set (the reference)
    fisher_batches: int = 8
    #: reference: F masks everything the optimiser updates, D the transformer layers (AliceMind's code);
    #: backbone: both mask every backbone parameter and nothing else
    scope: Literal["reference", "backbone"] = "reference"

    def validate(self) -> None:
        if not 0 < self.reserve <= 1:
            raise ConfigError(f"reserve: must be in (0, 1], got {self.reserve}")
        if self.fisher_batches < 0:
            raise ConfigError(f"fisher_batches: ≥ 0 (0: the whole training set), got {self.fisher_batches}")


class ChildTuning(nn.Module):
    def __init__(
        self,
        config: ChildTuningConfig,
        backbone: nn.Module,
        seed: int = 0,
        optimized: nn.Module | None = None,
    ):
        """``backbone``: the encoder's transformer; ``optimized``: everything the optimiser updates (F's
        targets under ``scope: reference``; the backbone where it is not given). F's masks of step t come
        from a generator seeded by (``seed``, t): the same on every rank and after a resume."""
        super().__init__()
        if config.mode == "off":
            raise ValueError("Child-Tuning is off")
        self.config = config
        self.seed = seed
        self.targets = [p for p in targets(config, backbone, optimized) if p.requires_grad]
        if not self.targets:
            raise ConfigError(
                "training.child_tuning: no trainable parameter to mask (scope: reference masks, for D, the "
                "parameters whose names hold 'layer'); use scope: backbone"
            )
        if config.mode == "D":
            for index, parameter in enumerate(self.targets):
                self.register_buffer(f"mask_{index}", torch.ones_like(parameter, dtype=torch.bool))

    def masks(self) -> list[torch.Tensor]:
        return [getattr(self, f"mask_{index}") for index in range(len(self.targets))]

    @torch.no_grad()
    def estimate_fisher(
        self,
        batches: Iterable[Any],
        backward: Callable[[Any], object],
        trained: nn.Module | None = None,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        clip: float = 0.0,
    ) -> float:
        """Set D's masks from Σ (∂L/∂w)² over ``batches``; ``backward(batch)`` runs the objective's forward
        and backward pass. Afterwards no gradient is left: not the backbone's, and not those of
        ``trained`` (everything the optimiser updates: the MLP head, an MLM head, an objective's own
        parameters), which the Fisher passes also reach and which would otherwise be added to the first
        training step. ``reduce`` (under torchrun: the sum over ranks) turns this process's Fisher sums
        into the global ones before the threshold, so every rank keeps the same child network. ``clip``:
        each tensor's gradient is clipped to this norm before it is squared (0: not). Returns the
        threshold."""
        fisher = [torch.zeros_like(p, dtype=torch.float32) for p in self.targets]
        for batch in tqdm(batches, desc="Fisher information", unit="batch", leave=False):
            for parameter in self.targets:
                parameter.grad = None
            with torch.enable_grad():
                backward(batch)
            for total, parameter in zip(fisher, self.targets, strict=True):
                if parameter.grad is not None:
                    if clip > 0:  # the reference clips each tensor's gradient before squaring it
                        torch.nn.utils.clip_grad_norm_(parameter, clip)
                    total += parameter.grad.float().pow(2)
        for parameter in self.targets + list(trained.parameters() if trained is not None else ()):
            parameter.grad = None
        flat = torch.cat([f.flatten() for f in fisher])
        flat = (reduce(flat) if reduce is not None else flat).cpu()
        keep = max(1, round(self.config.reserve * flat.numel()))
        chosen = torch.zeros(flat.numel(), dtype=torch.bool)
        chosen[torch.topk(flat, keep, sorted=False).indices] = True  # exactly p_D of them, ties broken
        start = 0
        for mask in self.masks():
            mask.copy_(chosen[start : start + mask.numel()].view_as(mask))
            start += mask.numel()
        threshold = flat[chosen].min().item()
        kept = sum(int(m.sum()) for m in self.masks())
        logger.info("Child-Tuning_D: %d of %d masked weights in the child network", kept, flat.numel())
        return threshold

    @torch.no_grad()
    def mask_gradients(self, step: int) -> None:
        """Mask the targets' gradients in place for training step ``step`` (call after backward, the
        gradient average and clipping, before the optimiser step)."""
        reserve = self.config.reserve
        if self.config.mode == "F":
            generators: dict[torch.device, torch.Generator] = {}
            for parameter in self.targets:
                if parameter.grad is not None:
                    device = parameter.device
                    if device not in generators:  # one stream per device, seeded by (seed, step) only
                        generators[device] = torch.Generator(device).manual_seed(self.seed * 1_000_003 + step)
                    keep = torch.rand(parameter.shape, device=device, generator=generators[device]) < reserve
                    parameter.grad.mul_(keep).div_(reserve)
        else:
            for parameter, mask in zip(self.targets, self.masks(), strict=True):
                if parameter.grad is not None:
                    parameter.grad.mul_(mask)


def targets(
    config: ChildTuningConfig, backbone: nn.Module, optimized: nn.Module | None
) -> list[nn.Parameter]:
    """The parameters whose gradients are masked (see the module's docstring)."""
    if config.scope == "backbone":
        return list(backbone.parameters())
    if config.mode == "F":
        return list((optimized if optimized is not None else backbone).parameters())
    return [parameter for name, parameter in backbone.named_parameters() if "layer" in name]
