"""int8 for ``auto`` only where it keeps quality (the choice among paths: model/auto_precision.py).

ONNX Runtime's dynamic int8 runs on integer kernels that every x86-64 CPU of this century has (AVX2;
VNNI / AMX where present): measured 2× fp32 on an AVX2-only Zen 3 (docs/benchmarks.md). Dynamic
quantisation costs some quality, and how much depends on the model: so
``auto`` takes int8 for a model only after its STS-B dev Spearman in int8 has been measured within
``TOLERANCE`` points of its fp32 one, checked once per model and kind of int8 kernel and recorded in
``$SENTCL_CACHE/int8-checks/<key>.json`` (the key: a hash of the weights, pooler, head and maximum length,
whether the CPU has VNNI, and ONNX Runtime's version), the int8 export kept beside it (``<key>/``) so that
later runs load it instead of exporting again. A model whose int8 loses more keeps fp32 and says so.
(Whether the CPU has VNNI is in the key because ONNX Runtime's int8 kernels without it, AVX2's, compute
differently: a result measured on one kind is not taken for the other.)

The check needs STS-B dev on disk (``$SENTCL_DATA`` or sentcl's cached SentEval data; it never downloads)
and the ``onnx`` extra; without them int8 is not one of ``auto``'s candidates, and the record says why.
``--dtype`` always overrides.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TypeVar

import torch

from sentcl.atomic_write import atomic_file
from sentcl.evaluation.data_dir import DataDirError, resolve_data_dir
from sentcl.evaluation.sts import STSEvaluator
from sentcl.extras import MissingExtraError, require
from sentcl.hardware import Hardware, describe_machine
from sentcl.hub_files import cache_dir
from sentcl.model.backbone import ModelLoadError
from sentcl.model.onnx import ONNX_FILE, OnnxEncoder, export_onnx, onnx_refusal

logger = logging.getLogger(__name__)
R = TypeVar("R")

#: the most STS-B dev Spearman (×100) int8 may lose against fp32 for ``auto`` to take it
TOLERANCE = 0.3
#: changes when the quantisation recipe of model/onnx.py changes, so old records are not reused
RECIPE = "dynamic-qint8-per-channel-v1"


@dataclass(frozen=True)
class Int8Check:
    """One model's STS-B dev in fp32 and in int8 on this kind of int8 kernel."""

    key: str
    source: str
    fp32: float
    int8: float
    tolerance: float
    vnni: bool
    onnxruntime: str
    machine: str
    checked: str  # ISO date

    @property
    def loss(self) -> float:
        return self.fp32 - self.int8

    @property
    def passed(self) -> bool:
        return self.loss <= self.tolerance

    def describe(self) -> str:
        verdict = "within" if self.passed else "more than"
        return (
            f"int8 STS-B dev {self.int8:.2f} against fp32 {self.fp32:.2f} ({-self.loss:+.2f}, {verdict} "
            f"{self.tolerance}; checked {self.checked})"
        )


def model_key(encoder, vnni: bool, runtime: str) -> str:
    """What the int8 check of ``encoder`` depends on: its weights and how it pools (the embedding path
    exported), the kind of integer kernel and the runtime's version, and the quantisation recipe."""
    digest = hashlib.sha256()
    head = getattr(encoder, "head", None)  # a static encoder has no head, pooler or output modules
    head = head is not None and head.used_when_encoding()
    modules = [module.kind for module in getattr(encoder, "output_modules", [])]
    pooler, length = getattr(encoder, "pooler", None), getattr(encoder, "max_length", None)
    digest.update(json.dumps([RECIPE, pooler, length, head, modules, vnni, runtime]).encode())
    for name, tensor in sorted(encoder.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().numpy().tobytes())
    return digest.hexdigest()[:32]


def record_path(key: str) -> Path:
    return cache_dir() / "int8-checks" / f"{key}.json"


def digest_key(parts: object) -> str:
    """A cached record's name: 32 hex digits of the SHA-256 of ``parts`` as JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def write_record(path: Path, data: object, indent: int | None = 2) -> None:
    """``data`` (a dataclass, or anything JSON takes) written at ``path`` atomically, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as handle:
        handle.write(json.dumps(asdict(data) if is_dataclass(data) else data, indent=indent) + "\n")  # type: ignore[arg-type]


