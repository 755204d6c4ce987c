"""``sentcl train``: a recipe → the contrastive run. What is the training's own: the data (rows, views,
streamed or in memory, held-out examples for label-free selection), the encoder and the objective, the
evaluation (the task's primary metric, the geometry probe) and what is kept (``model/``, the best
evaluated checkpoint by ``training.select_by``, SimCSE's policy; the final model when evaluation is off,
with its model card). The step loop is steps.py's, the lifecycle run.py's.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sentcl.analysis.alignment_uniformity import AlignUniformProbe, geometry_snapshot, stsb_probe
from sentcl.config import ConfigError, load_yaml
from sentcl.data import ContrastiveDataset, build_dataset, read_records
from sentcl.data.corpus import read_corpus
from sentcl.data.named import resolve_train_file
from sentcl.data.streaming import StreamingDataset, check_streaming
from sentcl.embedder import CachedEmbedder
from sentcl.evaluation.tasks import Evaluator
from sentcl.hardware import detect
from sentcl.hub_files import cache_dir
from sentcl.model import SentenceEncoder, StaticEncoder, build_encoder
from sentcl.model.auto_precision import machine_key
from sentcl.model.backbone import check_positions
from sentcl.model.int8_gate import digest_key, model_key, write_record
from sentcl.objectives import REGISTRY, build_objective
from sentcl.training import distributed
from sentcl.training.checkpoint import LoopState
from sentcl.training.child_tuning import ChildTuning
from sentcl.training.gradcache import chunkable
from sentcl.training.guards import (
    finite_evaluation,
    require_finite_metric,
    require_finite_weights,
)
from sentcl.training.model_card import card_data, write_model_card
from sentcl.training.recipe import TrainConfig, recipe_from_dict
from sentcl.training.run import finish_run, open_run, running, task_evaluator
from sentcl.training.selection import HeldOutProbe, Selection, hold_out, selection
from sentcl.training.steps import Steps, run_steps

if TYPE_CHECKING:
    from sentcl.model import TrainableEncoder
    from sentcl.training.run import RunStart

logger = logging.getLogger(__name__)

#: bump when the start's evaluation changes meaning, so cached ones are measured again
START_PROTOCOL = "start-evaluation-v1"


@dataclass
class TrainResult:
    output_dir: Path
    steps: int
    primary_metric: str | None = None
    initial_metrics: dict[str, float] | None = None
    best_metrics: dict[str, float] | None = None
    best_step: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    autocast: str | None = None  # the precision the run computed in (training.autocast as decided)

    def summary(self) -> dict[str, Any]:
        keys = ("steps", "primary_metric", "initial_metrics", "best_metrics", "best_step", "autocast")
        return {k: getattr(self, k) for k in keys} | {"model": str(self.output_dir / "model")}


def train(
    config: TrainConfig, also_measure: Callable[[CachedEmbedder], dict[str, Any]] | None = None
) -> TrainResult:
    """Train ``config``; ``also_measure(embedder)`` (optional) adds metrics to every evaluation's record,
    under "measured", that choose nothing (a study's report set)."""
    with running(config.training) as start:
        return _train(config, start, also_measure)


def _train(
    config: TrainConfig, start: RunStart, also_measure: Callable[[CachedEmbedder], dict[str, Any]] | None
) -> TrainResult:
    loop = config.training
    context, device, output_dir = start.context, start.device, start.output_dir

    # Everything that can fail on bad input is checked before the first step.
    train_file = resolve_train_file(config.data.train_file, "data.train_file")
    if config.data.streaming:
        check_streaming(config.data, loop)
        records = None
    else:
        records = (
            read_corpus(train_file, config.data.corpus_unit)
            if config.data.corpus_unit != "none"
            else read_records(train_file, header=config.data.header)
        )
    records, held_rows = _hold_out_for_selection(config, records, context.world_size)
    evaluator, probe = None, None
    if loop.eval_steps > 0 and loop.eval_task != "none":
        evaluator, data_dir = task_evaluator(loop)
        if loop.log_geometry:
            try:
                probe = stsb_probe(data_dir, "dev")
            except FileNotFoundError as exc:
                logger.warning("geometry is not logged: %s", exc)
    encoder = build_encoder(config.model).to(device)
    if isinstance(encoder, SentenceEncoder):
        check_positions(config.data.max_length, encoder.backbone.config)
    dataset: StreamingDataset | ContrastiveDataset
    if records is None:  # data.streaming: validated (every row read once), not held
        dataset = StreamingDataset(train_file, config.data, encoder.tokenizer, config.data.shuffle_buffer)
    else:
        dataset = build_dataset(config.data, records, encoder.tokenizer)
    _check_encoder_and_data(config, encoder, dataset, train_file)
    chooser = selection(loop.select_by, evaluator.primary if evaluator else None) if loop.eval_steps else None
    held = None
    if held_rows is not None:
        held = HeldOutProbe(
            build_dataset(config.data, held_rows, encoder.tokenizer), encoder.tokenizer, loop.batch_size,
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
    recipe = config.to_dict()
    open_run(start, loop, recipe, read_recipe)  # the inputs are checked: only now is anything written
    torch.manual_seed(
        loop.seed + context.rank
    )  # same initial weights everywhere, other dropout masks per rank
    child = None
    if loop.child_tuning.mode != "off":
        assert isinstance(encoder, SentenceEncoder)  # refused above for a static model
        child = ChildTuning(loop.child_tuning, encoder.backbone, loop.seed, optimized=objective)
    evaluation = Evaluation(
        encoder, objective, device, output_dir, loop.start_is_candidate, evaluator, chooser, held, probe,
        also_measure, loop.eval_dtype, loop.cache_start_evaluation, loop.eval_task, loop.eval_options,
    )  # fmt: skip
    steps = Steps(
        objective=objective,
        dataset=dataset,
        trained=torch.nn.ModuleList([objective] + ([child] if child is not None else [])),
        evaluate=evaluation if chooser is not None else None,
        evaluated=evaluation.keep_the_best,
        eval_at_start=loop.eval_at_start,
        group_by_length=config.data.group_by_length,
        drop_last=loop.drop_last,
        gradcache_chunk=loop.gradcache_chunk,
        child=child,
        recipe=recipe,
    )
    outcome = run_steps(loop, steps, context, device, output_dir, start.resume)
    state = outcome.state
    if loop.eval_steps == 0 and context.is_main:
        require_finite_weights(steps.trained, state.step)
        encoder.save(output_dir / "model", overwrite=True)
    result = TrainResult(
        output_dir, state.step, chooser.key if chooser else None, state.initial_metrics,
        state.best_metrics, state.best_step, outcome.history, state.autocast,
    )  # fmt: skip
    finish_run(start, result.summary())
    if context.is_main:
        _write_card(config, recipe, result, outcome.history)
    distributed.barrier(context)
    return result


def _hold_out_for_selection(config: TrainConfig, records: Any, world_size: int) -> tuple[Any, Any]:
    """(the training rows, the held-out rows or None): label-free selection (``training.select_by`` other
    than stsb-dev) holds out examples that never reach training; what it cannot measure is refused before
    any table is built from the data."""
    loop = config.training
    refusal = REGISTRY[config.objective_name][0].held_out_refusal
    if loop.select_by == "loss" and refusal:
        raise ConfigError(
            f"training.select_by: loss measures the objective on held-out rows, but "
            f"{config.objective_name} {refusal}; select by align_uniform or stsb-dev"
        )
    if loop.select_by == "stsb-dev":
        return records, None
    assert records is not None  # check_streaming refused a label-free selection of a stream
    if world_size > 1 and loop.select_by == "loss":
        raise ConfigError("training.select_by: loss is evaluated on rank 0 alone; use align_uniform")
    return hold_out(records, loop.select_holdout)


def _check_encoder_and_data(
    config: TrainConfig, encoder: TrainableEncoder, dataset: Any, train_file: str
) -> None:
    """What a static encoder cannot train: dropout copies as views, Child-Tuning's transformer masks."""
    if not getattr(encoder, "has_dropout", True) and dropout_copies(dataset):
        raise ConfigError(
            f"data.n_views: {train_file} has one sentence per row, so its {dataset.n_views} views would be "
            "dropout copies, and a static model has no dropout (they would be identical): set "
            "data.n_views: 1 (distillation from a teacher) or train on pairs"
        )
    if config.training.child_tuning.mode != "off" and not isinstance(encoder, SentenceEncoder):
        raise ConfigError(
            "training.child_tuning: it masks a transformer's gradients; a static model has none"
        )


@dataclass
class Evaluation:
    """The run's evaluation: the task's metrics (with the held-out loss, the geometry and a study's extra
    measurements where asked), and what is kept — ``model/``, the best evaluated model by
    ``training.select_by`` (step 0 only when asked)."""

    encoder: SentenceEncoder | StaticEncoder
    objective: torch.nn.Module
    device: torch.device
    output_dir: Path
    start_is_candidate: bool
    evaluator: Evaluator | None
    chooser: Selection | None
    held: HeldOutProbe | None
    probe: AlignUniformProbe | None
    also_measure: Callable[[CachedEmbedder], dict[str, Any]] | None
    eval_dtype: str = "fp32"
    #: training.cache_start_evaluation, and what keys the cache: the task and its options
    cache_start: bool = False
    eval_task: str = ""
    eval_options: Any = None

    def __call__(self, step: int) -> dict[str, Any]:
        with finite_evaluation(step):
            return self.measure(step)

    def measure(self, step: int) -> dict[str, Any]:
        embedder = CachedEmbedder(self.encoder)  # STS and geometry share one encoding of each sentence
        metrics = self.task_metrics(embedder, step)
        if self.held is not None:
            metrics |= self.held(self.objective, self.encoder, self.device)
        chooser = self.chooser
        assert chooser is not None  # evaluations happen only with eval_steps, which made the chooser
        require_finite_metric(chooser.key, metrics[chooser.key], step)
        record = {"eval": metrics}
        if self.probe is not None:
            record["geometry"] = geometry_snapshot(embedder, self.probe)
        if self.also_measure is not None:
            record["measured"] = self.also_measure(embedder)
        return record

    def task_metrics(self, embedder: CachedEmbedder, step: int) -> dict[str, float]:
        """The evaluation task's metrics, in ``training.eval_dtype``; the start's read from the cache where
        ``training.cache_start_evaluation`` asks (runs from one model share it: a study's many runs)."""
        if self.evaluator is None:
            return {}
        record = self.start_record() if step == 0 and self.cache_start else None
        if record is not None and record.is_file():
            logger.info("the start's evaluation read from %s", record)
            start: dict[str, float] = json.loads(record.read_text(encoding="utf-8"))
            return start
        self.encoder.with_dtype(self.eval_dtype)  # back to fp32 below
        try:
            metrics = self.evaluator(embedder)
        finally:
            self.encoder.with_dtype("fp32")
        if record is not None:
            write_record(record, metrics, indent=None)
        return metrics

    def start_record(self) -> Path | None:
        """Where the start's metrics are cached: keyed by the encoder's weights and pooler, the task and its
        options, the precision (and, for bf16, the machine); None for an evaluation that is not only the
        task's (a static model, label-free selection)."""
        if not isinstance(self.encoder, SentenceEncoder) or self.held is not None:
            return None
        machine = machine_key(detect("cpu")) if self.eval_dtype != "fp32" else None
        task = [self.eval_task, asdict(self.eval_options), self.eval_dtype, machine, START_PROTOCOL]
        key = digest_key([model_key(self.encoder, False, "start-evaluation"), task])
        return cache_dir() / "start-evaluations" / f"{key}.json"

    def keep_the_best(self, step: int, metrics: dict[str, float], state: LoopState) -> str | None:
        if step == 0 and not self.start_is_candidate:
            return None
        chooser = self.chooser
        assert chooser is not None
        if chooser.better(metrics, state.best_metrics):
            state.best_metrics, state.best_step = metrics, step
            self.encoder.save(self.output_dir / "model", overwrite=True)
            return f"best {chooser.key}={metrics[chooser.key]:.4g} @ {step}"
        return None


def _write_card(
    config: TrainConfig, recipe: dict[str, Any], result: TrainResult, history: list[dict[str, Any]]
) -> None:
    """The kept model's card: the recipe, the paper, the run's summary and the kept step's geometry."""
    kept = [r for r in history if r.get("step") == result.best_step and "geometry" in r]
    paper = REGISTRY[config.objective_name][0].paper
    summary = {k: v for k, v in result.summary().items() if k != "model"}
    card = card_data(recipe, paper, summary, kept[-1]["geometry"] if kept else None)
    write_model_card(result.output_dir / "model", card)


def read_recipe(path: Path) -> dict[str, Any]:
    """A run folder's config.yaml as the resolved recipe it was written from (what --resume compares)."""
    try:
        return recipe_from_dict(load_yaml(path)).to_dict()
    except ConfigError as exc:
        raise ConfigError(f"{path}: not the recipe of a sentcl training run ({exc})") from None


def summarize(result: TrainResult) -> str:
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


def dropout_copies(dataset: Any) -> bool:
    """Whether the dataset's views are copies of one column, made different only by dropout."""
    columns = getattr(dataset, "columns", None)
    return isinstance(columns, list) and len(columns) == 1 and getattr(dataset, "n_views", 1) > 1
