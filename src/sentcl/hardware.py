"""What the machine at hand can do, read at run time: never assumed from the machine a default was tuned on.

CPU: torch's dispatch level (``torch.backends.cpu.get_cpu_capability()``: DEFAULT, AVX2, AVX512, …), the
instruction-set flags of ``/proc/cpuinfo`` (``avx512_bf16`` / ``amx_bf16`` for native bf16 products,
``avx512_vnni`` / ``avx_vnni`` / ``amx_int8`` for int8 dot products) and whether oneDNN runs bf16 here.
GPU: the compute capability (bf16 tensor cores from 8.0, Ampere).

``sentcl.precision`` turns that into the precision of the forward passes, with the reason in words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def _mkldnn_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@dataclass(frozen=True)
class Hardware:
    device: str  # "cpu" or "cuda"
    cpu_capability: str = "DEFAULT"
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    mkldnn_bf16: bool = False
    cuda_capability: tuple[int, int] | None = None
    name: str = ""

    @property
    def native_bf16(self) -> bool:
        if self.device == "cuda":
            return self.cuda_capability is not None and self.cuda_capability >= (8, 0)
        return self.mkldnn_bf16 and any(flag in self.cpu_flags for flag in BF16_FLAGS)

    @property
    def vnni(self) -> bool:
        return any(flag in self.cpu_flags for flag in VNNI_FLAGS)

    def describe(self) -> str:
        if self.device == "cuda":
            major, minor = self.cuda_capability or (0, 0)
            return f"{self.name or 'GPU'} (compute capability {major}.{minor})"
        extras = [flag for flag in (*BF16_FLAGS, *VNNI_FLAGS) if flag in self.cpu_flags]
        return f"CPU {self.cpu_capability}" + (f" with {', '.join(extras)}" if extras else "")


def detect(device: torch.device | str = "cpu") -> Hardware:
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return Hardware(
            "cuda",
            cuda_capability=tuple(torch.cuda.get_device_capability(index)),  # type: ignore[arg-type]
            name=torch.cuda.get_device_name(index),
        )
    return Hardware("cpu", torch.backends.cpu.get_cpu_capability(), _cpu_flags(), _mkldnn_bf16())
