"""Experiment tracking (``training.report_to``): every record the run writes to ``metrics.jsonl`` also goes
to TensorBoard, Weights & Biases or MLflow, through each library's own writer.

* ``tensorboard``: ``torch.utils.tensorboard.SummaryWriter`` in ``OUTPUT/tensorboard``; the recipe as text;
* ``wandb``: a run in ``OUTPUT/wandb`` with the recipe as its config, offline unless an API key or
  ``WANDB_MODE`` says otherwise (no network is needed);
* ``mlflow``: a run in ``$MLFLOW_TRACKING_URI``, else a local file store in ``OUTPUT/mlruns`` (MLflow 3
  keeps that store in maintenance mode; a database URI in ``$MLFLOW_TRACKING_URI`` gets its newer
  features), with the recipe's keys as parameters.

The libraries are optional: asking for one that is not installed is one error naming the ``pip install``
to run, before training starts. Scalars are named as in ``metrics.jsonl``, nested records flattened with
``/`` (``eval/stsb_dev_spearman``, ``geometry/align``); only numbers are sent.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from sentcl.atomic_write import mark_folder, owned_by_sentcl
from sentcl.config import ConfigError

#: the folders trackers write in a run folder, and the kind sentcl's marker gives them
TRACKER_FOLDERS, TRACKER_KIND = ("tensorboard", "wandb", "mlruns"), "tracker"
TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}  # name → pip package


def check_trackers(names: list[str]) -> None:
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(f"training.report_to: {name!r} is not one of {', '.join(TRACKERS)}")
        if importlib.util.find_spec(name) is None:
            raise ConfigError(f"training.report_to: {name} is not installed: pip install {TRACKERS[name]}")


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics record, nested keys joined with ``/``; ``step`` itself is left out."""
    scalars: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            scalars |= flatten(value, f"{name}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and name != "step":
            scalars[name] = float(value)
    return scalars


def _flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    params: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            params |= _flat_params(value, f"{prefix}{key}.")
        else:
            params[f"{prefix}{key}"] = str(value)
    return params


class Trackers:
    """The trackers a run reports to; ``log(record)`` sends a metrics record to all of them."""

    def __init__(self, names: list[str], output_dir: Path, config: dict[str, Any], resume: bool = False):
        check_trackers(names)
        self.writers: list[tuple[str, Any]] = []
        # the folders the trackers make in the run folder: marked as sentcl's at close (what --overwrite
        # may remove) where this run made them or sentcl's marker is already there; a user's are left as found
        self.folders = [
            folder
            for folder in (Path(output_dir) / entry for entry in TRACKER_FOLDERS)
            if not folder.exists() or owned_by_sentcl(folder, TRACKER_KIND)
        ]
        for name in names:
            self.writers.append((name, getattr(self, f"_open_{name}")(Path(output_dir), config, resume)))

    @staticmethod
    def _open_tensorboard(output_dir: Path, config: dict[str, Any], resume: bool) -> Any:
        import yaml
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(output_dir / "tensorboard"))
        if not resume:
            writer.add_text("recipe", "```\n" + yaml.safe_dump(config, sort_keys=False) + "\n```")
        return writer

    @staticmethod
    def _open_wandb(output_dir: Path, config: dict[str, Any], resume: bool) -> Any:
        import wandb

        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
        (output_dir / "wandb").mkdir(parents=True, exist_ok=True)
        name = output_dir.name
        return wandb.init(project="sentcl", name=name, dir=str(output_dir), config=config, mode=mode)  # type: ignore[arg-type]  # WANDB_MODE as wandb reads it

    @staticmethod
    def _open_mlflow(output_dir: Path, config: dict[str, Any], resume: bool) -> Any:
        import mlflow

        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # a local file store needs no server or database; MLflow 3 keeps it in maintenance mode and
            # refuses it unless allowed (a user's own MLFLOW_ALLOW_FILE_STORE is left as it is)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((output_dir / "mlruns").resolve().as_uri())
        run = mlflow.start_run(run_name=output_dir.name)
        if not resume:
            params = _flat_params(config)
            for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters per call
                mlflow.log_params(dict(list(params.items())[start : start + 100]))
        return run

    def log(self, record: dict[str, Any]) -> None:
        step, scalars = int(record["step"]), flatten(record)
        if not scalars:
            return
        for name, writer in self.writers:
            if name == "tensorboard":
                for key, value in scalars.items():
                    writer.add_scalar(key, value, step)
            elif name == "wandb":
                writer.log(scalars, step=step)
            else:
                import mlflow

                mlflow.log_metrics(scalars, step=step)

    def close(self) -> None:
        for name, writer in self.writers:
            if name == "tensorboard":
                writer.close()
            elif name == "wandb":
                writer.finish()
            else:
                import mlflow

                mlflow.end_run()
        self.writers = []
        for folder in self.folders:
            if folder.is_dir() and not folder.is_symlink():
                mark_folder(folder, TRACKER_KIND)
