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

import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import torch
import yaml
from transformers import set_seed

from sentcl import finite_json
from sentcl.atomic_write import atomic_file, recover_folder, remove_sentcls, stale_temporaries
from sentcl.config import ConfigError, expand_path
from sentcl.errors import MissingDataError
from sentcl.evaluation import TaskSpecError
from sentcl.evaluation.data_dir import data_dir_for
from sentcl.evaluation.tasks import Evaluator, build_evaluator
from sentcl.hardware import give_back_memory
from sentcl.training import distributed
from sentcl.training.distributed import DistributedContext
from sentcl.training.trackers import TRACKER_FOLDERS, check_trackers

if TYPE_CHECKING:
    from sentcl.training.recipe import RunConfig

logger = logging.getLogger(__name__)


@dataclass
class RunStart:
    """Where a run writes, whether it resumes, and where it computes."""

    output_dir: Path
    resume: bool
    context: DistributedContext
    device: torch.device
    #: the open lock file of the output folder (rank 0): held while the run runs
    lock: IO[str] | None = None
    #: the folder did not exist before the run
    created: bool = False


#: the lock a run holds on its output folder, so that two runs never write into one
LOCK = ".sentcl-run.lock"
#: a two-stage run's first stage (sentcl adapt --then), a run folder of its own inside the second's
FIRST_STAGE = "first-stage"
#: what a resumed run may change in its recipe: where and how it runs, not what it trains
#: a resumed run may run elsewhere, report elsewhere, and run longer (max_steps / epochs: the learning-rate
#: schedule then follows the new horizon from the resumed step); anything else changes what it trains
RESUME_MAY_CHANGE = {
    "output_dir", "resume", "overwrite_output_dir", "report_to", "eval_data_dir", "device",
    "max_steps", "epochs",
}  # fmt: skip


