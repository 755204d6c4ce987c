"""The training loop, top to bottom: data → encoder → objective → AdamW step → evaluate → keep the best.

A run writes into ``output_dir``:
  config.yaml     the resolved recipe
  metrics.jsonl   one JSON object per logging or evaluation step
  model/          the best model by the evaluation metric (SimCSE's policy), written atomically;
                  the final model when evaluation is off
  checkpoint/     every ``checkpoint_steps``: everything needed to resume exactly (see checkpoint.py)
  summary.json    initial / best metrics and where the best was found
The data order is explicit (one seeded permutation per epoch), so a resumed run sees the very batches,
dropout masks and updates an uninterrupted run would have seen. Under torchrun see distributed.py.
"""

from __future__ import annotations

import itertools
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm.auto import tqdm
from transformers import set_seed

from sentcl import finite_json, precision
from sentcl.analysis.alignment_uniformity import geometry_snapshot, stsb_probe
from sentcl.atomic_write import atomic_file, recover_folder, stale_temporaries
from sentcl.config import ConfigError, expand_path
from sentcl.data import build_dataset, read_records
from sentcl.data.collate import group_by_length, rank_slice
from sentcl.data.streaming import StreamingDataset, check_streaming
from sentcl.embedder import CachedEmbedder
from sentcl.evaluation import TaskSpecError, resolve_data_dir
from sentcl.evaluation.tasks import Evaluator, build_evaluator
from sentcl.model import SentenceEncoder
from sentcl.objectives import REGISTRY, build_objective
from sentcl.training import distributed
from sentcl.training.checkpoint import LoopState, load_checkpoint, save_checkpoint
from sentcl.training.child_tuning import ChildTuning
from sentcl.training.gradcache import chunkable, forward_backward
from sentcl.training.guards import (
    UNTOUCHED,
    TrainingError,
    finite_evaluation,
    require_finite_metric,
    require_finite_weights,
)
from sentcl.training.metrics_log import MetricsLog
from sentcl.training.model_card import card_data, write_model_card
from sentcl.training.optim import build_optimizer, build_scheduler
from sentcl.training.recipe import TrainConfig
from sentcl.training.selection import HeldOutProbe, hold_out, selection
from sentcl.training.trackers import Trackers, check_trackers

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    output_dir: Path
    steps: int
    primary_metric: str | None = None
    initial_metrics: dict[str, float] | None = None
    best_metrics: dict[str, float] | None = None
    best_step: int | None = None
    history: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        keys = ("steps", "primary_metric", "initial_metrics", "best_metrics", "best_step")
        return {k: getattr(self, k) for k in keys} | {"model": str(self.output_dir / "model")}


def autocast_context(name: str, device: torch.device):
    """``training.autocast`` as a context for the forward passes (sentcl/precision.py decides ``auto``
    once per process and device, and says which and why)."""
    return precision.autocast(name, device)


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


@dataclass
class Steps:
    """What a run trains and how it judges itself. ``run_steps`` is the one loop every command runs
    (``sentcl train``, and ``sentcl pretrain`` with the masked-LM objective)."""

    objective: torch.nn.Module  # holds the encoder
    dataset: Any  # ContrastiveDataset, WordNetViewsDataset, SentencesDataset: collate, lengths, describe
    #: every tensor the optimiser updates (and Child-Tuning_D's masks, so a checkpoint holds them)
    trained: torch.nn.ModuleList
    #: (rank 0) the evaluation at a step: a record with "eval" (metrics) and whatever else to log
    evaluate: Callable[[int], dict] | None = None
    #: what to do with an evaluation's metrics (keep the best model); returns a progress-bar note
    evaluated: Callable[[int, dict[str, float], LoopState], str | None] | None = None
    eval_at_start: bool = False
    group_by_length: bool = False
    drop_last: bool = False
    gradcache_chunk: int = 0
    child: ChildTuning | None = None
    name: str = "training"
    recipe: dict = field(default_factory=dict)  # the resolved recipe, for the trackers' run config


