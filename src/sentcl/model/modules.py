"""The modules a sentence-transformers folder puts after its Pooling: ``Dense`` layers and ``Normalize``.

A sentence-transformers model is a chain (modules.json): Transformer → Pooling → [Dense …] → [Normalize].
sentcl's encoder runs the first two itself (backbone, pooler); this module reads, runs and writes what comes
after, so a model gives the vectors it gives in sentence-transformers (all-MiniLM-L6-v2 ends in Normalize:
unit vectors) and a folder sentcl saves keeps them.

* ``read_chain(folder)`` → ``Chain`` (the Pooling config's folder and the output modules), or None for a
  folder without modules.json. A module sentcl does not run (LayerNorm, WeightedLayerPooling, a custom
  class …) is one ModelLoadError naming modules.json and the module: its vectors would differ.
* ``Dense``: sentence-transformers' Dense (Linear, then an activation from a fixed list; no code is ever
  imported by name). Trained with the encoder, as sentence-transformers trains it.
* ``Normalize``: unit L2 norm. Applied on the embedding path (``encode``), not on the training path:
  cosine objectives do not see a scale, and the few that do (CLINE's dot product, VaSCL's radius) are
  defined on the pooled vectors.
* ``write_modules(folder, modules, first_index)`` writes each module's folder as sentence-transformers does
  (``{i}_Dense/config.json`` + ``model.safetensors``, ``{i}_Normalize/``) and returns the modules.json rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from sentcl.model.backbone import ModelLoadError, read_json_object

MODULES_FILE = "modules.json"

#: sentence-transformers' activation names (its Dense config's ``activation_function``) → torch class
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "torch.nn.modules.activation.Tanh": nn.Tanh,
    "torch.nn.modules.linear.Identity": nn.Identity,
    "torch.nn.modules.activation.ReLU": nn.ReLU,
    "torch.nn.modules.activation.GELU": nn.GELU,
    "torch.nn.modules.activation.Sigmoid": nn.Sigmoid,
    "torch.nn.modules.activation.SiLU": nn.SiLU,
}
_ACTIVATION_NAMES = {cls: name for name, cls in ACTIVATIONS.items()}


class Dense(nn.Module):
    """sentence-transformers' Dense: activation(Linear(x)); its weights under ``linear.*``."""

    kind = "Dense"

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        activation = activation or "torch.nn.modules.activation.Tanh"
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")
        self.activation_name = activation
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))

    @property
    def out_features(self) -> int:
        return self.linear.out_features

    def config(self) -> dict:
        return {
            "in_features": self.linear.in_features,
            "out_features": self.linear.out_features,
            "bias": self.linear.bias is not None,
            "activation_function": self.activation_name,
        }

    @classmethod
    def read(cls, folder: Path, allow_pickle: bool = False) -> Dense:
        """A Dense module from its folder (config.json and model.safetensors, or a pytorch_model.bin read
        with torch's weights-only loader where ``allow_pickle``); one ModelLoadError naming the file."""
        config_file = folder / "config.json"
        config = _read_object(config_file)
        try:
            dense = cls(
                _positive_int(config, "in_features", config_file),
                _positive_int(config, "out_features", config_file),
                bool(config.get("bias", True)),
                config.get("activation_function"),
            )
        except ValueError as exc:
            raise ModelLoadError(f"{config_file}: {exc}") from None
        weights_file = folder / "model.safetensors"
        try:
            if weights_file.is_file():
                state = load_file(str(weights_file))
            elif (folder / "pytorch_model.bin").is_file() and allow_pickle:
                weights_file = folder / "pytorch_model.bin"
                state = torch.load(str(weights_file), map_location="cpu", weights_only=True)
            else:
                raise ModelLoadError(
                    f"{folder}: no model.safetensors (a pytorch_model.bin is read only with --allow-pickle)"
                )
            dense.load_state_dict(state)
        except (SafetensorError, RuntimeError, OSError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(
                f"{weights_file}: the Dense layer's weights cannot be read ({reason})"
            ) from None
        if not all(torch.isfinite(value).all() for value in dense.state_dict().values()):
            raise ModelLoadError(f"{weights_file}: the Dense layer holds NaN or infinite values")
        return dense

    def write(self, folder: Path) -> None:
        folder.mkdir()
        _write_json(folder / "config.json", self.config())
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))


class Normalize(nn.Module):
    """Each vector scaled to unit L2 norm (sentence-transformers' Normalize)."""

    kind = "Normalize"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2, dim=-1)

    def write(self, folder: Path) -> None:
        folder.mkdir()


OutputModule = Dense | Normalize


@dataclass
class Chain:
    """What a sentence-transformers folder's modules.json says: where its Pooling config lies (None where it
    lists no Pooling) and the modules after it, in order."""

    pooling: Path | None
    modules: list[OutputModule]


def module_kind(type_name: object) -> str | None:
    """``Transformer`` / ``Pooling`` / ``Dense`` / ``Normalize`` … for a modules.json type written by any
    sentence-transformers version (``sentence_transformers.models.Dense``, ``…base.modules.dense.Dense``)."""
    if not isinstance(type_name, str) or not type_name.startswith("sentence_transformers."):
        return None
    return type_name.rsplit(".", 1)[-1]


