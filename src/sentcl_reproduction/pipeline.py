"""Run a reproduction plan stage by stage, each stage cached under the plan's ``output_dir``.

Stages: ``pretrain`` (an encoder from a `sentcl pretrain` recipe), ``train`` (one method from one encoder)
and ``measure`` (one table row: STS, alignment/uniformity, spectrum, cosine density). A stage's folder
holds ``stage.json`` with the stage's key — a hash of everything it is made from (its resolved recipe, the
key of the stage it builds on, the measurement protocol) — and ``done: true`` once its outputs are
complete. A re-run skips every stage whose key is unchanged and done, resumes an interrupted pre-training
or training from its last checkpoint when the key is unchanged, and redoes the rest from scratch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sentcl import precision
from sentcl.analysis.report import ModelAnalysis, analyze, read_trajectory
from sentcl.atomic_write import atomic_file, atomic_folder, check_replaceable, mark_folder
from sentcl.config import ConfigError, apply_overrides, load_yaml
from sentcl.embedder import CachedEmbedder, Embedder
from sentcl.evaluation.sts import STSEvaluator, correlate, cosine_scores
from sentcl.evaluation.sts_data import STS_TASKS, STSDataError, load_task
from sentcl.hardware import describe_machine
from sentcl.model import SentenceEncoder
from sentcl.model.ditto import rank_heads
from sentcl.postprocess import POSTPROCESSORS, PostProcessedEmbedder, fit_postprocessor
from sentcl.postprocess.corpus import fit_corpus
from sentcl.training.kinds import load_run_recipe, replace_training, run
from sentcl.training.recipe import recipe_from_dict
from sentcl_reproduction.plan import MODEL_OF, EncoderSpec, MethodSpec, Plan, as_overrides, setting_label

logger = logging.getLogger(__name__)

STAGE_FILE = "stage.json"
#: bump when what a measurement computes changes: every row is then measured again
MEASURE_PROTOCOL = 1


def stage_key(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "row"


def read_stage(folder: Path) -> dict:
    path = folder / STAGE_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}


def write_stage(folder: Path, record: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(folder / STAGE_FILE) as handle:
        json.dump(record, handle, indent=2)


class StageNotDoneError(Exception):
    """Under ``--report-only``: a stage the plan needs is not done (the message names it)."""


@dataclass
class Pending:
    """What a report written from an unfinished plan leaves out, and the first stage it lacks."""

    encoder: str
    what: str  # a method's name, or "the encoder" (its pre-training or an untrained row)
    stage: str


@dataclass
class StageOutcome:
    """What a stage did in this run: ``cached``, ``resumed`` or ``ran`` (with its own seconds, and the
    machine that ran it: a plan finished over several sessions may have run on several)."""

    name: str
    action: str
    seconds: float
    machine: str = ""


class Stage:
    """``with Stage(folder, key, name) as stage: …`` — runs the body unless the key is done already.

    ``stage.needed`` is False when cached; ``stage.resume`` is True when an interrupted run of the same
    key left a checkpoint. The folder is wiped before a fresh run, so no output of another key survives.
    """

    def __init__(
        self,
        folder: Path,
        key: str,
        name: str,
        outcomes: list[StageOutcome],
        force: bool = False,
        plan: Plan | None = None,
    ):
        """``force``: run it again though it is done (its outputs, weights among them, are needed and absent:
        the stage came from the plan's committed results). ``plan``: a stage that finishes has its small
        files kept in the plan's results folder at once (:func:`keep_stage`), so an interrupted
        reproduction loses none of what it finished."""
        self.folder, self.key, self.name, self.outcomes = folder, key, name, outcomes
        self.plan, self.force = plan, force
        record = read_stage(folder)
        self.needed = force or not (record.get("key") == key and record.get("done"))
        self.resume = (
            not force and self.needed and record.get("key") == key and (folder / "checkpoint").is_dir()
        )
        self.record = record
        self.started = 0.0

    def __enter__(self) -> Stage:
        if self.needed and self.plan is not None and self.plan.report_only:
            raise StageNotDoneError(self.name)
        if not self.needed:
            seconds, machine = float(self.record.get("seconds", 0.0)), str(self.record.get("machine", ""))
            self.outcomes.append(StageOutcome(self.name, "cached", seconds, machine))
            return self
        if not self.resume and self.folder.exists():
            if any(self.folder.iterdir()) and not (self.folder / STAGE_FILE).is_file():
                raise ConfigError(  # a folder the plan did not make: never wiped
                    f"{self.folder}: not empty and not a stage of a sentcl plan (no {STAGE_FILE}); move it "
                    f"or choose another output_dir"
                )
            shutil.rmtree(self.folder)
        write_stage(self.folder, {"key": self.key, "name": self.name, "done": False})
        self.started = time.perf_counter()
        logger.info("%s: %s", self.name, "resuming" if self.resume else "running")
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if not self.needed or kind is not None:
            return
        seconds, machine = time.perf_counter() - self.started, describe_machine()
        record = {"key": self.key, "name": self.name, "done": True, "seconds": seconds, "machine": machine}
        write_stage(self.folder, record)
        self.outcomes.append(StageOutcome(self.name, "resumed" if self.resume else "ran", seconds, machine))
        committed = _committed(self.plan, self.folder, self.key) if self.plan is not None else None
        if self.force and committed is not None:
            # run again only for its weights: the committed record stays, as it is the run that the rows
            # built on it measured (they are not measured again); the new weights are checked against it
            _check_regenerated(self.folder, _outcome(committed), _outcome(self.folder))
            _copy_stage(committed, self.folder)
        elif self.plan is not None:
            keep_stage(self.plan, self.folder)


@dataclass
class Row:
    """One line of an encoder's table, and where its measurement lives."""

    encoder: str
    label: str
    kind: str  # baseline | postprocess | method
    model: str  # folder or hub id
    pooler: str | None = None
    postprocess: str | None = None
    method: str | None = None
    run_dir: Path | None = None
    upstream: str = ""
    folder: Path = Path()
    seed: int | None = None  # a trained method: one row per seed of its chosen setting

    def key(self, plan: Plan) -> str:
        # the post-processor's settings too: a change to them (flow's gradient clipping) re-measures its rows
        fit = (
            (plan.fit_on, plan.fit_max, POSTPROCESSORS[self.postprocess]().options())
            if self.postprocess
            else None
        )
        return stage_key("measure", MEASURE_PROTOCOL, self.upstream, self.pooler, self.postprocess, fit)


@dataclass
class RowResult:
    row: Row
    analysis: ModelAnalysis
    sts: dict[str, float] = field(default_factory=dict)  # every STS number present (×100)
    missing: dict[str, str] = field(default_factory=dict)  # 7-task table entries that are absent
    #: STS-B train, pair by pair: the system's cosines and the gold scores (for the paired bootstrap of the
    #: report's intervals; None in rows measured before rows kept them)
    train_cosines: np.ndarray | None = None
    train_gold: np.ndarray | None = None


def _model_key(model: str) -> str:
    """An existing model: its name, and for a local folder the size and time of each weight file."""
    folder = Path(model)
    files = []
    if folder.is_dir():
        files = [
            (p.name, p.stat().st_size, int(p.stat().st_mtime))
            for p in sorted(folder.iterdir())
            if p.suffix in (".safetensors", ".bin", ".json")
        ]
    return stage_key("model", model, files)


def _without_places(recipe: dict) -> dict:
    """A recipe less where its run is written and where its evaluation data is found (the pipeline
    sets both): what a stage's key is made of."""
    recipe.get("training", {}).pop("output_dir", None)
    recipe.get("training", {}).pop("eval_data_dir", None)
    return recipe


def _relative(value: Any, root: Path) -> Any:
    """``value`` with every path under ``root`` written relative to it: a stage's key does not depend on
    where the plan's output lives (the upstream stages' keys already name what those folders hold)."""
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, root) for v in value]
    if isinstance(value, str) and Path(value).is_relative_to(root):
        return "<output_dir>/" + Path(value).relative_to(root).as_posix()
    return value


