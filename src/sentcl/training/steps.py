"""The one step loop every run drives (``sentcl train``, and ``sentcl pretrain`` with the masked-LM
objective): data order → forward/backward → gradient average → clipping → Child-Tuning → AdamW step, with
logging, evaluation and checkpoints, and exact resume from ``output_dir/checkpoint``.

The data order is explicit (one seeded permutation per epoch), so a resumed run sees the very batches,
dropout masks and updates an uninterrupted run would have seen. Under torchrun see distributed.py.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from sentcl import precision
from sentcl.config import ConfigError
from sentcl.data.collate import group_by_length, rank_slice
from sentcl.data.streaming import StreamingDataset
from sentcl.training import autocast, distributed
from sentcl.training.checkpoint import LoopState, load_checkpoint, save_checkpoint
from sentcl.training.child_tuning import ChildTuning
from sentcl.training.gradcache import forward_backward
from sentcl.training.guards import UNTOUCHED, TrainingError, require_finite_weights
from sentcl.training.metrics_log import MetricsLog
from sentcl.training.optim import build_optimizer, build_scheduler
from sentcl.training.recipe import LoopConfig
from sentcl.training.trackers import Trackers

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sentcl.data.collate import Batch
    from sentcl.objectives import ObjectiveOutput
    from sentcl.training.distributed import DistributedContext
    from sentcl.training.recipe import RunConfig

logger = logging.getLogger(__name__)


def autocast_context(name: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """A run's chosen precision (``fp32`` | ``bf16``, see ``Steps.autocast``) as a context for the forward
    passes."""
    context: contextlib.AbstractContextManager[Any] = precision.autocast(name, device)
    return context


def check_world_size(state: LoopState, world_size: int, where: Path) -> None:
    """A resumed run trains in as many processes as the run it resumes (each rank's slice of the seeded
    batches, and the steps of an epoch, depend on it); a new run records its own."""
    if state.world_size is None:
        state.world_size = world_size
    elif state.world_size != world_size:
        raise ConfigError(
            f"--resume: {where} was written by a run of {state.world_size} process(es), this one has "
            f"{world_size}; resume with the same torchrun --nnodes × --nproc-per-node (the data order and "
            f"each rank's batches depend on it), or start a new run"
        )


def decide_autocast(
    loop: RunConfig, steps: Steps, state: LoopState, context: DistributedContext, device: torch.device
) -> str:
    """``training.autocast`` as this run computes: the checkpoint's choice on resume (a resumed run computes
    as it started), else decided now (``auto``: the faster step measured here, training/autocast.py) and
    kept in the state, so every checkpoint carries it."""
    if state.autocast is not None:
        logger.info("training.autocast: %s (the run's choice at its start)", state.autocast)
        return state.autocast
    encoder = getattr(steps.objective, "encoder", None)
    if encoder is None or not hasattr(encoder, "embed_tokens"):  # nothing to time: the flag rule
        chosen, why = precision.decide(loop.autocast, device), "no encoder pass to time"
    else:
        sequences = loop.batch_size // context.world_size * steps.dataset.n_views
        chosen, why = autocast.choose(loop.autocast, encoder, device, context, sequences)
    logger.info("training.autocast %s: %s (%s)", precision.canonical(loop.autocast), chosen, why)
    state.autocast = chosen
    return chosen


@dataclass
class Steps:
    """What a run trains and how it judges itself. ``run_steps`` is the one loop every command runs
    (``sentcl train``, and ``sentcl pretrain`` with the masked-LM objective)."""

    objective: torch.nn.Module  # holds the encoder
    dataset: Any  # ContrastiveDataset, WordNetViewsDataset, SentencesDataset: collate, lengths, describe
    #: every tensor the optimiser updates (and Child-Tuning_D's masks, so a checkpoint holds them)
    trained: torch.nn.ModuleList
    #: (rank 0) the evaluation at a step: a record with "eval" (metrics) and whatever else to log
    evaluate: Callable[[int], dict[str, Any]] | None = None
    #: the precision the run computes in, decided by ``run_steps`` before the first step
    #: (``decide_autocast``); what an evaluation inside the run computes in too
    autocast: str | None = None
    #: what to do with an evaluation's metrics (keep the best model); returns a progress-bar note
    evaluated: Callable[[int, dict[str, float], LoopState], str | None] | None = None
    eval_at_start: bool = False
    group_by_length: bool = False
    drop_last: bool = False
    gradcache_chunk: int = 0
    child: ChildTuning | None = None
    name: str = "training"
    recipe: dict[str, Any] = field(default_factory=dict)  # the resolved recipe, for the trackers' run config


@dataclass
class Outcome:
    state: LoopState
    history: list[dict[str, Any]]  # the metrics log's records
    last_metrics: dict[str, float] | None  # the last evaluation's


def _starting_state(
    loop: RunConfig,
    steps: Steps,
    context: DistributedContext,
    device: torch.device,
    output_dir: Path,
    resume: bool,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    order: BatchOrder,
) -> LoopState:
    """Where the run starts: the checkpoint's state (and its epoch's data order) on ``resume``; else step 0,
    after Child-Tuning_D's estimate of the Fisher information where the run uses it."""
    if resume:
        state, epoch_order_state = load_checkpoint(
            output_dir / "checkpoint", steps.trained, optimizer, scheduler
        )
        order.generator.set_state(epoch_order_state)
        logger.info("resumed from %s at step %d", output_dir / "checkpoint", state.step)
        return state
    if steps.child is not None and steps.child.config.mode == "D":
        assert isinstance(loop, LoopConfig)  # Child-Tuning is a training recipe's (training.child_tuning)
        steps.trained.train()  # with dropout, as in training
        steps.child.estimate_fisher(
            fisher_batches(steps.dataset, loop, context, device),
            lambda batch: forward_backward(steps.objective, batch, steps.gradcache_chunk),
            steps.trained,
            reduce=lambda fisher: distributed.sum_over_ranks(fisher, context),  # one child on every rank
            clip=loop.max_grad_norm,
        )
    return LoopState()


