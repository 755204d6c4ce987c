"""Data-parallel training through torch.distributed, launched with ``torchrun``.

Each rank trains on its slice of the global batch (``training.batch_size`` is the global batch size);
objectives gather the candidates of every rank with gradient (objectives/similarity.py), so the negatives
are the whole global batch; gradients are averaged with one all-reduce after backward. Evaluation,
logging and saving happen on rank 0. gloo on CPU, nccl on GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistributedContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup() -> DistributedContext:
    """Join the process group torchrun describes in the environment; one process otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return DistributedContext()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    return DistributedContext(dist.get_rank(), dist.get_world_size(), local_rank)


def select_device(name: str, context: DistributedContext) -> torch.device:
    """``auto``: this rank's GPU when there is one, else the CPU."""
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device(f"cuda:{context.local_rank}")
    return torch.device("cpu")


def average_gradients(module: nn.Module, context: DistributedContext) -> None:
    """Average the parameters' gradients over ranks with one flattened all-reduce. Parameters without a
    gradient (unused in the forward, e.g. BERT's pooler) are skipped identically on every rank."""
    if context.world_size == 1:
        return
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= context.world_size
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def mean_over_ranks(value: float, context: DistributedContext) -> float:
    if context.world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item()) / context.world_size


def barrier(context: DistributedContext) -> None:
    if context.world_size > 1:
        dist.barrier()