def pretrain_key(spec: EncoderSpec) -> str:
    """The pre-training stage's key: its recipe with the overrides, less where it is written and where
    its evaluation data is found."""
    assert spec.pretrain is not None
    recipe = apply_overrides(load_yaml(spec.pretrain), as_overrides(spec.overrides))
    return stage_key("pretrain", _without_places(recipe))


def build_encoder(
    plan: Plan, spec: EncoderSpec, data_dir: Path, outcomes: list[StageOutcome]
) -> tuple[str, str, Path | None]:
    """(model folder or id, key, pre-training folder) of an encoder, pre-training it if needed."""
    if spec.pretrain is None:
        return spec.model, _model_key(spec.model), None
    recipe_file, overrides = spec.pretrain, as_overrides(spec.overrides)
    key = pretrain_key(spec)
    folder = plan.output_dir / "encoders" / slug(spec.name)

    def produce(force: bool = False) -> None:
        with Stage(folder, key, f"pretrain {spec.name}", outcomes, force, plan) as stage:
            if stage.needed:
                run_stage("pretrain", load_run_recipe("pretrain", recipe_file, overrides), stage, data_dir)

    produce()
    plan.producers[str(folder / "model")] = lambda: produce(force=True)
    return str(folder / "model"), key, folder


def run_stage(kind: str, config, stage: Stage, data_dir: Path) -> None:
    """A run of either kind as a stage: written in the stage's folder, resumed when the stage was
    interrupted, evaluated on the plan's data (training/kinds.py)."""
    config = replace_training(
        config, output_dir=str(stage.folder), overwrite_output_dir=True, resume=stage.resume,
        eval_data_dir=str(data_dir),
    )  # fmt: skip
    run(kind, config)