def begin(loop: RunConfig, torchrun: bool = True) -> RunStart:
    """The checks every run makes before reading its inputs: the processes (``torchrun``: whether it may run
    in several), the output folder and its lock (another run writing there is refused), the seed and the
    device. Writes nothing but the lock."""
    context = distributed.setup()
    if not torchrun and context.world_size > 1:
        raise ConfigError("this command runs in one process (no torchrun)")
    if loop.batch_size % context.world_size:
        raise ConfigError(
            f"training.batch_size: {loop.batch_size} is not divisible by {context.world_size} ranks"
        )
    device = distributed.select_device(loop.device, context)
    output_dir = Path(loop.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(
            f"training.output_dir: {output_dir} is a file; a run writes a folder, so name a folder"
        )
    created = not output_dir.exists()
    # the lock first: a second run into the folder is told another run holds it, whatever it finds there
    start = RunStart(output_dir, False, context, device, None, created)
    start.lock = acquire_lock(output_dir) if context.is_main else None
    try:
        start.resume = check_output_dir(output_dir, loop.overwrite_output_dir, loop.resume)
    except BaseException:
        release(start)
        raise
    set_seed(loop.seed)
    return start


@contextlib.contextmanager
def running(loop: RunConfig, torchrun: bool = True) -> Iterator[RunStart]:
    """``begin``, and the folder's lock released when the run ends, however it ends (a library caller runs
    several in one process: ``--seeds``, the reproduction)."""
    start = begin(loop, torchrun)
    try:
        yield start
    finally:
        release(start)
        give_back_memory()  # the next run of this process starts from what this one leaves, not its peak


def release(start: RunStart) -> None:
    """The lock file goes while the lock is still held (a run waiting on it then fails rather than sharing
    the folder with one that comes later); a folder the run made and never wrote into goes too, so a failed
    start leaves nothing behind."""
    if start.lock is None:
        return
    (start.output_dir / LOCK).unlink(missing_ok=True)
    start.lock.close()
    if start.created and start.output_dir.is_dir() and not any(start.output_dir.iterdir()):
        start.output_dir.rmdir()


def acquire_lock(folder: Path) -> IO[str]:
    """An exclusive, non-blocking lock on ``folder/.sentcl-run.lock`` (released when the process ends, even
    by SIGKILL); a folder another run holds is one ConfigError naming that run's process."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = (folder / LOCK).open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"training.output_dir: {folder} is being written by another sentcl run (pid {holder}); wait for "
            f"it or choose another folder"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def open_run(
    start: RunStart,
    loop: RunConfig,
    recipe: dict[str, Any],
    read_recipe: Callable[[Path], dict[str, Any]] | None = None,
) -> None:
    """Once every input is checked: the trackers' installs, then the folder and its config.yaml (rank 0).
    A resumed run must be the run it resumes: its recipe (``read_recipe`` reads the folder's config.yaml
    the same way) may differ only in where and how it runs. ``--overwrite`` replaces the previous run: its
    entries go before the new config.yaml is written (a user's own files in the folder stay)."""
    check_trackers(loop.report_to)  # an uninstalled tracker fails here, before anything is written
    previous = start.output_dir / "config.yaml"
    if loop.resume and read_recipe is not None and previous.is_file():
        check_same_run(read_recipe(previous), recipe, previous)
    if start.context.is_main:
        if loop.overwrite_output_dir and not loop.resume:
            remove_previous_run(start.output_dir)
        open_output_dir(start.output_dir, recipe)
    distributed.barrier(start.context)


def check_same_run(before: dict[str, Any], now: dict[str, Any], where: Path) -> None:
    """One ConfigError naming what a resumed run would change (a train file, a temperature, a learning rate:
    the log would say one thing and config.yaml another)."""
    changed = []
    for section in sorted(set(before) | set(now)):
        old, new = before.get(section) or {}, now.get(section) or {}
        for key in sorted(set(old) | set(new)):
            if section == "training" and key in RESUME_MAY_CHANGE:
                continue
            if old.get(key) != new.get(key):
                changed.append(f"{section}.{key} (the run: {old.get(key)!r}, now: {new.get(key)!r})")
    if changed:
        more = f" and {len(changed) - 2} more" if len(changed) > 2 else ""
        raise ConfigError(
            f"--resume: {where} was started with another recipe: {'; '.join(changed[:2])}{more}; resume it "
            f"with its own recipe (that config.yaml), or start a new run"
        )


def remove_previous_run(folder: Path) -> None:
    """``--overwrite``: the entries a previous run wrote (its model, checkpoint, log, summary, trackers), so
    that a run that fails leaves no old model beside the new config.yaml. Inside a folder only what sentcl
    wrote there goes (its marker lists it): a user's file in ``model/`` stays, and so does a folder of those
    names that sentcl did not write."""
    for name in (*RUN_ENTRIES, *TRACKER_FOLDERS):
        entry = folder / name
        if entry.is_symlink():
            continue  # refused by open_output_dir, never followed
        if entry.is_dir():
            kept = remove_sentcls(entry)
            if kept:
                logger.info("%s: kept %s, which sentcl did not write", entry, ", ".join(kept[:3]))
        elif entry.exists():
            entry.unlink()


def finish_run(start: RunStart, summary: dict[str, Any]) -> None:
    """``summary.json``, written atomically by rank 0."""
    if start.context.is_main:
        with atomic_file(start.output_dir / "summary.json") as handle:
            finite_json.dump(summary, handle, indent=2)


def task_evaluator(loop: RunConfig) -> tuple[Evaluator, Path]:
    """``training.eval_task`` — any task of the registry (evaluation/tasks.py) whose primary metric then
    chooses the kept model — on ``training.eval_data_dir`` (or $SENTCL_DATA, or the download cache),
    refused before training when its files are missing."""
    try:
        explicit = loop.eval_data_dir and expand_path(loop.eval_data_dir, "training.eval_data_dir")
        # a task named by its path may use ~ and $VARS, as training.train_file does
        task = ",".join(
            expand_path(name, "training.eval_task") if "$" in name or name.startswith("~") else name
            for name in loop.eval_task.split(",")
        )
        data_dir = data_dir_for(task, explicit)  # none for the user's own pair file or folder
        evaluator = build_evaluator(data_dir, task, loop.eval_options)
    except TaskSpecError as exc:
        raise ConfigError(f"training.eval_task: {exc}") from None
    except MissingDataError as exc:
        raise ConfigError(f"training.eval_task: {loop.eval_task!r} cannot be evaluated: {exc}") from None
    if evaluator.missing:
        reason = next(iter(evaluator.missing.values()))
        raise ConfigError(f"training.eval_task: {loop.eval_task!r} cannot be evaluated: {reason}")
    return evaluator, data_dir


def check_output_dir(path: Path, overwrite: bool, resume: bool) -> bool:
    """Refuse a non-empty folder without --overwrite or --resume; write nothing. Returns whether there is
    a checkpoint to resume from (--resume before the first checkpoint starts from step 0)."""
    if (
        path.exists()
        and any(p.name not in (LOCK, FIRST_STAGE) for p in path.iterdir())
        and not (overwrite or resume)
    ):
        raise ConfigError(
            f"training.output_dir: {path} is not empty; pass --overwrite "
            f"(training.overwrite_output_dir=true) or --resume"
        )
    if not resume:
        return False
    recover_folder(path / "checkpoint")
    checkpoint = path / "checkpoint"
    if checkpoint.is_symlink() or (checkpoint.exists() and not checkpoint.is_dir()):
        raise ConfigError(
            f"--resume: {checkpoint} is not a checkpoint folder (a file or link is there); "
            "move it away, or start again with --overwrite"
        )
    if not checkpoint.is_dir():
        logger.warning("%s: no checkpoint yet, so --resume starts from step 0", path)
        return False
    return True


#: what a run writes at the top of its output folder (trackers write their own folders beside these)
RUN_ENTRIES = ("config.yaml", "metrics.jsonl", "summary.json", "model", "checkpoint", "mlm_loss.png")


def open_output_dir(path: Path, config: dict[str, Any]) -> None:
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