def read_chain(folder: Path, allow_pickle: bool = False) -> Chain | None:
    """The modules of a sentence-transformers folder, or None where it has no modules.json."""
    path = folder / MODULES_FILE
    if not folder.is_dir() or not path.is_file():
        return None
    try:
        rows = read_json_object(path, list)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    if not all(isinstance(row, dict) for row in rows):
        raise ModelLoadError(f"{path}: expected a list of modules, each a JSON object")
    kinds = [module_kind(row.get("type")) for row in rows]
    if not kinds or kinds[0] != "Transformer":
        raise ModelLoadError(
            f"{path}: the first module is {rows[0].get('type') if rows else None!r}, not a Transformer"
        )
    pooling: Path | None = None
    modules: list[OutputModule] = []
    for position, (row, kind) in enumerate(zip(rows, kinds, strict=True)):
        where = f"{path}: module {position} ({row.get('type')!r})"
        sub = _inside(row.get("path", ""), where)
        if position == 0:
            if sub not in ("", "."):
                raise ModelLoadError(
                    f"{where}: the Transformer lives in {sub!r}; sentcl reads it from the root"
                )
            continue
        if kind == "Pooling" and position == 1:
            pooling = folder / sub
        elif kind in ("Dense", "Normalize") and pooling is not None:
            modules.append(_output_module(kind, folder / sub, allow_pickle))
        else:
            raise ModelLoadError(
                f"{where}: sentcl runs Transformer → Pooling → Dense → Normalize only; this model's vectors "
                f"would differ from sentence-transformers', so it is refused"
            )
    if pooling is None and len(rows) > 1:
        raise ModelLoadError(f"{path}: the second module is not a Pooling")
    return Chain(pooling, modules)


def output_dimension(modules: list[OutputModule] | nn.ModuleList, hidden_size: int) -> int:
    """The vectors' dimension after ``modules`` (the last Dense's, or the pooled ``hidden_size``)."""
    dense = [m for m in modules if isinstance(m, Dense)]
    return dense[-1].out_features if dense else hidden_size


def check_chain(modules: list[OutputModule] | nn.ModuleList, hidden_size: int, where: str) -> None:
    """Each Dense takes the previous vector's dimension (ModelLoadError naming ``where`` otherwise)."""
    width = hidden_size
    for module in modules:
        if isinstance(module, Dense):
            if module.linear.in_features != width:
                raise ModelLoadError(
                    f"{where}: a Dense layer takes {module.linear.in_features} dimensions, but the vectors "
                    f"before it have {width}"
                )
            width = module.out_features


def write_modules(folder: Path, modules: list[OutputModule] | nn.ModuleList, first_index: int) -> list[dict]:
    """Each module's folder under ``folder``, numbered from ``first_index``; the modules.json rows."""
    rows = []
    for index, module in enumerate(cast("Iterable[OutputModule]", modules), start=first_index):
        name = f"{index}_{module.kind}"
        module.write(folder / name)
        rows.append(
            {
                "idx": index,
                "name": str(index),
                "path": name,
                "type": f"sentence_transformers.models.{module.kind}",
            }
        )
    return rows


def describe(rows: list[dict], modules: list[OutputModule] | nn.ModuleList) -> list[dict]:
    """The modules as sentcl.json records them: kind, path (``write_modules``' rows), a Dense's config."""
    return [
        {"kind": m.kind, "path": row["path"], **(m.config() if isinstance(m, Dense) else {})}
        for row, m in zip(rows, modules, strict=True)
    ]


def _read_object(path: Path) -> dict:
    """``path``'s JSON object, or one ModelLoadError naming it (missing, not JSON, not an object)."""
    try:
        value = read_json_object(path)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    if value is None:
        raise ModelLoadError(f"{path}: missing")
    return value


def _positive_int(config: dict, key: str, path: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ModelLoadError(f"{path}: {key} is {value!r}, not a positive integer")
    return value


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def read_recorded(folder: Path, rows: object, where: Path, allow_pickle: bool = False) -> list[OutputModule]:
    """The output modules a sentcl folder's sentcl.json lists (``rows``: kind and path of each)."""
    if rows is None:
        return []
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ModelLoadError(f"{where}: modules is a list of objects (kind, path)")
    modules: list[OutputModule] = []
    for row in rows:
        kind, sub = row.get("kind"), _inside(row.get("path"), f"{where}: module")
        if kind not in ("Dense", "Normalize"):
            raise ModelLoadError(f"{where}: module kind {kind!r} is not Dense or Normalize")
        modules.append(_output_module(kind, folder / sub, allow_pickle))
    return modules


def _inside(sub: object, where: str) -> str:
    """``sub`` when it names a folder inside the model (relative, no ``..``); a ModelLoadError otherwise."""
    if not isinstance(sub, str) or Path(sub).is_absolute() or ".." in Path(sub).parts:
        raise ModelLoadError(f"{where}: its path {sub!r} is not a folder inside the model")
    return sub


def _output_module(kind: str, folder: Path, allow_pickle: bool) -> OutputModule:
    return Dense.read(folder, allow_pickle) if kind == "Dense" else Normalize()
