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

from sentcl.config import ConfigError
from sentcl.hardware import resolve_device


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


def check_device_name(name: str) -> None:
    """A ``training.device`` torch can parse (``auto``, ``cpu``, ``cuda``, ``cuda:1``, ``mps``)."""
    if name == "auto":
        return
    try:
        torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device: {name[:80]!r} is not a device (auto, cpu, cuda, cuda:N, mps)") from None


def select_device(name: str, context: DistributedContext) -> torch.device:
    """``auto``: this rank's GPU when there is one, else the CPU. A named device this machine lacks is a
    ConfigError naming the key, before anything is loaded."""
    return resolve_device(name, "training.device", context.local_rank)


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


def sum_over_ranks(tensor: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """``tensor`` summed over the ranks (one all-reduce), the same on every rank; as it is on one process."""
    if context.world_size == 1:
        return tensor
    total = tensor.clone()
    dist.all_reduce(total)
    return total


def check_replicas(module: nn.Module, context: DistributedContext) -> list[str]:
    """The names of ``module``'s parameters whose values differ between the ranks (every rank gets the same
    answer; empty on one process). Data-parallel replicas start equal and take the same averaged step, so
    they stay bit-identical unless a per-rank transform of the averaged gradients differs."""
    if context.world_size == 1:
        return []
    names, parameters = zip(*module.named_parameters(), strict=True)
    mine = torch.stack([p.detach().double().sum() for p in parameters] + [
        p.detach().double().abs().sum() for p in parameters
    ]).cpu()  # fmt: skip
    gathered = [torch.empty_like(mine) for _ in range(context.world_size)]
    dist.all_gather(gathered, mine)
    differs = torch.stack(gathered).ne(gathered[0]).any(0)
    count = len(names)
    return [names[i] for i in range(count) if differs[i] or differs[count + i]]


def barrier(context: DistributedContext) -> None:
    if context.world_size > 1:
        dist.barrier()
