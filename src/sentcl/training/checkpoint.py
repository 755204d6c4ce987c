"""Checkpoints that resume a run exactly, and that are either whole or detected as broken.

A checkpoint is a folder written atomically (temp folder + rename; a crash or a full disk leaves the
previous checkpoint as it was) holding everything the next step depends on:

  model.safetensors       encoder (backbone + head) and objective tensors
  optimizer.safetensors   the optimizer's per-parameter tensors (AdamW's moments and step counts) …
  optimizer.json          … and the rest of its state, with the scheduler's
  rng.safetensors         torch (CPU and CUDA) and numpy RNG states, and the data order's generator state
                          at the start of the current epoch …
  rng.json                … and the rest of numpy's state and python's
  state.json              step, epoch, position in the epoch, best/initial metrics
  manifest.json           size and sha256 of every file above, written last

Nothing is pickled: tensors are safetensors, the rest JSON, so a tampered checkpoint can at worst be
refused, never run code (the manifest sits in the same folder and guards against accidents, not
attackers). Loading verifies the manifest first, so a truncated or corrupt checkpoint is named and never
half-loaded. Checkpoints of sentcl before this format (pickled ``optimizer.pt`` / ``rng.pt``) are refused
with one line, not unpickled.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from sentcl.atomic_write import atomic_folder, recover_folder
from sentcl.errors import UserError
from sentcl.training.guards import require_finite_weights

MANIFEST = "manifest.json"
FILES = (
    "model.safetensors",
    "optimizer.safetensors",
    "optimizer.json",
    "rng.safetensors",
    "rng.json",
    "state.json",
)
#: the pickled files of the previous format: never opened
LEGACY_FILES = ("optimizer.pt", "rng.pt")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that is missing, incomplete or corrupt; the message names the file."""


