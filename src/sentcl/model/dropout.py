"""Cheaper dropout masks on the CPU.

SimCSE's only augmentation is dropout, so a training step draws a fresh mask for every hidden state and
every attention map: about 20 masks of ~1 M entries per step of all-MiniLM-L6-v2 at batch 64 × 2 views.
Torch's CPU dropout draws one Bernoulli sample per entry (``bernoulli_``), which costs ~8 % of a step on
this 2-core machine. Here one 64-bit random integer gives four 16-bit uniforms, and an entry is kept when
its uniform is at or above ``round(p · 65536)``: the same independent Bernoulli(1 − p) masks, with ``p``
resolved to 1/65536 (0.1 → 0.100006), 2.1–2.8× cheaper forward + backward
(``benchmarks/step_ablation.py``). On other devices, and in eval mode, it is ``nn.Dropout``.
"""

from __future__ import annotations

import torch
from torch import nn

_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A mask of ``shape``: 0 with probability ``p`` (to 1/65536), else 1 / (1 − p)."""
    count = shape.numel()
    words = torch.randint(-(2**63), 2**63 - 1, ((count + 3) // 4,), dtype=torch.int64, device=device)
    uniform = words.view(torch.int16)[:count].view(shape)  # uniform over [-32768, 32767]
    threshold = round(p * _LEVELS) - _LEVELS // 2
    return (uniform >= threshold).to(dtype).mul_(1.0 / (1.0 - p))


def fast_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0 or x.device.type != "cpu":
        return nn.functional.dropout(x, p, training)
    if p == 1.0:
        return x * 0.0
    return x * keep_mask(x.shape, p, x.dtype, x.device)


class FastDropout(nn.Dropout):
    """``nn.Dropout`` with :func:`fast_dropout`'s masks (same ``p``; a drop-in replacement)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p, self.training)


def use_fast_dropout(model: nn.Module) -> int:
    """Replace every plain ``nn.Dropout`` inside ``model`` by :class:`FastDropout`; returns how many.
    Dropout has no weights, so saved models are unchanged."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, FastDropout(child.p, child.inplace))
                replaced += 1
    return replaced