@dataclass
class Outcome:
    state: LoopState
    history: list[dict]  # the metrics log's records
    last_metrics: dict[str, float] | None  # the last evaluation's


def run_steps(loop, steps: Steps, context, device: torch.device, output_dir: Path, resume: bool) -> Outcome:
    """Data order → forward/backward → AdamW step, with logging, evaluation and checkpoints; exact resume
    from ``output_dir/checkpoint``."""
    dataset, trained, objective = steps.dataset, steps.trained, steps.objective
    whole, short = divmod(len(dataset), loop.batch_size)
    if short and not steps.drop_last:
        # Under torchrun each rank takes an equal slice (data/collate.py: rank_slice): the short last batch
        # loses its remainder, and is dropped when that leaves a rank nothing.
        lost = short % context.world_size
        if lost and context.is_main:
            logger.warning(
                "each epoch's last batch: %d of the %d examples left out, so that the %d processes get "
                "equal slices", lost, short, context.world_size,
            )  # fmt: skip
    batches_per_epoch = whole + (1 if short >= context.world_size and not steps.drop_last else 0)
    if batches_per_epoch == 0:
        raise ConfigError(
            f"training.batch_size: {loop.batch_size} exceeds the {len(dataset)} examples (drop_last)"
        )
    total_steps = loop.max_steps if loop.max_steps > 0 else loop.epochs * batches_per_epoch
    warmup = loop.warmup_steps or int(loop.warmup_ratio * total_steps)
    optimizer = build_optimizer(trained, loop.learning_rate, loop.weight_decay)
    scheduler = build_scheduler(optimizer, warmup, total_steps)
    order = torch.Generator().manual_seed(loop.seed)  # the data order, one permutation per epoch
    streaming = isinstance(dataset, StreamingDataset)  # its order is its own (seed, epoch, block)
    lengths = dataset.lengths() if steps.group_by_length else None
    state = LoopState()
    if resume:
        state, epoch_order_state = load_checkpoint(output_dir / "checkpoint", trained, optimizer, scheduler)
        order.set_state(epoch_order_state)
        logger.info("resumed from %s at step %d", output_dir / "checkpoint", state.step)
    elif steps.child is not None and steps.child.config.mode == "D":
        trained.train()  # with dropout, as in training
        steps.child.estimate_fisher(
            fisher_batches(dataset, loop, context, device),
            lambda batch: forward_backward(objective, batch, steps.gradcache_chunk),
            trained,
            reduce=lambda fisher: distributed.sum_over_ranks(fisher, context),  # one child on every rank
            clip=loop.max_grad_norm,
        )
    logger.info(
        "%d examples × %d views, %d steps of batch %d on %s", len(dataset), dataset.n_views, total_steps,
        loop.batch_size, device,
    )  # fmt: skip
    trackers = None
    if loop.report_to and context.is_main:
        trackers = Trackers(loop.report_to, output_dir, steps.recipe, resume)
    log = MetricsLog(
        output_dir / "metrics.jsonl",
        state.step if resume else None,
        enabled=context.is_main,
        trackers=trackers,
    )
    evaluate = steps.evaluate if context.is_main else None  # rank 0 evaluates, logs and saves
    progress = tqdm(
        total=total_steps, initial=state.step, desc=steps.name, unit="step", disable=not context.is_main
    )

    def evaluation(step: int) -> dict[str, float]:
        assert evaluate is not None
        require_finite_weights(trained, step)
        started = time.perf_counter()
        record = evaluate(step)
        log.write({"step": step} | record | {"eval_seconds": round(time.perf_counter() - started, 2)})
        note = steps.evaluated(step, record["eval"], state) if steps.evaluated else None
        if note:
            progress.set_postfix_str(note)
        objective.train()
        return record["eval"]

    last = None
    if evaluate is not None and steps.eval_at_start and state.step == 0:
        state.initial_metrics = last = evaluation(0)
    objective.train()  # the encoder with dropout; frozen copies stay in eval mode
    amp = autocast_context(loop.autocast, device)
    chosen = precision.decide(loop.autocast, device)
    why = precision.reason(device) if precision.canonical(loop.autocast) == "auto" else "as the recipe says"
    logger.info("training.autocast %s: %s (%s)", precision.canonical(loop.autocast), chosen, why)
    window, window_tokens, started = [], 0, time.perf_counter()

    def epoch_batches(start: int):
        """This rank's slice of every global batch of the current epoch from ``start`` on."""
        if streaming:  # (drop_last: the epoch's short last batch is left out, as below)
            stream = dataset.epoch_batches(
                loop.seed, state.epoch, start, loop.batch_size, context.rank, context.world_size
            )
            yield from itertools.islice(stream, batches_per_epoch - start)
            return
        permutation = torch.randperm(len(dataset), generator=order)
        if steps.group_by_length:
            permutation = group_by_length(permutation, lengths, loop.batch_size, order)
        for position in range(start, batches_per_epoch):
            indices = permutation[position * loop.batch_size : (position + 1) * loop.batch_size]
            indices = rank_slice(indices, context.rank, context.world_size)
            yield dataset.collate([dataset[int(i)] for i in indices])

    try:
        while state.step < total_steps:
            epoch_order_state = order.get_state()
            for position, batch in enumerate(epoch_batches(state.batch_in_epoch), start=state.batch_in_epoch):
                batch = batch.to(device)
                with amp:
                    output = forward_backward(objective, batch, steps.gradcache_chunk)
                if not torch.isfinite(output.loss):
                    optimizer.zero_grad(set_to_none=True)
                    raise TrainingError(
                        f"step {state.step + 1}: loss is {output.loss.item()} (batch from "
                        f"{dataset.describe(batch.indices)}); {UNTOUCHED}"
                    )
                distributed.average_gradients(trained, context)
                if loop.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(trained.parameters(), loop.max_grad_norm)
                if steps.child is not None:  # on the clipped gradients, as the reference's optimiser step
                    steps.child.apply(state.step + 1)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                state.step += 1
                state.batch_in_epoch = position + 1
                terms = {k: v.item() for k, v in output.terms.items()} | {"loss": output.loss.item()}
                window.append({k: distributed.mean_over_ranks(v, context) for k, v in terms.items()})
                window_tokens += int(batch.attention_mask.sum())  # real (non-padding) tokens, this rank
                progress.update(1)
                if state.step % loop.logging_steps == 0 or state.step == total_steps:
                    means = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
                    elapsed = round(time.perf_counter() - started, 4)
                    lr = scheduler.get_last_lr()[0]
                    log.write(
                        {"step": state.step, **means, "lr": lr, "seconds": elapsed, "tokens": window_tokens}
                    )
                    progress.set_description(f"{steps.name} loss {means['loss']:.3g}")
                    window, window_tokens = [], 0
                evaluates = loop.eval_steps and state.step % loop.eval_steps == 0
                if evaluates or state.step == total_steps:  # before anything is evaluated or saved
                    require_equal_replicas(trained, context, state.step)
                if loop.eval_steps and (state.step % loop.eval_steps == 0 or state.step == total_steps):
                    if evaluate is not None:
                        last = evaluation(state.step)
                    distributed.barrier(context)
                if context.is_main and loop.checkpoint_steps and state.step % loop.checkpoint_steps == 0:
                    save_checkpoint(
                        output_dir / "checkpoint", trained, optimizer, scheduler, state, epoch_order_state
                    )
                if state.step >= total_steps:
                    break
            else:
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
    finally:
        progress.close()
        log.close()
    return Outcome(state, log.records, last)


