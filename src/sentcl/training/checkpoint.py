"""Checkpoints that resume a run exactly, and that are either whole or detected as broken.

A checkpoint is a folder written atomically (temp folder + rename; a crash or a full disk leaves the
previous checkpoint as it was) holding everything the next step depends on:

  model.safetensors       encoder (backbone + head) and objective tensors
  optimizer.pt            optimizer and scheduler state
  rng.pt                  torch (CPU and CUDA), numpy and python RNG states, and the data order's generator
                          state at the start of the current epoch
  state.json              step, epoch, position in the epoch, best/initial metrics
  manifest.json           size and sha256 of every file above, written last

Loading verifies the manifest first, so a truncated or corrupt checkpoint is named and never half-loaded.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from sentcl.atomic_write import atomic_folder, recover_folder

MANIFEST = "manifest.json"
FILES = ("model.safetensors", "optimizer.pt", "rng.pt", "state.json")


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or corrupt; the message names the file."""


@dataclass
class LoopState:
    step: int = 0
    epoch: int = 0
    #: batches of the current epoch already trained on
    batch_in_epoch: int = 0
    initial_metrics: dict | None = None
    best_metrics: dict | None = None
    best_step: int | None = None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def rng_states() -> dict:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def restore_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def save_checkpoint(
    folder: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    state: LoopState,
    epoch_order_state: torch.Tensor,
) -> Path:
    """``model`` holds every trained tensor (encoder and objective); ``epoch_order_state`` is the data
    generator's state at the start of the current epoch."""
    with atomic_folder(folder) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(
            {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optimizer.pt"
        )
        torch.save(rng_states() | {"epoch_order": epoch_order_state}, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
        manifest = {
            name: {"bytes": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)} for name in FILES
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return Path(folder)


def verify_checkpoint(folder: str | Path) -> dict:
    """Check every file against the manifest; return the manifest or raise CheckpointError."""
    folder = Path(folder)
    recover_folder(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no checkpoint to resume from")
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
        if _sha256(path) != manifest[name]["sha256"]:
            raise CheckpointError(f"{path}: corrupt (sha256 differs from the manifest)")
    return manifest


def load_checkpoint(
    folder: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler
) -> tuple[LoopState, torch.Tensor]:
    """Restore model, optimizer, scheduler and RNG states in place; return the loop state and the data
    generator's state at the start of the checkpoint's epoch. Verified before anything is loaded."""
    folder = Path(folder)
    verify_checkpoint(folder)
    load_model(model, str(folder / "model.safetensors"))
    states = torch.load(folder / "optimizer.pt", weights_only=False)  # our own, sha256-verified file
    optimizer.load_state_dict(states["optimizer"])
    scheduler.load_state_dict(states["scheduler"])
    rng = torch.load(folder / "rng.pt", weights_only=False)
    restore_rng_states(rng)
    state = LoopState(**json.loads((folder / "state.json").read_text(encoding="utf-8")))
    return state, rng["epoch_order"]