def ensure_weights(plan: Plan, model: str) -> None:
    """Before a stage reads ``model`` (a model or run folder): where its weights are absent because its
    stage came from the committed results, run that stage again (same key, same seeds)."""
    path = Path(model)
    if any((candidate / "config.json").is_file() for candidate in (path, path / "model")):
        return
    for candidate in (path, path / "model", path.parent):  # a row reads a run's model/: its run made it
        producer = plan.producers.get(str(candidate))
        if producer is not None:
            logger.info(
                "%s: no weights here (its stage came from %s): running it again", candidate, plan.results
            )
            producer()
            return


#: how far a stage run again for its weights may score from the committed run before it is warned about
#: (Spearman × 100): kernels differ between CPUs, and a run committed in bf16 is run again in fp32 on a
#: CPU without native bf16
REGENERATED_TOLERANCE = 0.05


def _outcome(folder: Path) -> dict[str, float]:
    """The scores a finished stage recorded in its summary (final, best and initial metrics)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return {
        f"{part}.{name}": float(value)
        for part in ("initial_metrics", "best_metrics", "final_metrics")
        for name, value in (summary.get(part) or {}).items()
        if isinstance(value, (int, float))
    }


def _check_regenerated(folder: Path, before: dict[str, float], after: dict[str, float]) -> None:
    """Say whether the weights made again are the model the committed results measured: the same scores
    within :data:`REGENERATED_TOLERANCE`, or a warning that names what moved (the report's rows describe
    the committed run; what builds on this one uses the new weights)."""
    moved = {
        name: (before[name], after[name])
        for name in before.keys() & after.keys()
        if abs(before[name] - after[name]) > REGENERATED_TOLERANCE
    }
    if moved:
        logger.warning(
            "%s: run again for its weights, it scores differently from the committed run: %s",
            folder,
            ", ".join(f"{name} {old:.4f} → {new:.4f}" for name, (old, new) in sorted(moved.items())),
        )
    elif before.keys() & after.keys():
        logger.info("%s: run again for its weights, it scores as the committed run did", folder)


def _resolve(method: MethodSpec, chosen: dict[str, tuple[Path, str]]) -> tuple[dict[str, Any], list[str]]:
    """The method's overrides with every ``{model_of: NAME}`` replaced by NAME's chosen run folder;
    and the keys of those runs (part of this method's stage keys)."""
    resolved, upstream = {}, []
    for key, value in method.overrides.items():
        if isinstance(value, dict) and MODEL_OF in value:
            run_dir, run_key = chosen[value[MODEL_OF]]
            resolved[key] = str(run_dir)
            upstream.append(run_key)
        else:
            resolved[key] = value
    return resolved, upstream


def train_run(
    plan: Plan,
    method: MethodSpec,
    overrides: dict[str, Any],
    seed: int,
    model: str,
    upstream: list[str],
    folder: Path,
    name: str,
    data_dir: Path,
    outcomes: list[StageOutcome],
    budget: dict[str, Any] | None = None,
) -> str:
    """Train one setting of one method from one encoder under the plan's budget (with the encoder's
    ``budget`` over it); its key. Where the run lives and where its evaluation data is found are not part
    of the key."""
    recipe = load_yaml(method.recipe)
    settings = {**plan.budget, **(budget or {}), **overrides, "training.seed": seed}
    apply_overrides(recipe, as_overrides(settings))
    recipe.setdefault("model", {})["name_or_path"] = model
    key = stage_key("train", _relative(_without_places(recipe), plan.output_dir), upstream)
    # the precision is not part of the key, so committed results stay valid on a CPU without native bf16 (a
    # stage run again there trains in fp32, and its row says so: the run's summary.json records what
    # training.autocast decided, measured on that machine)

    def produce(force: bool = False) -> None:
        with Stage(folder, key, name, outcomes, force, plan) as stage:
            if stage.needed:
                ensure_weights(plan, model)
                for value in overrides.values():  # {model_of: …} resolved to another run's folder
                    if isinstance(value, str) and str(value).startswith(str(plan.output_dir)):
                        ensure_weights(plan, value)
                run_stage("train", recipe_from_dict(recipe), stage, data_dir)

    produce()
    plan.producers[str(folder)] = lambda: produce(force=True)
    return key


@dataclass
class Candidate:
    """One setting of a method's search, trained with the plan's first seed."""

    label: str
    overrides: dict[str, Any]
    run_dir: Path
    key: str
    best: float  # the best STS-B dev of the run (step 0 included when the budget makes it a candidate)
    best_step: int | None
    start: float | None  # STS-B dev at step 0
    pooler: str = ""  # the plan's pooler setting it was trained with ("" = the recipe's)
    steps: int | None = None  # the run's last step: a best there is at the horizon
    precision: str = ""  # the training precision the run used (training.autocast as resolved)
    extension: bool = False  # tried because the grid's end was chosen

    @property
    def at_horizon(self) -> bool:
        return self.best_step is not None and self.best_step == self.steps and self.best_step > 0


@dataclass
class MethodSearch:
    encoder: str
    method: str
    candidates: list[Candidate]
    chosen: int  # index into candidates
    #: search key → "largest" / "smallest" where the chosen value is still at that end of what was tried
    #: (every extension on that side tried): the optimum may lie beyond it
    at_edge: dict[str, str] = field(default_factory=dict)

    @property
    def best(self) -> Candidate:
        return self.candidates[self.chosen]


def read_candidate(
    label: str, overrides: dict[str, Any], run_dir: Path, key: str, pooler: str = "", extension: bool = False
) -> Candidate:
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    metric = summary.get("primary_metric")
    best = (summary.get("best_metrics") or {}).get(metric, float("nan"))
    start = (summary.get("initial_metrics") or {}).get(metric)
    config = load_yaml(run_dir / "config.yaml")
    used = summary.get("autocast") or config.get("training", {}).get("autocast")  # older runs: their config
    trained_in = precision.canonical(used) if used in (*precision.PRECISIONS, *precision.ALIASES) else ""
    return Candidate(
        label, overrides, run_dir, key, float(best), summary.get("best_step"), start, pooler,
        summary.get("steps"), trained_in, extension,
    )  # fmt: skip


def choose(candidates: list[Candidate]) -> int:
    """The candidate with the best STS-B dev; the first of equals; never a NaN one."""
    scores = [c.best if c.best == c.best else float("-inf") for c in candidates]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def search_method(
    plan: Plan,
    spec: EncoderSpec,
    method: MethodSpec,
    model: str,
    encoder_key: str,
    chosen: dict[str, tuple[Path, str]],
    data_dir: Path,
    outcomes: list[StageOutcome],
) -> tuple[MethodSearch, list[tuple[int, Path, str]]]:
    """Every candidate of the search with the first seed, then the chosen one with the other seeds:
    the search and (seed, run folder, key) of each of the chosen setting's runs."""
    resolved, upstream = _resolve(method, chosen)
    base = plan.output_dir / "runs" / slug(spec.name) / slug(method.name)

    def run(label: str, settings: dict[str, Any], seed: int) -> tuple[Path, str]:
        folder = base / slug(label) / f"seed-{seed}"
        name = f"train {method.name} [{label}] seed {seed} from {spec.name}"
        upstreams = [encoder_key, *upstream]
        return folder, train_run(
            plan, method, settings, seed, model, upstreams, folder, name, data_dir, outcomes, spec.budget
        )

    first, *others = plan.seeds
    candidates = []
    for pooler in method.poolers or [""]:
        for label, overrides in plan.candidates(method, poolers=[pooler] if pooler else []):
            settings = {**resolved, **overrides}
            candidates.append(read_candidate(label, settings, *run(label, settings, first), pooler=pooler))
    index = choose(candidates)
    at_edge: dict[str, str] = {}
    for key, extra in plan.extend.items():  # the grid grows at whichever end holds the choice
        tried = list(plan.search[key])
        while True:
            best = candidates[index]
            value = best.overrides.get(key)
            above = sorted(v for v in extra if v > max(tried))
            below = sorted((v for v in extra if v < min(tried)), reverse=True)
            if best.best_step == 0:  # no setting beat the start: smaller steps, while there are any
                if not below:
                    break
                step = below[0]
            elif value == max(tried) and above:
                step = above[0]
            elif value == min(tried) and below:
                step = below[0]
            elif value in (max(tried), min(tried)):
                at_edge[key] = "largest" if value == max(tried) else "smallest"  # every extension tried
                break
            else:
                break  # interior
            label = best.label.replace(setting_label(key, value), setting_label(key, step))
            settings = best.overrides | {key: step}
            trained = run(label, settings, first)
            candidates.append(read_candidate(label, settings, *trained, pooler=best.pooler, extension=True))
            tried.append(step)
            index = choose(candidates)
    best = candidates[index]
    runs = [(first, best.run_dir, best.key)]
    runs += [(seed, *run(best.label, best.overrides, seed)) for seed in others]
    return MethodSearch(spec.name, method.name, candidates, index, at_edge), runs


def plan_rows(
    plan: Plan, data_dir: Path, outcomes: list[StageOutcome], measure_now: Callable[[list[Row]], None]
) -> tuple[list[Row], dict[str, Path | None], list[MethodSearch], list[Pending]]:
    """Pre-train and train whatever the plan needs; return every row to measure, in table order, each
    method's search, and what is left out. ``measure_now`` is handed each group of rows as soon as its
    models exist (an encoder's baselines, then each method's seeds), so a plan cut short has measured, and
    kept, whatever it trained: its weights are not kept, and measuring later would train it again.

    Under ``plan.report_only`` nothing runs: an encoder or a method with a stage not done yet (or whose
    ``model_of`` method is left out) is left out as a whole, and listed as :class:`Pending`."""
    rows: list[Row] = []
    pretrain_dirs: dict[str, Path | None] = {}
    searches: list[MethodSearch] = []
    pending: list[Pending] = []

    def add(new: list[Row]) -> None:
        for row in new:
            row.folder = plan.output_dir / "rows" / slug(row.encoder) / slug(row.label)
            if row.seed is not None:
                row.folder = row.folder / f"seed-{row.seed}"
        measure_now(new)  # first: rows of a group that cannot be measured are not listed
        rows.extend(new)

    for spec in plan.encoders:
        try:
            model, key, pretrain_dir = build_encoder(plan, spec, data_dir, outcomes)
            untrained = [Row(spec.name, p, "baseline", model, pooler=p, upstream=key) for p in spec.baselines]
            for pooler in spec.postprocess_on:
                for name in spec.postprocess:
                    label = f"{pooler} + {name}"
                    untrained.append(
                        Row(spec.name, label, "postprocess", model, pooler, postprocess=name, upstream=key)
                    )
            add(untrained)
        except StageNotDoneError as missing:
            pending.append(Pending(spec.name, "the encoder", str(missing)))
            continue
        pretrain_dirs[spec.name] = pretrain_dir
        chosen: dict[str, tuple[Path, str]] = {}
        for name in spec.methods:
            method = plan.methods[name]
            absent = [other for other in method.depends_on() if other not in chosen]
            if absent:  # only under report_only: the plan orders a method after those it names
                pending.append(Pending(spec.name, name, f"needs {', '.join(absent)}"))
                continue
            try:
                search, runs = search_method(plan, spec, method, model, key, chosen, data_dir, outcomes)
                add(
                    [
                        Row(
                            spec.name,
                            name,
                            "method",
                            str(run_dir / "model"),
                            method=name,
                            run_dir=run_dir,
                            upstream=run_key,
                            seed=seed,
                        )
                        for seed, run_dir, run_key in runs
                    ]
                )
            except StageNotDoneError as missing:
                pending.append(Pending(spec.name, name, str(missing)))
                continue
            searches.append(search)
            chosen[name] = (runs[0][1], runs[0][2])
    return rows, pretrain_dirs, searches, pending


def measure(row: Row, embedder: Embedder, data_dir: Path) -> RowResult:
    """STS-B dev (ρ, geometry, spectrum, cosine density), STS-B train ρ, and every 7-task entry present."""
    analysis = analyze(row.label, embedder, data_dir, "dev")
    sts = {"STS-B dev": analysis.spearman}
    train_split = load_task(data_dir, "STSBenchmark", ("train",))
    cosines, gold = None, None
    if not train_split.missing:
        pairs = train_split.datasets["train"]
        cosines = cosine_scores(embedder.encode(pairs.sentences1), embedder.encode(pairs.sentences2))
        gold = np.asarray(pairs.scores, dtype=np.float64)
        sts["STS-B train"] = correlate(cosines, gold).spearman
    table = STSEvaluator(data_dir, "sts")
    report = table.report(embedder)
    sts |= {f"{name} (table)": value for name, value in table.metrics(report).items()}
    if row.run_dir is not None:
        analysis.trajectory = read_trajectory(row.run_dir)
    return RowResult(row, analysis, sts, dict(report.missing), cosines, gold)


#: what a row reads of the evaluation data: STS-B dev (the analysis) and train, and the 7-task table's tests
MEASURED_SPLITS = {"STSBenchmark": ("dev", "train", "test")}


def data_fingerprint(data_dir: Path) -> dict[str, str | None]:
    """What a measurement can see in ``data_dir``: for each task (and STS-B split) it reads, a hash of its
    pairs (sentences and gold scores as read), or None where it is absent or unreadable. Rows store it, and
    a row measured on other data is measured again (``measure_rows``)."""
    seen: dict[str, str | None] = {}
    for task in STS_TASKS:
        for split in MEASURED_SPLITS.get(task, (None,)):
            name = f"{task} {split}" if split else task
            try:
                loaded = load_task(data_dir, task, (split,) if split else None)
            except (STSDataError, OSError):
                loaded = None
            if loaded is None or loaded.missing:
                seen[name] = None
                continue
            digest = hashlib.sha256()
            for part, pairs in sorted(loaded.datasets.items()):
                digest.update(
                    json.dumps([part, pairs.sentences1, pairs.sentences2, pairs.scores.tolist()]).encode()
                )
            seen[name] = digest.hexdigest()[:16]
    return seen


def measured_on_other_data(folder: Path, fingerprint: dict[str, str | None]) -> str | None:
    """Why the row stored in ``folder`` must be measured again on the data ``fingerprint`` describes (None:
    it may stay). A row stored before rows kept their data's fingerprint is judged by the tasks its table
    found: one that is there now and was missing then (or the reverse) is measured again."""
    try:
        payload = json.loads((folder / "row.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # no stored row: the stage runs anyway
    if "data" in payload:
        changed = sorted(k for k in fingerprint if payload["data"].get(k) != fingerprint[k])
        return f"the evaluation data changed ({', '.join(changed)})" if changed else None
    present_now = {t for t in STS_TASKS if fingerprint[f"{t} test" if t in MEASURED_SPLITS else t]}
    present_then = set(STS_TASKS) - set(payload.get("missing", {}))
    if present_now != present_then:
        added, gone = sorted(present_now - present_then), sorted(present_then - present_now)
        now, gone_text = ", ".join(added) or "-", ", ".join(gone) or "-"
        return f"the evaluation data changed (now there: {now}; gone: {gone_text})"
    return None


def save_result(result: RowResult, folder: Path, fingerprint: dict[str, str | None] | None = None) -> None:
    a = result.analysis
    payload = {
        "row": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result.row).items()},
        "label": a.label,
        "spearman": a.spearman,
        "align": a.align,
        "uniform": a.uniform,
        "spectrum": a.spectrum,
        "trajectory": a.trajectory,
        "sts": result.sts,
        "missing": result.missing,
        **({"data": fingerprint} if fingerprint is not None else {}),
    }
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(folder / "arrays.npz", mode="wb") as handle:
        arrays = {"singular_values": a.singular_values, "cosines": a.cosines, "gold": a.gold}
        if result.train_cosines is not None and result.train_gold is not None:
            arrays |= {"train_cosines": result.train_cosines, "train_gold": result.train_gold}
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # (numpy's stub types **kwds as allow_pickle)
    with atomic_file(folder / "row.json") as handle:
        json.dump(payload, handle, indent=2)


def load_result(row: Row, folder: Path) -> RowResult:
    payload = json.loads((folder / "row.json").read_text(encoding="utf-8"))
    arrays = np.load(folder / "arrays.npz")
    analysis = ModelAnalysis(
        label=row.label,
        spearman=payload["spearman"],
        align=payload["align"],
        uniform=payload["uniform"],
        spectrum=payload["spectrum"],
        singular_values=arrays["singular_values"],
        cosines=arrays["cosines"],
        gold=arrays["gold"],
        trajectory=[tuple(p) for p in payload["trajectory"]],
    )
    train = [arrays[k] if k in arrays.files else None for k in ("train_cosines", "train_gold")]
    if row.pooler == DITTO:  # the head it chose when it was measured
        row.pooler = str(payload["row"]["pooler"])
    return RowResult(row, analysis, payload["sts"], payload["missing"], *train)


#: a baseline that is Ditto's pooler with the head the encoder's STS-B dev chooses
DITTO = "ditto"


def choose_ditto(model: str, data_dir: Path) -> str:
    """``ditto-L-H``: the head of ``model`` whose Ditto pooling scores best on STS-B dev."""
    ranking = rank_heads(SentenceEncoder.load(model, pooler="avg"), data_dir)
    score, layer, head = ranking[0]
    runners_up = ", ".join(f"{other[1]}-{other[2]} {other[0]:.2f}" for other in ranking[1:4])
    logger.info(
        "%s: Ditto's head on STS-B dev: layer %d head %d (%.2f; next %s)",
        model,
        layer,
        head,
        score,
        runners_up,
    )
    return f"ditto-{layer}-{head}"


def measure_rows(
    plan: Plan, rows: list[Row], data_dir: Path, outcomes: list[StageOutcome]
) -> list[RowResult]:
    """Measure every row not cached; rows of one (model, pooler) share one cache of vectors, so the
    fitting corpus and the probe are encoded once for a baseline and its post-processed variants."""
    embedders: dict[tuple[str, str | None], CachedEmbedder] = {}
    fit_sentences: list[str] | None = None
    fingerprint = None if plan.report_only else data_fingerprint(data_dir)  # the report re-measures nothing
    results = []
    for row in rows:
        name = f"measure {row.encoder}: {row.label}"
        stale = fingerprint is not None and measured_on_other_data(row.folder, fingerprint)
        record = read_stage(row.folder) if stale else {}
        if record.get("done"):
            logger.info("%s: measured again, %s", name, stale)
            write_stage(row.folder, {**record, "done": False})  # same key, not done
        with Stage(row.folder, row.key(plan), name, outcomes, plan=plan) as stage:
            if stage.needed:
                cache_key = (row.model, row.pooler)
                embedder: Embedder | None = embedders.get(cache_key)
                if embedder is None:
                    ensure_weights(plan, row.model)
                    if row.pooler == DITTO:  # the model's own head, chosen on STS-B dev (model/ditto.py)
                        row.pooler = choose_ditto(row.model, data_dir)
                    cached = CachedEmbedder(SentenceEncoder.load(row.model, pooler=row.pooler))
                    if row.kind != "method":  # a trained model has one row: nothing to share, keep nothing
                        embedders[cache_key] = cached
                    embedder = cached
                if row.postprocess:
                    if fit_sentences is None:
                        fit_sentences = fit_corpus(plan.fit_on, data_dir, plan.fit_max)
                    processor = fit_postprocessor(POSTPROCESSORS[row.postprocess](), embedder, fit_sentences)
                    processor.save(
                        row.folder / "postprocessor", fitted_on=f"{row.model}: {plan.fit_on}", overwrite=True
                    )
                    embedder = PostProcessedEmbedder(embedder, processor)
                save_result(measure(row, embedder, data_dir), row.folder, fingerprint)
        results.append(load_result(row, row.folder))
    return results


#: what a stage folder keeps that the report is made from: small, no weights (``Plan.results``)
RESULT_FILES = (
    "stage.json",
    "row.json",
    "arrays.npz",
    "summary.json",
    "config.yaml",
    "metrics.jsonl",
    "mlm_loss.png",
)


def _copy_stage(source: Path, target: Path) -> None:
    """A stage's small files from one folder to another, stage.json last: a stage there that says done
    is complete."""
    target.mkdir(parents=True, exist_ok=True)
    for name in sorted(RESULT_FILES, key=lambda n: n == STAGE_FILE):
        if (source / name).is_file():
            with atomic_file(target / name, mode="wb", encoding=None) as handle:
                handle.write((source / name).read_bytes())


def import_results(plan: Plan) -> int:
    """Copy the committed stages (``plan.results``) into ``plan.output_dir`` where that stage is not there
    yet: a fresh checkout then regenerates the report from them and runs only the stages whose key
    changed (their weights, where a later stage needs them, are made again: ``ensure_weights``). A stage
    already in ``output_dir`` is left as it is. Returns how many stages were copied."""
    if plan.results is None or not plan.results.is_dir():
        return 0
    copied = 0
    for record in sorted(plan.results.rglob(STAGE_FILE)):
        target = plan.output_dir / record.parent.relative_to(plan.results)
        if not (target / STAGE_FILE).exists():
            _copy_stage(record.parent, target)
            copied += 1
    return copied


RESULTS_KIND = "reproduction results"


def _committed(plan: Plan, folder: Path, key: str) -> Path | None:
    """The committed copy of the stage in ``folder``, where the plan's results hold it done, same key."""
    if plan.results is None or not folder.is_relative_to(plan.output_dir):
        return None
    copy = plan.results / folder.relative_to(plan.output_dir)
    record = read_stage(copy)
    return copy if record.get("done") and record.get("key") == key else None


def keep_stage(plan: Plan, folder: Path) -> None:
    """Copy one finished stage's small files into ``plan.results`` now (stage.json last, so a stage there
    is complete when it says done); the marker lists what the folder holds, so the final
    :func:`export_results` may replace it. Without this, a plan cut short (a session's end, a reboot)
    left nothing to commit of the hours it had run."""
    if plan.results is None or not folder.is_relative_to(plan.output_dir):
        return
    check_replaceable(plan.results, RESULTS_KIND)  # a user's folder there is never added to
    _copy_stage(folder, plan.results / folder.relative_to(plan.output_dir))
    mark_folder(plan.results, RESULTS_KIND)


def export_results(plan: Plan, folders: list[Path]) -> None:
    """Write the small files of the stages this report used into ``plan.results`` (replacing it whole)."""
    if plan.results is None:
        return
    with atomic_folder(plan.results, RESULTS_KIND, overwrite=False) as tmp:
        for folder in folders:
            for name in RESULT_FILES:
                source = folder / name
                if source.is_file():
                    target = tmp / folder.relative_to(plan.output_dir) / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target)
