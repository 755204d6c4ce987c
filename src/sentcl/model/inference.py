"""A model for inference in a precision (sentcl/precision.py): a ``SentenceEncoder`` in fp32 or bf16, or
an ``OnnxEncoder`` (an ONNX export, or int8 made on the fly). It sits above encoder.py and onnx.py, which
then need not import each other."""

from __future__ import annotations

from pathlib import Path

from sentcl import precision
from sentcl.config import ConfigError
from sentcl.hardware import detect, resolve_device
from sentcl.model import auto_precision
from sentcl.model.backbone import ModelLoadError
from sentcl.model.encoder import SentenceEncoder
from sentcl.model.onnx import ONNX_FILE, OnnxEncoder
from sentcl.model.static import StaticEncoder, hub_static_folder, is_static_folder


def load_encoder(name_or_path: str, pooler: str | None = None, allow_pickle: bool = False):
    """A static model (a folder, a run folder or a hub id) as ``StaticEncoder``, an exported ONNX folder as
    ``OnnxEncoder``, anything else as ``SentenceEncoder.load``."""
    folder = Path(name_or_path)
    if is_static_folder(folder) or is_static_folder(folder / "model"):  # a run folder: its model
        return StaticEncoder.load(name_or_path, pooler=pooler)
    if (hub := hub_static_folder(name_or_path)) is not None:  # a static model on the hub
        encoder = StaticEncoder.load(str(hub), pooler=pooler)
        encoder.source = name_or_path
        return encoder
    if (folder / ONNX_FILE).is_file():
        if pooler is not None:
            raise ModelLoadError(f"{name_or_path}: an ONNX export keeps the pooler it was exported with")
        return OnnxEncoder.load(folder)
    return SentenceEncoder.load(name_or_path, pooler=pooler, allow_pickle=allow_pickle)


def for_inference(
    encoder, dtype: str = "auto", where: str = "--dtype", device: str = "cpu", texts: int | None = None
):
    """``encoder`` (a ``SentenceEncoder`` or an ``OnnxEncoder``) set to run in ``dtype`` on ``device``
    (``auto``: a GPU where there is one): an ONNX export as it is (its precision fixed at export; ``auto`` and
    ``fp32`` take it; ONNX Runtime runs on the CPU), int8 exported and quantised now, fp32 / bf16 / auto by
    the encoder itself on the device. ``auto`` on a CPU takes the fastest path measured on this machine
    among fp32, native bf16 and an int8 that keeps STS-B dev within 0.3 of fp32 (model/auto_precision.py:
    measured once per model and machine, recorded; ``texts``, the size of the input where the caller knows
    it: a small input runs in fp32 rather than wait for that measurement)."""
    dtype = precision.canonical(dtype, where)
    if isinstance(encoder, StaticEncoder):  # a table lookup: fp32 on whatever device
        return encoder.with_dtype(dtype).to(resolve_device(device, "--device"))
    onnx = isinstance(encoder, OnnxEncoder) or dtype == "int8"
    if onnx and device not in ("auto", "cpu"):
        raise ConfigError(f"--device {device}: ONNX Runtime runs sentcl's ONNX and int8 models on the CPU")
    if isinstance(encoder, OnnxEncoder):
        if dtype not in ("auto", "fp32", encoder.precision):
            raise ConfigError(f"{where} {dtype}: {encoder.source} is an ONNX export in {encoder.precision}")
        return encoder
    if dtype == "int8":
        return OnnxEncoder.from_encoder(encoder, int8=True)
    placed = resolve_device(device, "--device")
    if dtype == "auto" and placed.type == "cpu":  # the fastest path measured here (model/auto_precision.py)
        return auto_precision.choose_on_cpu(encoder.to(placed), detect("cpu"), texts=texts)[0]
    return encoder.to(placed).with_dtype(dtype)
