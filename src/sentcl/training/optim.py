"""AdamW with the usual no-decay groups, and a linear schedule with warm-up (SimCSE's HF defaults)."""

from __future__ import annotations

import torch
from torch import nn
from transformers import get_linear_schedule_with_warmup

_NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def build_optimizer(model: nn.Module, learning_rate: float, weight_decay: float) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if name.endswith(_NO_DECAY) else decay).append(parameter)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # The fused kernel updates all parameters in one pass (CPU and CUDA, fp32); foreach otherwise.
    try:
        return torch.optim.AdamW(groups, lr=learning_rate, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=learning_rate, foreach=True)


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int):
    return get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)