def run_steps(
    loop: RunConfig,
    steps: Steps,
    context: DistributedContext,
    device: torch.device,
    output_dir: Path,
    resume: bool,
) -> Outcome:
    """Data order → forward/backward → AdamW step, with logging, evaluation and checkpoints; exact resume
    from ``output_dir/checkpoint``. Read top to bottom: the schedule, the optimiser, where the run starts
    (a checkpoint, or Child-Tuning_D's estimate), the logs, then the loop, one phase per line."""
    dataset, trained, objective = steps.dataset, steps.trained, steps.objective
    plan = Schedule.of(loop, len(dataset), context, steps.drop_last)
    optimizer = build_optimizer(trained, loop.learning_rate, loop.weight_decay)
    scheduler = build_scheduler(optimizer, plan.warmup, plan.total_steps)
    order = BatchOrder(dataset, loop, context, plan.batches_per_epoch, steps.group_by_length)

    state = _starting_state(loop, steps, context, device, output_dir, resume, optimizer, scheduler, order)
    check_world_size(state, context.world_size, output_dir / "checkpoint")
    steps.autocast = decide_autocast(loop, steps, state, context, device)
    logger.info(
        "%d examples × %d views, %d steps of batch %d on %s", len(dataset), dataset.n_views, plan.total_steps,
        loop.batch_size, device,
    )  # fmt: skip

    # what the run writes as it goes
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
        total=plan.total_steps, initial=state.step, desc=steps.name, unit="step", disable=not context.is_main
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
        metrics: dict[str, float] = record["eval"]
        return metrics

    last = None
    if evaluate is not None and steps.eval_at_start and state.step == 0:
        state.initial_metrics = last = evaluation(0)
    objective.train()  # the encoder with dropout; frozen copies stay in eval mode
    amp = autocast_context(steps.autocast, device)

    # the loop
    window = LossWindow(state.window)  # training's clock from here (not evaluation's); a resume's window kept
    try:
        while state.step < plan.total_steps:
            epoch_order_state = order.generator.get_state()  # what a checkpoint of this epoch resumes from
            for position, batch in enumerate(order.epoch(state), start=state.batch_in_epoch):
                batch = batch.to(device)
                with amp:
                    output = forward_backward(objective, batch, steps.gradcache_chunk)
                update(
                    output, batch, dataset, trained, optimizer, scheduler, loop, steps.child, context, state
                )
                state.step += 1
                state.batch_in_epoch = position + 1
                window.add(output, batch, context)
                progress.update(1)
                at_end = state.step == plan.total_steps
                if state.step % loop.logging_steps == 0 or at_end:
                    means = window.flush(log, state.step, float(scheduler.get_last_lr()[0]))
                    progress.set_description(f"{steps.name} loss {means['loss']:.3g}")
                evaluates = bool(loop.eval_steps) and (state.step % loop.eval_steps == 0 or at_end)
                if evaluates or at_end:  # before anything is evaluated or saved
                    require_equal_replicas(trained, context, state.step)
                if evaluates:
                    if evaluate is not None:
                        last = evaluation(state.step)
                    distributed.barrier(context)
                if context.is_main and loop.checkpoint_steps and state.step % loop.checkpoint_steps == 0:
                    state.window = window.snapshot()
                    save_checkpoint(
                        output_dir / "checkpoint", trained, optimizer, scheduler, state, epoch_order_state
                    )
                if state.step >= plan.total_steps:
                    break
            else:
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
    finally:
        progress.close()
        log.close()
    return Outcome(state, log.records, last)


