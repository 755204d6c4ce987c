"""A training recipe: the ``model``, ``data``, ``objective`` and ``training`` sections of a YAML file.

Every key is typed; an unknown key anywhere is an error naming it (e.g. ``training.lr``).
``objective.name`` picks the objective from the registry; its other keys fill that objective's config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sentcl import precision
from sentcl.config import ConfigError, apply_overrides, from_dict, load_yaml, shown, to_dict
from sentcl.data import DataConfig
from sentcl.evaluation.registry import Options
from sentcl.model import ModelConfig
from sentcl.objectives import REGISTRY
from sentcl.training.child_tuning import ChildTuningConfig
from sentcl.training.distributed import check_device_name


@dataclass
class RunConfig:
    """The ``training:`` keys every run has (contrastive training and MLM pre-training)."""

    output_dir: str = "runs/simcse"
    overwrite_output_dir: bool = False
    batch_size: int = 64
    learning_rate: float = 3e-5
    epochs: int = 1
    #: > 0: stop after this many optimiser steps (overrides epochs)
    max_steps: int = 0
    warmup_steps: int = 0
    #: used when warmup_steps is 0: a fraction of the total steps
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 42
    #: evaluate every N steps (and at the end); 0 = no evaluation
    eval_steps: int = 125
    eval_task: str = "stsb-dev"
    #: the task's options, as ``sentcl evaluate`` takes them: aggregation (STS12–16), transfer_protocol
    eval_options: Options = field(default_factory=Options)
    #: evaluation data folder; null = $SENTCL_DATA, else the download cache
    eval_data_dir: str | None = None
    logging_steps: int = 10
    #: write a resumable checkpoint (output_dir/checkpoint) every N steps; 0 = never
    checkpoint_steps: int = 0
    #: continue from output_dir/checkpoint (exactly: same batches, masks and updates)
    resume: bool = False
    device: str = "auto"
    #: the forward passes' precision (sentcl/precision.py): fp32, bf16 (autocast), or auto (the default):
    #: bf16 where the device multiplies bf16 natively (CPUs with avx512_bf16 / amx_bf16, GPUs from compute
    #: capability 8.0), fp32 elsewhere, and the log says which and why. A protocol that must not depend on
    #: the machine pins it. Earlier recipes' none / bfloat16 are read as fp32 / bf16.
    autocast: str = "auto"
    #: experiment trackers that receive every logged record: tensorboard, wandb, mlflow (optional installs)
    report_to: list[str] = field(default_factory=list)

    def validate(self) -> None:
        self.autocast = precision.canonical(self.autocast, "autocast", precision.TRAINING)
        positive = {
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "logging_steps": self.logging_steps,
        }
        for key, value in positive.items():
            if not value > 0:
                raise ConfigError(f"{key}: must be positive, got {value}")
        if self.epochs < 1 and self.max_steps <= 0:
            raise ConfigError("epochs: must be at least 1 unless max_steps is set")
        for key in (
            "max_steps",
            "warmup_steps",
            "eval_steps",
            "weight_decay",
            "max_grad_norm",
            "checkpoint_steps",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must not be negative, got {getattr(self, key)}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio: must be in [0, 1), got {self.warmup_ratio}")
        if not 0 <= self.seed < 2**32:  # numpy's and CUDA's generators take a 32-bit unsigned seed
            raise ConfigError(f"seed: must be in [0, 2**32), got {shown(self.seed)}")
        check_device_name(self.device)
        unknown = [name for name in self.report_to if name not in ("tensorboard", "wandb", "mlflow")]
        if unknown:
            raise ConfigError(f"report_to: {unknown[0]!r} is not one of tensorboard, wandb, mlflow")


@dataclass
class LoopConfig(RunConfig):
    """``training:`` section of a contrastive recipe. Defaults are SimCSE's unsupervised BERT-base recipe;
    the best model by ``eval_task`` is kept (SimCSE's policy)."""

    #: also evaluate the initial model (step 0), for a before/after comparison
    eval_at_start: bool = False
    #: with eval_at_start: the initial model is a candidate for the best model too, so ``model/`` is the
    #: starting model when no evaluated step beats it (a protocol's "step 0 is a candidate")
    start_is_candidate: bool = False
    #: at each evaluation also log ℓ_align, ℓ_uniform and the spectrum summary on STS-B dev
    log_geometry: bool = True
    #: the precision the evaluations inside the run encode in (sentcl/precision.py): fp32 (the default: a
    #: choice that does not depend on the machine), bf16, or auto (bf16 where native). A choice on a large
    #: retrieval corpus costs an encoding of it per evaluation; bf16 makes it several times cheaper
    eval_dtype: str = "fp32"
    #: read the start's evaluation (step 0) from the cache where the same model was evaluated on the same
    #: task before ($SENTCL_CACHE/start-evaluations, keyed by its weights): runs from one start share it
    cache_start_evaluation: bool = False
    #: what chooses ``model/`` among the evaluated steps (selection.py): stsb-dev, the STS metric of eval_task
    #: (SimCSE's policy); align_uniform or loss, label-free, on ``select_holdout`` held-out training examples
    select_by: Literal["stsb-dev", "align_uniform", "loss"] = "stsb-dev"
    #: held-out training examples for a label-free select_by (taken out of training; unused for stsb-dev)
    select_holdout: int = 1000
    #: GradCache: embed the batch in chunks of this many examples to bound activation memory; 0 = off
    gradcache_chunk: int = 0
    drop_last: bool = False
    #: Child-Tuning F/D: update only a child network of the backbone (see child_tuning.py)
    child_tuning: ChildTuningConfig = field(default_factory=ChildTuningConfig)

    def validate(self) -> None:
        super().validate()
        self.eval_dtype = precision.canonical(self.eval_dtype, "eval_dtype", precision.TRAINING)
        if self.gradcache_chunk < 0:
            raise ConfigError(f"gradcache_chunk: must not be negative, got {self.gradcache_chunk}")
        if self.start_is_candidate and not (self.eval_at_start and self.eval_steps > 0):
            raise ConfigError("start_is_candidate: needs eval_at_start: true and eval_steps > 0")
        if self.eval_task == "none" and self.select_by == "stsb-dev" and self.eval_steps > 0:
            raise ConfigError(
                "eval_task: none leaves nothing to select by: set select_by to align_uniform or loss"
            )
        if self.select_by != "stsb-dev" and self.eval_steps == 0:
            raise ConfigError(f"select_by: {self.select_by} selects among evaluations; eval_steps is 0")


@dataclass
class TrainConfig:
    model: ModelConfig
    data: DataConfig
    objective_name: str = "simcse"
    objective: Any = None  # the registry's config dataclass for objective_name
    training: LoopConfig = field(default_factory=LoopConfig)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": to_dict(self.model),
            "data": to_dict(self.data),
            "objective": {"name": self.objective_name, **to_dict(self.objective)},
            "training": to_dict(self.training),
        }


