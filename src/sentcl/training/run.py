"""The run lifecycle every command shares (``sentcl train``, ``sentcl pretrain``): check the output folder
(never a user's: ``--overwrite`` or ``--resume``), set the seed and the device, look up the evaluation task,
check the trackers, open the folder (only once every input is checked, so a failed start writes nothing),
and at the end write ``summary.json`` atomically.

A run writes into ``output_dir``:
  config.yaml     the resolved recipe
  metrics.jsonl   one JSON object per logging or evaluation step
  model/          the kept model, written atomically
  checkpoint/     every ``checkpoint_steps``: everything needed to resume exactly (see checkpoint.py)
  summary.json    what the run measured and where its model is
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from transformers import set_seed

from sentcl import finite_json
from sentcl.atomic_write import atomic_file, recover_folder, stale_temporaries
from sentcl.config import ConfigError, expand_path
from sentcl.evaluation import TaskSpecError, resolve_data_dir
from sentcl.evaluation.tasks import Evaluator, build_evaluator
from sentcl.training import distributed
from sentcl.training.distributed import DistributedContext
from sentcl.training.trackers import check_trackers

logger = logging.getLogger(__name__)


@dataclass
class RunStart:
    """Where a run writes, whether it resumes, and where it computes."""

    output_dir: Path
    resume: bool
    context: DistributedContext
    device: torch.device


def begin(loop, torchrun: bool = True) -> RunStart:
    """The checks every run makes before reading its inputs: the processes (``torchrun``: whether it may run
    in several), the output folder, the seed and the device. Writes nothing."""
    context = distributed.setup()
    if not torchrun and context.world_size > 1:
        raise ConfigError("this command runs in one process (no torchrun)")
    if loop.batch_size % context.world_size:
        raise ConfigError(
            f"training.batch_size: {loop.batch_size} is not divisible by {context.world_size} ranks"
        )
    output_dir = Path(loop.output_dir)
    resume = check_output_dir(output_dir, loop.overwrite_output_dir, loop.resume)
    set_seed(loop.seed)
    return RunStart(output_dir, resume, context, distributed.select_device(loop.device, context))


def open_run(start: RunStart, loop, recipe: dict) -> None:
    """Once every input is checked: the trackers' installs, then the folder and its config.yaml (rank 0)."""
    check_trackers(loop.report_to)  # an uninstalled tracker fails here, before anything is written
    if start.context.is_main:
        open_output_dir(start.output_dir, recipe)
    distributed.barrier(start.context)


def finish_run(start: RunStart, summary: dict) -> None:
    """``summary.json``, written atomically by rank 0."""
    if start.context.is_main:
        with atomic_file(start.output_dir / "summary.json") as handle:
            finite_json.dump(summary, handle, indent=2)


def task_evaluator(loop) -> tuple[Evaluator, Path]:
    """``training.eval_task`` — any task of the registry (evaluation/tasks.py) whose primary metric then
    chooses the kept model — on ``training.eval_data_dir`` (or $SENTCL_DATA, or the download cache),
    refused before training when its files are missing."""
    data_dir = resolve_data_dir(
        loop.eval_data_dir and expand_path(loop.eval_data_dir, "training.eval_data_dir")
    )
    try:
        evaluator = build_evaluator(data_dir, loop.eval_task)
    except TaskSpecError as exc:
        raise ConfigError(f"training.eval_task: {exc}") from None
    if evaluator.missing:
        reason = next(iter(evaluator.missing.values()))
        raise ConfigError(f"training.eval_task: {loop.eval_task!r} cannot be evaluated: {reason}")
    return evaluator, data_dir


def check_output_dir(path: Path, overwrite: bool, resume: bool) -> bool:
    """Refuse a non-empty folder without --overwrite or --resume; write nothing. Returns whether there is
    a checkpoint to resume from (--resume before the first checkpoint starts from step 0)."""
    if path.exists() and any(path.iterdir()) and not (overwrite or resume):
        raise ConfigError(
            f"training.output_dir: {path} is not empty; pass --overwrite "
            f"(training.overwrite_output_dir=true) or --resume"
        )
    if not resume:
        return False
    recover_folder(path / "checkpoint")
    if not (path / "checkpoint").is_dir():
        logger.warning("%s: no checkpoint yet, so --resume starts from step 0", path)
        return False
    return True


#: what a run writes at the top of its output folder (trackers write their own folders beside these)
RUN_ENTRIES = ("config.yaml", "metrics.jsonl", "summary.json", "model", "checkpoint", "mlm_loss.png")


def open_output_dir(path: Path, config: dict) -> None:
    """Once the inputs are checked: the folder, without the temporary siblings a killed run left of its own
    entries (``.checkpoint.tmp-XXXXXXXX``, ``.model.tmp-…``, ``.metrics.jsonl.tmp-…``; a user's file that
    merely starts with a dot is not one), and the resolved recipe. A symbolic link where the run writes is
    refused: writing through it would change a file outside the run folder."""
    path.mkdir(parents=True, exist_ok=True)
    links = [name for name in RUN_ENTRIES if (path / name).is_symlink()]
    if links:
        raise ConfigError(
            f"training.output_dir: {path / links[0]} is a symbolic link; sentcl writes its own files in a "
            f"run folder, never through a link (remove it or choose another folder)"
        )
    for stale in stale_temporaries(path, RUN_ENTRIES):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    with atomic_file(path / "config.yaml") as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