@dataclass(frozen=True)
class Schedule:
    """How many steps a run takes: batches per epoch (the short last batch kept unless ``drop_last``),
    total steps (``max_steps``, else ``epochs`` of batches) and warmup steps."""

    batches_per_epoch: int
    total_steps: int
    warmup: int

    @classmethod
    def of(cls, loop: RunConfig, examples: int, context: DistributedContext, drop_last: bool) -> Schedule:
        whole, short = divmod(examples, loop.batch_size)
        if short and not drop_last:
            # Under torchrun each rank takes an equal slice (data/collate.py: rank_slice): the short last
            # batch loses its remainder, and is dropped when that leaves a rank nothing.
            lost = short % context.world_size
            if lost and context.is_main:
                logger.warning(
                    "each epoch's last batch: %d of the %d examples left out, so that the %d processes get "
                    "equal slices", lost, short, context.world_size,
                )  # fmt: skip
        batches_per_epoch = whole + (1 if short >= context.world_size and not drop_last else 0)
        if batches_per_epoch == 0:
            raise ConfigError(
                f"training.batch_size: {loop.batch_size} exceeds the {examples} examples (drop_last)"
            )
        total_steps = loop.max_steps if loop.max_steps > 0 else loop.epochs * batches_per_epoch
        return cls(batches_per_epoch, total_steps, loop.warmup_steps or int(loop.warmup_ratio * total_steps))