@dataclass
class LoopState:
    step: int = 0
    epoch: int = 0
    #: batches of the current epoch already trained on
    batch_in_epoch: int = 0
    initial_metrics: dict[str, Any] | None = None
    best_metrics: dict[str, Any] | None = None
    best_step: int | None = None
    #: the precision the run's forward passes use, decided before its first step (training/autocast.py);
    #: None in checkpoints of earlier versions (their ``auto`` followed the flag rule: decided again)
    autocast: str | None = None
    #: the processes the run trains in (torchrun's world): its data order and per-rank batches depend on it;
    #: None in checkpoints of earlier versions
    world_size: int | None = None
    #: the loss terms, tokens and seconds of the steps since the last log line (training/steps.py's
    #: LossWindow), so the first line after a resume averages the same steps as an uninterrupted run's;
    #: None in checkpoints of earlier versions and at a log line
    window: dict[str, Any] | None = None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def rng_states(epoch_order: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every RNG a step depends on, as (tensors, JSON)."""
    numpy_state: Any = np.random.get_state()  # the legacy tuple (kind, keys, pos, has_gauss, cached)
    tensors = {
        "torch": torch.get_rng_state(),
        "numpy": torch.from_numpy(numpy_state[1].astype(np.int64)),
        "epoch_order": epoch_order,
    }
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    tensors |= {f"cuda.{index}": state for index, state in enumerate(cuda)}
    version, words, gauss = random.getstate()
    extra: dict[str, Any] = {
        "cuda_devices": len(cuda),
        "numpy": {"kind": numpy_state[0], "pos": int(numpy_state[2]), "has_gauss": int(numpy_state[3]),
                  "cached_gaussian": float(numpy_state[4])},
        "python": {"version": version, "state": list(words), "gauss_next": gauss},
    }  # fmt: skip
    return tensors, extra


def restore_rng_states(tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> torch.Tensor:
    """Restore every RNG; return the data order's generator state."""
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[f"cuda.{index}"] for index in range(extra["cuda_devices"])]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    n = extra["numpy"]
    words = tensors["numpy"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], words, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = extra["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))
    return tensors["epoch_order"]


def optimizer_states(
    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The optimizer's state as (tensors keyed ``state.<param>.<name>``, JSON) and the scheduler's."""
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{name}"] = value.detach().contiguous().clone()
            else:
                scalars.setdefault(str(index), {})[name] = value
    extra = {"param_groups": state["param_groups"], "scalars": scalars, "scheduler": scheduler.state_dict()}
    return tensors, extra


def restore_optimizer_states(
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    tensors: dict[str, torch.Tensor],
    extra: dict[str, Any],
) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, values in extra["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    groups = [
        group | {"betas": tuple(group["betas"])} if "betas" in group else group
        for group in extra["param_groups"]
    ]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    scheduler.load_state_dict(extra["scheduler"])


def save_checkpoint(
    folder: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: LoopState,
    epoch_order_state: torch.Tensor,
) -> Path:
    """``model`` holds every trained tensor (encoder and objective); ``epoch_order_state`` is the data
    generator's state at the start of the current epoch. Non-finite weights are never saved."""
    require_finite_weights(model, state.step)
    with atomic_folder(folder, "checkpoint", overwrite=True) as tmp:  # the run folder is checked
        save_model(model, str(tmp / "model.safetensors"))
        for name, (tensors, extra) in (
            ("optimizer", optimizer_states(optimizer, scheduler)),
            ("rng", rng_states(epoch_order_state)),
        ):
            save_file(tensors, str(tmp / f"{name}.safetensors"))
            (tmp / f"{name}.json").write_text(json.dumps(extra), encoding="utf-8")
        (tmp / "state.json").write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
        manifest = {
            name: {"bytes": (tmp / name).stat().st_size, "sha256": sha256_of(tmp / name)} for name in FILES
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return Path(folder)


def verify_checkpoint(folder: str | Path) -> dict[str, Any]:
    """Check every file against the manifest; return the manifest or raise CheckpointError."""
    folder = Path(folder)
    recover_folder(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no checkpoint to resume from")
    legacy = [name for name in LEGACY_FILES if (folder / name).exists()]
    if legacy:
        raise CheckpointError(
            f"{folder / legacy[0]}: a pickled checkpoint of an older sentcl; sentcl never unpickles a run "
            f"folder's files, so this run cannot be resumed (start it again)"
        )
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{manifest_path}: missing (the checkpoint is incomplete)") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{manifest_path}: corrupt ({exc.msg})") from None
    for name in FILES:
        path = folder / name
        if name not in manifest or not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint")
        size, expected = path.stat().st_size, manifest[name]["bytes"]
        if size != expected:
            raise CheckpointError(f"{path}: truncated ({size} bytes; the manifest says {expected})")
        if sha256_of(path) != manifest[name]["sha256"]:
            raise CheckpointError(f"{path}: corrupt (sha256 differs from the manifest)")
    checked: dict[str, Any] = manifest
    return checked


def load_checkpoint(
    folder: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> tuple[LoopState, torch.Tensor]:
    """Restore model, optimizer, scheduler and RNG states in place; return the loop state and the data
    generator's state at the start of the checkpoint's epoch. Verified before anything is loaded."""
    folder = Path(folder)
    verify_checkpoint(folder)
    try:
        load_model(model, str(folder / "model.safetensors"))
        parts = {}
        for name in ("optimizer", "rng"):
            parts[name] = (
                load_file(str(folder / f"{name}.safetensors")),
                json.loads((folder / f"{name}.json").read_text(encoding="utf-8")),
            )
        state = LoopState(**json.loads((folder / "state.json").read_text(encoding="utf-8")))
    except (SafetensorError, json.JSONDecodeError, UnicodeDecodeError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"{folder}: not a checkpoint sentcl can read ({exc})") from None
    restore_optimizer_states(optimizer, scheduler, *parts["optimizer"])
    epoch_order = restore_rng_states(*parts["rng"])
    return state, epoch_order