SECTIONS = ("model", "data", "objective", "training")


def recipe_from_dict(data: dict[str, Any]) -> TrainConfig:
    unknown = [key for key in data if key not in SECTIONS]
    if unknown:
        raise ConfigError(f"unknown config key {unknown[0]!r} (sections: {', '.join(SECTIONS)})")
    for key in SECTIONS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ConfigError(f"{key}: expected a mapping")
    objective = dict(data.get("objective") or {})
    name = objective.pop("name", "simcse")
    if not isinstance(name, str) or name not in REGISTRY:
        raise ConfigError(f"objective.name: {shown(name)} is not one of {', '.join(REGISTRY)}")
    objective_class, objective_config = REGISTRY[name]
    model = from_dict(ModelConfig, data.get("model") or {}, prefix="model")
    objective_class.check_pooler(model.pooler)  # the objective's own rules (objectives/base.py)
    data_config = from_dict(DataConfig, data.get("data") or {}, prefix="data")
    objective_class.check_views(data_config.n_views)
    return TrainConfig(
        model=model,
        data=data_config,
        objective_name=name,
        objective=from_dict(objective_config, objective, prefix="objective"),
        training=from_dict(LoopConfig, data.get("training") or {}, prefix="training"),
    )


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML recipe and apply ``key=value`` overrides (e.g. ``training.learning_rate=1e-5``)."""
    data = load_yaml(path)
    apply_overrides(data, overrides or [])
    try:
        return recipe_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def replace_training(config: Any, **changes: Any) -> Any:
    """``config`` (a recipe of either kind: training or pre-training) with its ``training:`` section
    changed; training/kinds.py re-exports it beside the one recipe loader."""
    return dataclasses.replace(config, training=dataclasses.replace(config.training, **changes))