def read_record(path: Path, kind: type[R], key: str, what: str) -> R | None:
    """The dataclass ``kind`` recorded at ``path`` for ``key``, or None: none yet, or a record that does not
    read or is another's (said as a warning naming the file: it is measured again and rewritten)."""
    if not path.is_file():
        return None
    try:
        record = kind(**json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, OSError) as exc:
        logger.warning("%s: unreadable %s (%s); measuring again", path, what, exc)
        return None
    if getattr(record, "key", None) != key:
        logger.warning("%s: the record is for another model; measuring again", path)
        return None
    return record


def load_record(key: str) -> Int8Check | None:
    """The recorded check for ``key``, or None (measured again)."""
    return read_record(record_path(key), Int8Check, key, "int8 check")


def stsb_dev(embedder, data_dir: Path) -> float:
    return float(STSEvaluator(data_dir, "stsb-dev")(embedder)["stsb_dev_spearman"])


def check(encoder, int8_encoder, key: str, vnni: bool, runtime: str, data_dir: Path) -> Int8Check:
    """Measure ``encoder`` (fp32) and its int8 export on STS-B dev and record the result."""
    fp32_encoder = encoder.with_dtype("fp32")
    record = Int8Check(
        key=key,
        source=str(encoder.source),
        fp32=round(stsb_dev(fp32_encoder, data_dir), 4),
        int8=round(stsb_dev(int8_encoder, data_dir), 4),
        tolerance=TOLERANCE,
        vnni=vnni,
        onnxruntime=runtime,
        machine=describe_machine(),
        checked=datetime.date.today().isoformat(),
    )
    write_record(record_path(key), record)
    return record


@functools.cache
def _say(message: str) -> None:
    logger.info("precision auto: %s", message)


def int8_export(encoder, key: str) -> OnnxEncoder:
    """``encoder``'s int8 export, from the cache (``<key>/``) or exported into it now."""
    folder = cache_dir() / "int8-checks" / key
    loaded = None
    if (folder / ONNX_FILE).is_file():
        try:
            loaded = OnnxEncoder.load(folder)
        except ModelLoadError as exc:
            logger.warning("%s; exporting it again", exc)
    if loaded is None:  # a folder in sentcl's own cache, replaced whole
        loaded = OnnxEncoder.load(export_onnx(encoder, folder, int8=True, overwrite=True))
    loaded.source = encoder.source
    return loaded


def int8_candidate(
    encoder, hardware: Hardware, data_dir: str | Path | None = None, key: str | None = None
) -> tuple[OnnxEncoder | None, str, Int8Check | None]:
    """(``encoder``'s int8 export, why, the check) where its recorded (or now measured) check passed; (None,
    why not, the check if there is one) otherwise. The check runs once per model and kind of int8 kernel;
    ``key``: its ``model_key`` where the caller has it already (the weights are hashed once)."""
    refusal = onnx_refusal(encoder)
    if refusal is not None:
        return None, f"int8 runs on an ONNX graph: {refusal}", None
    try:
        runtime = require("onnxruntime", "onnx", "int8").__version__
        for module in ("onnx", "onnxscript"):
            require(module, "onnx", "int8")
    except MissingExtraError:
        return None, "int8 needs the onnx extra (pip install 'sentcl[onnx]')", None
    if key is None:
        with torch.no_grad():
            key = model_key(encoder, hardware.vnni, runtime)
    record = load_record(key)
    int8 = None
    if record is None:
        try:
            folder = resolve_data_dir(data_dir, download=False)
        except DataDirError:
            return (
                None,
                (
                    "int8 is not yet checked for this model and no STS-B dev data is on disk to check it "
                    "(set SENTCL_DATA, or run sentcl evaluate once)"
                ),
                None,
            )
        if not (folder / "stsb").is_dir():
            return None, f"{folder} has no STS-B to check int8 against", None
        logger.info(
            "precision auto: checking this model's int8 against fp32 on STS-B dev once (recorded in %s)",
            record_path(key),
        )
        int8 = int8_export(encoder, key)
        record = check(encoder, int8, key, hardware.vnni, runtime, folder)
    if not record.passed:
        return None, f"this model's {record.describe()}", record
    return (int8 or int8_export(encoder, key)), record.describe(), record


def _said(message: str) -> str:
    _say(message)
    return message
