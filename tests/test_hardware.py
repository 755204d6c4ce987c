"""Which precision is chosen on which hardware: every detected case forced, and the real machine read."""

from pathlib import Path

import pytest
import torch

from sentcl.hardware import Hardware, choose_autocast, detect

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
        (ZEN1, "none", "no native bf16"),
        (ZEN3, "none", "no native bf16"),
        (ZEN4, "bfloat16", "avx512_bf16"),
        (SAPPHIRE_RAPIDS, "bfloat16", "amx_bf16"),
        (EMULATED, "none", "no native bf16"),  # the flag alone is not enough: oneDNN must run it
        (V100, "none", "compute capability 8.0"),
        (H100, "bfloat16", "9.0"),
    ],
)
def test_auto_picks_bf16_only_where_it_is_native(hardware, chosen, words):
    kind, reason = choose_autocast("auto", hardware)
    assert kind == chosen and words in reason


def test_an_explicit_setting_is_kept_whatever_the_hardware():
    assert choose_autocast("none", ZEN4)[0] == "none"
    assert choose_autocast("bfloat16", ZEN1)[0] == "bfloat16"


def test_vnni_is_read_from_the_flags():
    assert ZEN4.vnni and SAPPHIRE_RAPIDS.vnni and not ZEN1.vnni


def test_this_machine_is_read_not_assumed():
    here = detect("cpu")
    assert here.device == "cpu" and here.cpu_capability == torch.backends.cpu.get_cpu_capability()
    flags = Path("/proc/cpuinfo").read_text()
    assert here.native_bf16 == (here.mkldnn_bf16 and ("avx512_bf16" in flags or "amx_bf16" in flags))