def train(config: TrainConfig, also_measure: Callable[[CachedEmbedder], dict] | None = None) -> TrainResult:
    """Train ``config``; ``also_measure(embedder)`` (optional) adds metrics to every evaluation's record,
    under "measured", that choose nothing (a study's report set)."""
    loop = config.training
    context = distributed.setup()
    if loop.batch_size % context.world_size:
        raise ConfigError(
            f"training.batch_size: {loop.batch_size} is not divisible by {context.world_size} ranks"
        )
    output_dir = Path(loop.output_dir)
    resume = check_output_dir(output_dir, loop.overwrite_output_dir, loop.resume)
    set_seed(loop.seed)
    device = distributed.select_device(loop.device, context)

    # Everything that can fail on bad input is checked before the first step.
    train_file = expand_path(config.data.train_file, "data.train_file")
    if config.data.streaming:
        check_streaming(config.data, loop)
        records = None
    else:
        records = read_records(train_file, header=config.data.header)
    evaluator, probe, held = None, None, None
    if loop.select_by != "stsb-dev":  # label-free selection: its examples never reach training
        records, held = hold_out(records, loop.select_holdout)
        if context.world_size > 1 and loop.select_by == "loss":
            raise ConfigError("training.select_by: loss is evaluated on rank 0 alone; use align_uniform")
    if loop.eval_steps > 0 and loop.eval_task != "none":
        evaluator, data_dir = task_evaluator(loop)
        if loop.log_geometry:
            try:
                probe = stsb_probe(data_dir, "dev")
            except FileNotFoundError as exc:
                logger.warning("geometry is not logged: %s", exc)
    encoder = SentenceEncoder.from_config(config.model).to(device)
    if records is None:  # data.streaming: validated (every row read once), not held
        dataset = StreamingDataset(train_file, config.data, encoder.tokenizer, config.data.shuffle_buffer)
    else:
        dataset = build_dataset(config.data, records, encoder.tokenizer)
    chooser = selection(loop.select_by, evaluator.primary if evaluator else None) if loop.eval_steps else None
    if held is not None:
        held = HeldOutProbe(
            build_dataset(config.data, held, encoder.tokenizer), encoder.tokenizer, loop.batch_size,
            config.data.max_length,
        )  # fmt: skip
    # the objective holds the encoder (and any frozen or momentum copy of it); tables it builds from the
    # data (EASE's entities) come from the dataset
    objective = build_objective(config.objective_name, config.objective, encoder, dataset).to(device)
    if loop.gradcache_chunk > 0 and not chunkable(objective):
        raise ConfigError(
            f"training.gradcache_chunk: objective {config.objective_name!r} (or its MLM term) runs passes "
            f"of its own whose gradients GradCache cannot chunk; set it to 0"
        )
    check_trackers(loop.report_to)  # an uninstalled tracker fails here, before anything is written
    recipe = config.to_dict()
    if context.is_main:  # the inputs are checked: only now is anything written
        open_output_dir(output_dir, recipe)
    distributed.barrier(context)
    torch.manual_seed(
        loop.seed + context.rank
    )  # same initial weights everywhere, other dropout masks per rank
    child = None
    if loop.child_tuning.mode != "off":
        child = ChildTuning(loop.child_tuning, encoder.backbone, loop.seed, optimised=objective)

    def evaluate(step: int) -> dict:
        with finite_evaluation(step):
            return measure(step)

    def measure(step: int) -> dict:
        embedder = CachedEmbedder(encoder)  # STS and geometry share one encoding of each sentence
        metrics = evaluator(embedder) if evaluator is not None else {}
        if held is not None:
            metrics |= held(objective, encoder, device)
        require_finite_metric(chooser.key, metrics[chooser.key], step)  # before any SVD of it
        record = {"eval": metrics}
        if probe is not None:
            record["geometry"] = geometry_snapshot(embedder, probe)
        if also_measure is not None:
            record["measured"] = also_measure(embedder)
        return record

    def keep_the_best(step: int, metrics: dict[str, float], state: LoopState) -> str | None:
        """``model/`` is the best evaluated model by ``training.select_by`` (step 0 only when asked)."""
        if step == 0 and not loop.start_is_candidate:
            return None
        if chooser.better(metrics, state.best_metrics):
            state.best_metrics, state.best_step = metrics, step
            encoder.save(output_dir / "model", overwrite=True)
            return f"best {chooser.key}={metrics[chooser.key]:.4g} @ {step}"
        return None

    steps = Steps(
        objective=objective,
        dataset=dataset,
        trained=torch.nn.ModuleList([objective] + ([child] if child is not None else [])),
        evaluate=evaluate if chooser is not None else None,
        evaluated=keep_the_best,
        eval_at_start=loop.eval_at_start,
        group_by_length=config.data.group_by_length,
        drop_last=loop.drop_last,
        gradcache_chunk=loop.gradcache_chunk,
        child=child,
        recipe=recipe,
    )
    outcome = run_steps(loop, steps, context, device, output_dir, resume)
    state = outcome.state
    if loop.eval_steps == 0 and context.is_main:
        require_finite_weights(steps.trained, state.step)
        encoder.save(output_dir / "model", overwrite=True)
    result = TrainResult(
        output_dir, state.step, chooser.key if chooser else None, state.initial_metrics,
        state.best_metrics, state.best_step, outcome.history,
    )  # fmt: skip
    if context.is_main:
        summary = result.summary()
        with atomic_file(output_dir / "summary.json") as handle:
            finite_json.dump(summary, handle, indent=2)
        kept = [r for r in outcome.history if r.get("step") == state.best_step and "geometry" in r]
        paper = REGISTRY[config.objective_name][0].paper
        summary = {k: v for k, v in summary.items() if k != "model"}
        card = card_data(recipe, paper, summary, kept[-1]["geometry"] if kept else None)
        write_model_card(output_dir / "model", card)
    distributed.barrier(context)
    return result


