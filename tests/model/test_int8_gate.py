"""int8 as one of ``auto``'s candidates (model/int8_gate.py): only for a model whose int8 STS-B dev stays
within the tolerance of its fp32 one, measured once and recorded; fp32, with the reason, otherwise. The
timings that choose among the candidates are faked here (int8 the faster), and tested in
test_auto_precision.py."""

import json
import logging

import pytest

from sentcl.hardware import Hardware
from sentcl.model import ModelConfig, SentenceEncoder, auto_precision, for_inference, int8_gate
from sentcl.model import inference as inference_module
from sentcl.model.onnx import OnnxEncoder

AVX2 = Hardware("cpu", "AVX2", frozenset({"avx2", "fma"}), mkldnn_bf16=False)
AMX = Hardware("cpu", "AVX512", frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_int8"}), True)


@pytest.fixture
def avx2_cpu(monkeypatch, tmp_path, stsb_data_dir):
    """This machine seen as an AVX2-only CPU, with its own cache and the tiny STS-B as SENTCL_DATA."""
    monkeypatch.setattr(inference_module, "detect", lambda device="cpu": AVX2)
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SENTCL_DATA", str(stsb_data_dir))
    auto_precision._say.cache_clear()
    monkeypatch.setattr(auto_precision, "time_candidates", lambda candidates, texts: int8_fastest(candidates))
    return tmp_path / "cache" / "int8-checks"


def int8_fastest(candidates) -> dict[str, float]:
    return {name: 200.0 if name == "int8" else 100.0 for name in candidates}


def tiny(tiny_model_dir) -> SentenceEncoder:
    return SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg")).eval()


def test_auto_takes_int8_once_its_check_passes_and_reuses_the_record(avx2_cpu, tiny_model_dir, monkeypatch):
    chosen = for_inference(tiny(tiny_model_dir), "auto")
    assert isinstance(chosen, OnnxEncoder) and chosen.precision == "int8"
    (record_file,) = avx2_cpu.glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["fp32"] - record["int8"] <= int8_gate.TOLERANCE and record["vnni"] is False
    assert record["key"] == record_file.stem and record["source"] == str(tiny_model_dir)

    def no_second_check(*args, **kwargs):
        raise AssertionError("the check ran again")

    monkeypatch.setattr(int8_gate, "check", no_second_check)
    assert isinstance(for_inference(tiny(tiny_model_dir), "auto"), OnnxEncoder)
    # the same weights with another pooler are another model for the check
    other = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="cls_before_pooler"))
    with pytest.raises(AssertionError, match="ran again"):
        for_inference(other, "auto")


def test_a_model_whose_int8_loses_more_keeps_fp32_and_says_so(avx2_cpu, tiny_model_dir, monkeypatch, caplog):
    scores = iter([80.0, 79.5])  # fp32 first, int8 second: 0.5 lost
    monkeypatch.setattr(int8_gate, "stsb_dev", lambda embedder, data_dir: next(scores))
    with caplog.at_level(logging.INFO, logger="sentcl.model.auto_precision"):
        chosen = for_inference(tiny(tiny_model_dir), "auto")
    assert isinstance(chosen, SentenceEncoder) and chosen.inference_autocast is None
    assert "int8: this model's int8 STS-B dev 79.50 against fp32 80.00 (-0.50, more than 0.3" in caplog.text
    # explicit precisions are never second-guessed
    assert isinstance(for_inference(tiny(tiny_model_dir), "int8"), OnnxEncoder)
    assert isinstance(for_inference(tiny(tiny_model_dir), "fp32"), SentenceEncoder)


def test_without_data_to_check_against_auto_keeps_fp32_and_writes_nothing(
    avx2_cpu, tiny_model_dir, monkeypatch, tmp_path, caplog
):
    monkeypatch.delenv("SENTCL_DATA")
    with caplog.at_level(logging.INFO, logger="sentcl.model.auto_precision"):
        chosen = for_inference(tiny(tiny_model_dir), "auto")
    assert isinstance(chosen, SentenceEncoder)
    assert "no STS-B dev data is on disk" in caplog.text and not avx2_cpu.exists()


def test_a_broken_record_is_measured_again(avx2_cpu, tiny_model_dir, caplog):
    encoder = tiny(tiny_model_dir)
    key = int8_gate.model_key(encoder, AVX2.vnni, __import__("onnxruntime").__version__)
    avx2_cpu.mkdir(parents=True)
    (avx2_cpu / f"{key}.json").write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="sentcl.model.int8_gate"):
        assert isinstance(for_inference(encoder, "auto"), OnnxEncoder)
    assert "unreadable int8 check" in caplog.text
    assert json.loads((avx2_cpu / f"{key}.json").read_text())["key"] == key


def test_native_bf16_is_a_candidate_beside_int8_and_the_faster_wins(
    monkeypatch, tmp_path, tiny_model_dir, stsb_data_dir
):
    """On a CPU with native bf16 (AMX, Zen 4) int8 is a candidate too: on Zen 4 it was the faster one."""
    monkeypatch.setattr(inference_module, "detect", lambda device="cpu": AMX)
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SENTCL_DATA", str(stsb_data_dir))
    monkeypatch.setattr(auto_precision, "time_candidates", lambda candidates, texts: int8_fastest(candidates))
    monkeypatch.setattr(int8_gate, "stsb_dev", lambda embedder, data_dir: 80.0)  # every path keeps quality
    assert isinstance(for_inference(tiny(tiny_model_dir), "auto"), OnnxEncoder)
    (record,) = (tmp_path / "cache" / "auto-precision").glob("*.json")
    assert set(json.loads(record.read_text())["speeds"]) == {"fp32", "bf16", "int8"}
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache-2"))
    bf16_fastest = {"fp32": 100.0, "bf16": 300.0, "int8": 200.0}
    monkeypatch.setattr(auto_precision, "time_candidates", lambda candidates, texts: bf16_fastest)
    chosen = for_inference(tiny(tiny_model_dir), "auto")
    assert isinstance(chosen, SentenceEncoder) and chosen.inference_autocast is not None


def test_the_int8_export_is_kept_with_the_record_and_a_broken_one_is_made_again(
    avx2_cpu, tiny_model_dir, monkeypatch, caplog
):
    for_inference(tiny(tiny_model_dir), "auto")
    (folder,) = [path for path in avx2_cpu.iterdir() if path.is_dir()]
    export = int8_gate.export_onnx
    monkeypatch.setattr(int8_gate, "export_onnx", lambda *a, **k: pytest.fail("exported again"))
    assert for_inference(tiny(tiny_model_dir), "auto").source == str(tiny_model_dir)
    (folder / "model.onnx").write_bytes(b"not a graph")
    monkeypatch.setattr(int8_gate, "export_onnx", export)
    with caplog.at_level(logging.WARNING, logger="sentcl.model.int8_gate"):
        assert isinstance(for_inference(tiny(tiny_model_dir), "auto"), OnnxEncoder)
    assert "cannot be loaded" in caplog.text and (folder / "model.onnx").stat().st_size > 1000
