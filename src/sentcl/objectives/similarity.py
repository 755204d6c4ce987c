"""Similarity functions shared by the objectives."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` [N, D] with every row of ``b`` [M, D] → [N, M]."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
