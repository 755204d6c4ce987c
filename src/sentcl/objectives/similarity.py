"""Similarity functions shared by the objectives."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` [N, D] with every row of ``b`` [M, D] → [N, M]."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def gather_with_grad(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenate ``x`` [B, …] from every rank along dim 0, differentiably; return it and the row offset
    of this rank's slice. Outside torch.distributed (or with one process) it is ``(x, 0)``.

    The local slice is ``x`` itself, so its autograd path is the ordinary one; the other ranks' slices
    come from ``torch.distributed.nn.functional.all_gather``, whose backward sends each rank the
    gradient of every rank's loss with respect to its embeddings.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x, 0
    from torch.distributed.nn.functional import all_gather

    parts = list(all_gather(x))
    rank = dist.get_rank()
    parts[rank] = x
    return torch.cat(parts), rank * x.shape[0]
