"""Which precision is chosen on which hardware: every detected case forced, and the real machine read."""

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sentcl import precision
from sentcl.config import ConfigError
from sentcl.hardware import Hardware, detect, give_back_memory

ZEN1 = Hardware("cpu", "AVX2", frozenset({"avx2", "fma"}), mkldnn_bf16=False)
ZEN3 = Hardware("cpu", "AVX2", frozenset({"avx2", "fma", "vaes"}), mkldnn_bf16=False)
ZEN4 = Hardware(
    "cpu", "AVX512", frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}), mkldnn_bf16=True
)
SAPPHIRE_RAPIDS = Hardware("cpu", "AVX512", frozenset({"avx512f", "amx_bf16", "amx_int8", "amx_tile"}), True)
EMULATED = Hardware("cpu", "AVX512", frozenset({"avx512f", "avx512_bf16"}), mkldnn_bf16=False)
V100 = Hardware("cuda", cuda_capability=(7, 0), name="V100")
H100 = Hardware("cuda", cuda_capability=(9, 0), name="H100")


@pytest.mark.parametrize(
    ("hardware", "chosen", "words"),
    [
        (ZEN1, "fp32", "no native bf16"),
        (ZEN3, "fp32", "no native bf16"),
        (ZEN4, "bf16", "avx512_bf16"),
        (SAPPHIRE_RAPIDS, "bf16", "amx_bf16"),
        (EMULATED, "fp32", "no native bf16"),  # the flag alone is not enough: oneDNN must run it
        (V100, "fp32", "compute capability 8.0"),
        (H100, "bf16", "9.0"),
    ],
)
def test_auto_picks_bf16_only_where_it_is_native(hardware, chosen, words):
    kind, reason = precision.choose("auto", hardware)
    assert kind == chosen and words in reason


def test_an_explicit_setting_is_kept_whatever_the_hardware():
    assert precision.choose("fp32", ZEN4)[0] == "fp32"
    assert precision.choose("bf16", ZEN1)[0] == "bf16"
    assert precision.choose("none", ZEN4)[0] == "fp32"  # the spellings of earlier recipes
    assert precision.choose("bfloat16", ZEN1)[0] == "bf16"


def test_one_vocabulary_and_auto_decided_once(caplog):
    assert [precision.canonical(n) for n in ("none", "bfloat16", "fp32", "int8")] == [
        "fp32",
        "bf16",
        "fp32",
        "int8",
    ]
    with pytest.raises(ConfigError, match=r"training.autocast: 'int8' is not one of fp32, bf16, auto"):
        precision.canonical("int8", "training.autocast", precision.TRAINING)
    with pytest.raises(ConfigError, match=r"--dtype: 'fp8' is not one of"):
        precision.canonical("fp8", "--dtype")
    precision._auto.cache_clear()
    with caplog.at_level("INFO", logger="sentcl.precision"):
        first = precision.decide("auto", "cpu")
        assert all(precision.decide("auto", "cpu") == first for _ in range(3))
    assert sum("precision auto:" in r.getMessage() for r in caplog.records) == 1  # detected and said once
    assert first == precision.choose("auto", detect("cpu"))[0]


def test_vnni_is_read_from_the_flags():
    assert ZEN4.vnni and SAPPHIRE_RAPIDS.vnni and not ZEN1.vnni


def test_this_machine_is_read_not_assumed():
    here = detect("cpu")
    assert here.device == "cpu" and here.cpu_capability == torch.backends.cpu.get_cpu_capability()
    flags = Path("/proc/cpuinfo").read_text()
    assert here.native_bf16 == (here.mkldnn_bf16 and ("avx512_bf16" in flags or "amx_bf16" in flags))


# give_back_memory (issue 70 item 9: a study's process kept every run's freed memory)
def resident_mb() -> float:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_memory_goes_back_to_the_system():
    if "libc" not in (ctypes.util.find_library("c") or ""):
        pytest.fail("this test needs Linux's glibc (CI's machine), where sentcl's runs free memory this way")
    # 64 KB blocks come from the heap (below glibc's mmap threshold); one kept in every 50 pins the heap's
    # top, so freeing the rest leaves free pages in the middle that the heap keeps
    blocks = [bytearray(64 * 1024) for _ in range(4000)]  # about 250 MB
    kept = blocks[::50]
    del blocks
    before = resident_mb()
    give_back_memory()
    after = resident_mb()
    assert before - after > 100, (before, after)  # most of the ~245 MB freed is handed back
    assert len(kept) == 80


# map_large_allocations: a run's large tensors, once freed, go back to the system by themselves
HEAP_PROBE = """
import json, sys
import numpy as np
from sentcl.hardware import map_large_allocations, give_back_memory
def resident():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
mapped = map_large_allocations() if sys.argv[1] == "mapped" else False
np.ones(8 << 17)  # an 8 MiB block freed: glibc's default raises its threshold above the 2 MiB blocks below
blocks = [np.ones(1 << 18) for _ in range(150)]  # 150 blocks of 2 MiB, written
kept = blocks[::30]
del blocks
print(json.dumps({"mapped": mapped, "resident": resident(), "kept": len(kept)}))
"""


def heap_probe(mode: str, environment: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | (environment or {})
    done = subprocess.run(
        [sys.executable, "-c", HEAP_PROBE, mode], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout)


def test_large_allocations_mapped_go_back_when_freed_without_a_trim():
    if "libc" not in (ctypes.util.find_library("c") or ""):
        pytest.fail("this test needs Linux's glibc (CI's machine), where sentcl's runs free memory this way")
    default, mapped = heap_probe("default"), heap_probe("mapped")
    assert mapped["mapped"] and not default["mapped"]
    # 295 of the 300 MiB were freed: by default the heap keeps them (pinned by the 5 kept), mapped they go
    assert default["resident"] - mapped["resident"] > 150, (default, mapped)


def test_the_users_own_threshold_stands():
    probe = heap_probe("mapped", {"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert probe["mapped"] is False
