"""AdamW with the usual no-decay groups, and a linear schedule with warm-up (SimCSE's HF defaults)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import get_linear_schedule_with_warmup

_NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def build_optimizer(model: nn.Module, learning_rate: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over ``model``'s trainable parameters, biases and norms without weight decay. A submodule with
    an ``lr_scale`` attribute (an objective's own head whose reference code trains it faster, e.g. VaSCL's
    contrast head) has its parameters in groups of their own at ``learning_rate × lr_scale``."""
    scales = {}
    for module in model.modules():
        for parameter in module.parameters() if hasattr(module, "lr_scale") else ():
            scales[id(parameter)] = float(getattr(module, "lr_scale"))  # noqa: B009 - a Module attribute, not a submodule
    groups: dict[tuple[bool, float], list[Any]] = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        key = (not name.endswith(_NO_DECAY), scales.get(id(parameter), 1.0))
        groups.setdefault(key, []).append(parameter)
    param_groups = [
        {"params": params, "weight_decay": weight_decay if decays else 0.0, "lr": learning_rate * scale}
        for (decays, scale), params in sorted(groups.items(), key=lambda item: (item[0][1], not item[0][0]))
    ]
    # The fused kernel updates all parameters in one pass (CPU and CUDA, fp32); foreach otherwise.
    try:
        return torch.optim.AdamW(param_groups, lr=learning_rate, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(param_groups, lr=learning_rate, foreach=True)


def build_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    scheduler: torch.optim.lr_scheduler.LRScheduler = get_linear_schedule_with_warmup(  # type: ignore[no-untyped-call]
        optimizer, warmup_steps, total_steps
    )
    return scheduler
