"""Similarity functions shared by the objectives.

The similarities and losses are computed in fp32 whatever ``training.autocast`` says: under bf16 autocast a
product of unit vectors carries ~3 significant digits, and divided by τ = 0.05 the logits would be off by
up to ~0.05. The encoder's passes stay in bf16; only these small [B, N] products leave autocast
(``fp32_products``), so the cost is nil.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fp32_products(device: torch.device | str) -> torch.autocast:
    """A region where products run in the inputs' precision even inside ``torch.autocast`` (cast bf16
    inputs with ``full``: autocast is off, so nothing casts them)."""
    return torch.autocast(torch.device(device).type, enabled=False)


def full(x: torch.Tensor) -> torch.Tensor:
    """``x`` in fp32 at least (bf16 and fp16 are raised; fp64 stays), differentiably."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every row of ``a`` [N, D] with every row of ``b`` [M, D] → [N, M], in fp32 at
    least."""
    with fp32_products(a.device):
        return F.normalize(full(a), dim=-1) @ F.normalize(full(b), dim=-1).T


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

    parts = list(all_gather(x))  # type: ignore[no-untyped-call]  # torch's own function, unannotated
    rank = dist.get_rank()
    parts[rank] = x
    return torch.cat(parts), rank * x.shape[0]