class BatchOrder:
    """The data order: one seeded permutation per epoch (grouped by length where asked), drawn from one
    generator whose state a checkpoint keeps; a streamed dataset orders itself by (seed, epoch, block)."""

    def __init__(
        self,
        dataset: Any,
        loop: RunConfig,
        context: DistributedContext,
        batches_per_epoch: int,
        by_length: bool,
    ):
        self.dataset, self.loop, self.context = dataset, loop, context
        self.batches_per_epoch = batches_per_epoch
        self.generator = torch.Generator().manual_seed(loop.seed)
        self.streaming = isinstance(dataset, StreamingDataset)
        self.lengths = dataset.lengths() if by_length else None

    def epoch(self, state: LoopState) -> Iterator[Batch]:
        """This rank's slice of every global batch of the current epoch from ``state.batch_in_epoch`` on."""
        loop, context, start = self.loop, self.context, state.batch_in_epoch
        if self.streaming:  # (drop_last: the epoch's short last batch is left out, as below)
            stream = self.dataset.epoch_batches(
                loop.seed, state.epoch, start, loop.batch_size, context.rank, context.world_size
            )
            yield from itertools.islice(stream, self.batches_per_epoch - start)
            return
        permutation = torch.randperm(len(self.dataset), generator=self.generator)
        if self.lengths is not None:
            permutation = group_by_length(permutation, self.lengths, loop.batch_size, self.generator)
        for position in range(start, self.batches_per_epoch):
            indices = permutation[position * loop.batch_size : (position + 1) * loop.batch_size]
            indices = rank_slice(indices, context.rank, context.world_size)
            yield self.dataset.collate([self.dataset[int(i)] for i in indices])


def update(
    output: ObjectiveOutput,
    batch: Batch,
    dataset: Any,
    trained: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    loop: RunConfig,
    child: ChildTuning | None,
    context: DistributedContext,
    state: LoopState,
) -> None:
    """One optimiser step on the gradients ``forward_backward`` left: refused on a non-finite loss (nothing
    updated), averaged over ranks, clipped, masked by Child-Tuning, applied, and the schedule advanced."""
    if not torch.isfinite(output.loss):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingError(
            f"step {state.step + 1}: loss is {output.loss.item()} (batch from "
            f"{dataset.describe(batch.indices)}); {UNTOUCHED}"
        )
    distributed.average_gradients(trained, context)
    if loop.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(trained.parameters(), loop.max_grad_norm)
    if child is not None:  # on the clipped gradients, as the reference's optimiser step
        child.mask_gradients(state.step + 1)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


class LossWindow:
    """The loss terms of the steps since the last log line (means over ranks), the real tokens this rank
    saw and the time they took."""

    def __init__(self, saved: dict[str, Any] | None = None) -> None:
        saved = saved or {}
        self.terms: list[dict[str, float]] = list(saved.get("terms", []))
        self.tokens = int(saved.get("tokens", 0))
        self.started = time.perf_counter() - float(saved.get("seconds", 0.0))

    def snapshot(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of the window (None when it is empty: the step was a log line's)."""
        if not self.terms:
            return None
        seconds = time.perf_counter() - self.started
        return {"terms": list(self.terms), "tokens": self.tokens, "seconds": seconds}

    def add(self, output: ObjectiveOutput, batch: Batch, context: DistributedContext) -> None:
        terms = {k: v.item() for k, v in output.terms.items()} | {"loss": output.loss.item()}
        self.terms.append({k: distributed.mean_over_ranks(v, context) for k, v in terms.items()})
        self.tokens += int(batch.attention_mask.sum())  # real (non-padding) tokens, this rank

    def flush(self, log: MetricsLog, step: int, lr: float) -> dict[str, float]:
        """One log record of the window's means; the window starts again (its clock keeps running)."""
        means = {k: sum(w[k] for w in self.terms) / len(self.terms) for k in self.terms[0]}
        elapsed = round(time.perf_counter() - self.started, 4)
        log.write({"step": step, **means, "lr": lr, "seconds": elapsed, "tokens": self.tokens})
        self.terms, self.tokens = [], 0
        return means


def require_equal_replicas(trained: torch.nn.Module, context: DistributedContext, step: int) -> None:
    """Under torchrun: stop (on every rank alike) when the ranks' copies of the model differ."""
    drifted = distributed.check_replicas(trained, context)
    if drifted:
        raise TrainingError(
            f"step {step}: the ranks' replicas differ ({len(drifted)} tensors, the first {drifted[0]}); "
            f"data-parallel training has diverged, nothing is saved, {UNTOUCHED}"
        )


def fisher_batches(
    dataset: Any, loop: LoopConfig, context: DistributedContext, device: torch.device
) -> Iterator[Batch]:
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