def require_equal_replicas(trained: torch.nn.Module, context, step: int) -> None:
    """Under torchrun: stop (on every rank alike) when the ranks' copies of the model differ."""
    drifted = distributed.check_replicas(trained, context)
    if drifted:
        raise TrainingError(
            f"step {step}: the ranks' replicas differ ({len(drifted)} tensors, the first {drifted[0]}); "
            f"data-parallel training has diverged, nothing is saved, {UNTOUCHED}"
        )


def fisher_batches(dataset, loop, context, device):
    """Child-Tuning_D's estimation batches: a seeded order apart from the training order; ``fisher_batches:
    0`` goes once over the whole training set (the reference's estimate), one batch at a time."""
    permutation = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(loop.seed + 1))
    available = len(dataset) // loop.batch_size  # full batches: equal slices on every rank
    count = loop.child_tuning.fisher_batches or available
    for position in range(min(count, max(available, 1))):
        indices = permutation[position * loop.batch_size : (position + 1) * loop.batch_size]
        indices = rank_slice(indices, context.rank, context.world_size)  # equal slices, as in training
        if len(indices) == 0:
            break
        yield dataset.collate([dataset[int(i)] for i in indices]).to(device)


def summarise(result: TrainResult) -> str:
    """Two lines a person reads after a run: the metric before and after training."""
    if result.primary_metric is None or result.best_metrics is None:
        return f"trained {result.steps} steps; model saved to {result.output_dir / 'model'}"
    key = result.primary_metric
    lowest = key.startswith("heldout_")  # label-free selection (selection.py): lower is better
    digits = 4 if lowest else 2
    lines = []
    if result.initial_metrics is not None:
        lines.append(f"before training: {key} = {result.initial_metrics[key]:.{digits}f}")
    kept = "lowest" if lowest else "best"
    lines.append(
        f"after training:  {key} = {result.best_metrics[key]:.{digits}f} ({kept}, step {result.best_step})"
    )
    if lowest and "stsb_dev_spearman" in result.best_metrics:
        lines.append(
            f"                 stsb_dev_spearman = {result.best_metrics['stsb_dev_spearman']:.2f} there"
        )
    lines.append(f"model: {result.output_dir / 'model'}")
    if math.isnan(result.best_metrics[key]):
        lines.append("warning: the metric is NaN")
    return "\n".join(lines)
