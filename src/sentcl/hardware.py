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

from sentcl.config import ConfigError

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


def describe_machine() -> str:
    """This machine in one line, for records of where a figure was measured: the CPU's model name
    (/proc/cpuinfo), the threads torch uses and what :func:`detect` finds."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{names[0] if names else 'CPU'}, {torch.get_num_threads()} threads, {detect('cpu').describe()}"


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


def resolve_device(name: str, where: str, local_rank: int = 0) -> torch.device:
    """``auto``: the (``local_rank``-th) GPU when there is one, else the CPU; a named device torch cannot
    parse or this machine lacks is one ConfigError naming ``where`` (the key or the option), before anything
    loads."""
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{where}: {name[:80]!r} is not a device (auto, cpu, cuda, cuda:N, mps)") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        build = "this torch has no CUDA" if torch.version.cuda is None else f"{count} GPU(s) visible"
        if count == 0 or (device.index or 0) >= count:
            raise ConfigError(f"{where}: {name}, but {build}; use auto or cpu")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{where}: {name}, but MPS is not available here; use auto or cpu")
    return device


def give_back_memory() -> None:
    """Collect Python's garbage, then hand the C heap's free pages back to the system (glibc's
    ``malloc_trim``). A process that runs one training or evaluation after another (a study, ``--seeds``)
    otherwise keeps each run's freed memory as its own: measured in one process over five ``sentcl adapt``
    runs on SciFact, no tensor or array was left alive after a run, yet the resident memory grew from 0.6 to
    4.4 GB, and ``malloc_trim`` took it from 2.1 back to 0.8 GB after the first. Nothing happens where the C
    library has no ``malloc_trim`` (musl, macOS)."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


#: glibc's ``mallopt`` parameter for the mmap threshold (``M_MMAP_THRESHOLD`` in malloc.h)
_M_MMAP_THRESHOLD = -3
#: allocations from 1 MiB up are mapped on their own by a process that runs one run after another
RUNS_MMAP_THRESHOLD = 1 << 20


def map_large_allocations(threshold: int = RUNS_MMAP_THRESHOLD) -> bool:
    """Have glibc map every allocation of ``threshold`` bytes or more on its own and unmap it when freed, for
    a process that runs one training or evaluation after another (a study, ``--seeds``). By default glibc
    raises its threshold after the first large block is freed (up to 32 MiB), so the large tensors of later
    steps come from the heap, and the freed pieces between the ones still alive cannot go back: measured over
    two 4-step ``sentcl adapt`` runs on SciFact, the peak was 2.7 GB by default and 1.8 GB with a fixed
    1 MiB threshold (docs/reports/training.md). Returns whether it took effect: not where the C library has
    no ``mallopt`` (musl, macOS), nor when the user set ``MALLOC_MMAP_THRESHOLD_`` themselves (theirs
    stands)."""
    import ctypes
    import ctypes.util
    import os

    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: Linux's VmHWM (its own memory's high-water mark; the
    ``getrusage`` figure carries over a forked parent's across exec), else ``getrusage``'s."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
