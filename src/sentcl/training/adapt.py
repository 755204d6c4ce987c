"""``sentcl adapt``: a model adapted to a domain's own unlabelled text, judged by that domain's search.

One call: the corpus read as the method's unit (data/corpus.py), the method's recipe (``METHODS``: the
settings in docs/domain.md) trained from the model, the checkpoint chosen on the domain's judgements where
the user has some (``choose``: a BEIR qrels file, e.g. ``qrels/train.tsv``; without: the last step is kept),
and, where the user names judgements to report on (``report``: e.g. ``qrels/test.tsv``, never the ones it
chose on), a before/after table: nDCG@10 and Recall@100 of the start and the adapted model, dense and hybrid
(BM25 fused), each difference with its 95 % interval from a paired bootstrap over the queries. The run
folder is a ``sentcl train`` run folder (``--resume`` continues it exactly); the table is written
beside it (``adapt.md``, ``adapt.json``) atomically.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import yaml

from sentcl import precision
from sentcl.atomic_write import atomic_file
from sentcl.config import ConfigError
from sentcl.embedder import Batched
from sentcl.evaluation.local import RetrievalFolderEvaluator
from sentcl.evaluation.local_files import qrels_file
from sentcl.evaluation.registry import Options
from sentcl.evaluation.significance import Difference, MeanBootstrap
from sentcl.evaluation.tasks import build_evaluator
from sentcl.hardware import describe_machine, detect, give_back_memory, resolve_device
from sentcl.hub_files import cache_dir
from sentcl.model.inference import for_inference, load_encoder
from sentcl.model.int8_gate import digest_key, model_key, write_record
from sentcl.training.checkpoint import sha256_of
from sentcl.training.contrastive import train
from sentcl.training.judgements import Judgements, judgements_for, stage_data
from sentcl.training.recipe import recipe_from_dict
from sentcl.training.run import FIRST_STAGE, check_output_dir

if TYPE_CHECKING:
    from sentcl.training.contrastive import TrainResult

logger = logging.getLogger(__name__)

#: the method that trains on the user's judgements (``--method supervised`` or ``--then supervised``)
SUPERVISED = "supervised"
#: method → (its objective section, the corpus unit it trains on, its data.max_length, its views per row:
#: 1 where the objective makes its own from one, None for the data's default: SimCSE's two dropout copies of
#: a sentence, ICT's two columns)
METHODS: dict[str, tuple[dict[str, Any], str, int, int | None]] = {
    "tsdae": ({"name": "tsdae", "deletion": 0.6}, "sentence", 64, 1),
    "simcse": ({"name": "simcse", "temperature": 0.05}, "sentence", 64, None),
    "contrastive_tension": ({"name": "contrastive_tension"}, "sentence", 64, 1),
    "cropping": ({"name": "cropping"}, "document", 256, 1),
    # ICT: each sentence against the rest of its document, the batch's passages as negatives
    "ict": ({"name": "simcse", "temperature": 0.05}, "ict", 256, None),
    # the user's judgements (training/judgements.py): (query, relevant document[, mined negative]) rows,
    # SimCSE's supervised loss = MultipleNegativesRankingLoss at scale 1/0.05 = 20
    SUPERVISED: ({"name": "simcse", "temperature": 0.05}, "none", 256, None),
}
#: the supervised stage's defaults where the user gives none: the rate of sentence-transformers' one-epoch
#: MNRL pilot on SciFact (docs/domain.md), three epochs with the checkpoint chosen at each one's end (on
#: SciFact, three epochs beat one on each of three seeds: docs/domain.md), a tenth of the steps warm-up
SUPERVISED_RATE, SUPERVISED_WARMUP, SUPERVISED_EPOCHS = 2e-5, 0.1, 3
#: how often a label-free run chooses (and checkpoints) unless told
LABEL_FREE_EVAL_STEPS = 100

#: the words of each document the choice encodes (the report encodes them whole)
CHOICE_WORDS = 128
#: how the report ranks (dense first: its per-query nDCG@10 is what the bootstrap compares)
REPORT_MODES = ("dense", "hybrid", "bm25")
#: bump when the report's measurement changes, so cached reports are measured again
REPORT_PROTOCOL = "fp32-dense-hybrid-bm25-v1"  # (its name predates report_dtype, which the key holds)


@dataclass
class AdaptRequest:
    model: str
    corpus: str
    output: str
    #: the default until the study says otherwise: the one method measured not to hurt a trained model on
    #: SciFact (docs/reports/domain.md: SimCSE +0.60 test nDCG@10, one seed; TSDAE at this rate took it apart)
    method: str = "simcse"
    #: label-free: 400; supervised: None, SUPERVISED_EPOCHS epochs of the fit rows
    steps: int | None = 400
    batch_size: int = 32
    #: None: 3e-5 label-free, SUPERVISED_RATE supervised
    learning_rate: float | None = 3e-5
    #: None: every 100 steps label-free, at each epoch's end supervised
    eval_steps: int | None = None
    choose: str | None = None  # qrels file to choose the checkpoint on
    report: str | None = None  # qrels file to report on
    seed: int = 42
    overwrite: bool = False
    resume: bool = False
    pooler: str | None = None
    #: tokens a training row keeps (default: the method's, METHODS); e.g. ICT's passages cut to 128 on a CPU
    max_length: int | None = None
    #: the precision the report encodes in: fp32 (the default: the same numbers on every machine), bf16, or
    #: auto (bf16 where it is native, else fp32); the report's table and adapt.json say which
    report_dtype: str = "fp32"
    #: the judgements the supervised stage trains on (a BEIR qrels file), split by query into fit and choose
    train: str | None = None
    #: the share of the training queries that choose the checkpoint where no --choose file is given
    choose_share: float | None = None
    #: mined hard negatives per row (0: in-batch negatives only; 1: one, training/judgements.py)
    hard_negatives: int = 1
    #: the first N fit queries only (a learning curve's nested subsets)
    fit_queries: int | None = None
    #: ``supervised`` after a label-free ``method`` (its stage in OUTPUT/first-stage)
    then: str | None = None

    def check(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"--method: {self.method!r} is not one of {', '.join(METHODS)}")
        supervised = SUPERVISED in (self.method, self.then)
        if self.then not in (None, SUPERVISED) or (self.then and self.method == SUPERVISED):
            raise ConfigError(f"--then {self.then}: only supervised, after a label-free --method")
        if supervised and not self.train:
            raise ConfigError(
                "--train: the supervised stage trains on judgements (e.g. FOLDER/qrels/train.tsv)"
            )
        if self.train and not supervised:
            raise ConfigError(
                f"--train {self.train}: judgements train the supervised stage: --method supervised, or "
                f"--method {self.method} --then supervised"
            )
        for name in ("fit_queries", "choose_share"):
            if getattr(self, name) is not None and not supervised:
                raise ConfigError(
                    f"--{name.replace('_', '-')}: for the supervised stage (--method supervised)"
                )
        if self.choose_share is not None and self.choose:
            raise ConfigError("--choose-share: the checkpoint is chosen on --choose's judgements; give one")
        if self.hard_negatives not in (0, 1):
            raise ConfigError(f"--hard-negatives {self.hard_negatives}: 0 (in-batch only) or 1")
        self.report_dtype = precision.canonical(self.report_dtype, "--report-dtype", precision.TRAINING)
        if self.max_length is not None and self.max_length < 8:
            raise ConfigError(f"--max-length: must be at least 8 tokens, got {self.max_length}")
        for name in ("steps", "batch_size", "eval_steps", "fit_queries"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')}: must be positive, got {getattr(self, name)}")
        if self.choose and self.report and Path(self.choose).resolve() == Path(self.report).resolve():
            raise ConfigError(
                f"--report {self.report}: the judgements the checkpoint is chosen on cannot also report it "
                "(choose on train, report on test)"
            )


@dataclass
class AdaptResult:
    output_dir: Path
    steps: int
    chosen_step: int | None
    table: str = ""
    report: dict[str, Any] = field(default_factory=dict)


def recipe(
    request: AdaptRequest, model_length: int | None = None, judged: Path | None = None
) -> dict[str, Any]:
    """The ``sentcl train`` recipe ``request`` runs (its length cut at the model's, ``model_length``);
    ``judged``: the supervised stage's rows folder (training/judgements.py); its split's
    ``qrels/choose.tsv`` chooses where no ``--choose`` file is given."""
    objective, unit, max_length, views = METHODS[request.method]
    max_length = request.max_length or max_length
    max_length = min(max_length, model_length or max_length)
    supervised = request.method == SUPERVISED
    rate = request.learning_rate or (SUPERVISED_RATE if supervised else 3e-5)
    eval_steps = request.eval_steps or LABEL_FREE_EVAL_STEPS
    if supervised and request.eval_steps is None:  # at each epoch's end
        assert judged is not None, "the supervised stage trains on its judgements' rows"
        with (judged / "train.jsonl").open(encoding="utf-8") as rows:
            eval_steps = max(1, -(-sum(1 for _ in rows) // request.batch_size))
    training: dict[str, Any] = {
        "output_dir": request.output, "batch_size": request.batch_size, "learning_rate": rate,
        "max_steps": request.steps or 0, "seed": request.seed, "checkpoint_steps": eval_steps,
        "overwrite_output_dir": request.overwrite, "resume": request.resume,
    }  # fmt: skip
    if supervised:  # SUPERVISED_EPOCHS of the fit rows unless steps are given, a tenth warm-up
        training |= {"epochs": SUPERVISED_EPOCHS, "warmup_ratio": SUPERVISED_WARMUP}
    held_out = judged.parent / "qrels" / "choose.tsv" if judged else None  # the split's, beside its rows
    choose = request.choose or (str(held_out) if held_out and held_out.is_file() else None)
    if choose:
        training |= {
            "eval_task": str(choose), "eval_steps": eval_steps, "eval_at_start": True,
            # the start is a candidate: where no step beats it on the user's judgements, model/ is the start
            "start_is_candidate": True, "eval_options": {"document_words": CHOICE_WORDS},
            "eval_dtype": "auto",  # the choice in bf16 where it is native (the report: report_dtype)
            "cache_start_evaluation": True,  # the start's choice metric measured once per model and task
        }  # fmt: skip
    else:
        training |= {"eval_steps": 0}  # nothing to choose on: the last step is kept
    model: dict[str, Any] = {"name_or_path": request.model}
    if request.pooler:
        model["pooler"] = request.pooler
    data: dict[str, Any] = {"train_file": request.corpus, "corpus_unit": unit, "max_length": max_length}
    if supervised:
        assert judged is not None, "the supervised stage trains on its judgements' rows"
        data["train_file"] = str(judged / "train.jsonl")
    if views is not None:
        data["n_views"] = views
    return {"model": model, "data": data, "objective": objective, "training": training}


def adapt(request: AdaptRequest) -> AdaptResult:
    """Train ``request`` (a label-free method, the supervised stage on the user's judgements, or the one then
    the other) and, where it names judgements to report on, the before/after table."""
    request.check()
    for option, judged in (("--choose", request.choose), ("--report", request.report)):
        if judged:  # the judgements are read before any training: a bad file fails first, in one line
            evaluator = build_evaluator(Path(), str(judged), Options(retrieval="dense"))
            if not isinstance(evaluator, RetrievalFolderEvaluator):
                raise ConfigError(f"{option} {judged}: judgements are a BEIR folder's qrels file")
    judgements = None
    if request.train:  # read, checked and split before anything is written (training/judgements.py)
        judgements = judgements_for(
            request.train, request.seed, request.choose_share, request.choose, request.report,
            request.fit_queries, request.batch_size,
        )  # fmt: skip
    start = load_encoder(request.model)
    if request.pooler is None:  # the model's own pooler (a trained model keeps the one it was trained with)
        request.pooler = start.pooler
    if request.then:
        trained = two_stages(request, start, judgements)
    else:
        trained = train_stage(request, start, judgements)
    result = AdaptResult(trained.output_dir, trained.steps, trained.best_step)
    if request.report:
        result.report, result.table = report_run(request, trained.output_dir)
        give_back_memory()  # the report's encodings and BM25 index are gone: their pages go back too
    return result


def train_stage(
    request: AdaptRequest, start: Any, judgements: Judgements | None, choose_from: Path | None = None
) -> TrainResult:
    """One ``sentcl train`` run of ``request`` from ``start`` (loaded); the supervised stage's rows made (and
    its negatives mined by ``start``) first. ``choose_from``: a data folder whose choose split chooses."""
    judged = choose_from
    if request.method == SUPERVISED:
        assert judgements is not None
        device = resolve_device("auto", "mining")
        dtype = precision.decide(
            precision.canonical(request.report_dtype, "--report-dtype", precision.TRAINING), device
        )
        miner = for_inference(start, dtype, device=str(device)) if request.hard_negatives else None
        key = model_key(start, False, dtype) if request.hard_negatives else ""
        judged = stage_data(judgements, request.hard_negatives, miner, key, request.seed)
    config = recipe_from_dict(recipe(request, start.max_length, judged))
    return train(config)


def two_stages(request: AdaptRequest, start: Any, judgements: Judgements | None) -> TrainResult:
    """``method`` into OUTPUT/first-stage, chosen on the same choose split, then the supervised stage from its
    model into OUTPUT (a finished first stage is read back: ``--resume`` continues where it stopped)."""
    output = Path(request.output)
    check_output_dir(output, request.overwrite, request.resume)  # the run folder's consent, before stage 1
    assert judgements is not None
    choose_data = None if request.choose else stage_data(judgements, 0, None, "", request.seed)
    first = replace(request, then=None, train=None, output=str(output / FIRST_STAGE))
    if first.resume and (output / FIRST_STAGE / "summary.json").is_file():
        logger.info("%s: the first stage is finished; training the supervised stage", output / FIRST_STAGE)
    else:
        first.resume = first.resume and (output / FIRST_STAGE).is_dir()
        train_stage(first, start, None, choose_data)
    middle = load_encoder(str(output / FIRST_STAGE / "model"), pooler=request.pooler)
    # --steps and --learning-rate set the label-free stage; the supervised stage takes its own defaults
    second = replace(
        request, method=SUPERVISED, then=None, model=str(output / FIRST_STAGE / "model"), steps=None,
        learning_rate=None,
    )  # fmt: skip
    return train_stage(second, middle, judgements)


def report_run(request: AdaptRequest, folder: Path) -> tuple[dict[str, Any], str]:
    """The before/after table of the run trained in ``folder`` (its ``model/``), written beside it: also
    later, for a run trained without ``report`` (a study reports only the runs its table reads)."""
    if request.pooler is None:
        request.pooler = load_encoder(request.model).pooler
    report = before_after(request, folder / "model", request.pooler)
    report["judgements"] = trained_on(folder)
    table = format_table(report)
    write_report(folder, report, table)
    return report, table


def trained_on(folder: Path) -> dict[str, Any] | None:
    """What a supervised run trained on (its rows folder's judgements.json: fit queries, rows, negatives),
    or None for a label-free run."""
    recipe_file = folder / "config.yaml"
    if not recipe_file.is_file():
        return None
    train_file = (
        (yaml.safe_load(recipe_file.read_text(encoding="utf-8")) or {}).get("data", {}).get("train_file")
    )
    summary = Path(str(train_file)).parent / "judgements.json" if train_file else None
    return json.loads(summary.read_text(encoding="utf-8")) if summary and summary.is_file() else None


def report_scores(report: str, source: str, pooler: str | None, dtype: str = "fp32") -> dict[str, Any]:
    """``source`` on the ``report`` judgements (dense, hybrid, BM25) in ``dtype`` (``auto`` decided for the
    device here): {"metrics", "per_query"}; recorded in the cache by the model's weights, the precision and
    the judgements' bytes, so a start measured once (a study's many runs from one model) is read back, never
    measured again."""
    encoder = load_encoder(source, pooler=pooler)
    device = resolve_device("auto", "the report")  # a GPU where there is one
    dtype = precision.decide(precision.canonical(dtype, "--report-dtype", precision.TRAINING), device)
    path = cache_dir() / "adapt-reports" / f"{report_key(encoder, report, dtype, device)}.json"
    if path.is_file():
        kept: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return kept
    evaluator = build_evaluator(Path(), str(report), Options(retrieval=",".join(REPORT_MODES)))
    metrics = evaluator(Batched(for_inference(encoder, dtype, device=str(device)), 64))
    where = describe_machine() + (f"; {detect(device).describe()}" if device.type != "cpu" else "")
    where += f"; encoded in {dtype}"
    scores = {"metrics": metrics, "per_query": {k: v.tolist() for k, v in evaluator.per_item().items()},
              "task": evaluator.names[0], "queries": len(evaluator.sets[0].queries),
              "measured_on": where, "dtype": dtype}  # fmt: skip
    write_record(path, scores, indent=None)
    return scores


def report_key(encoder: Any, report: str, dtype: str, device: torch.device) -> str:
    """What a cached report depends on: the model's weights and pooling, the precision, the judgements'
    bytes, and the kind of device (a GPU's fp32 sums in another order than a CPU's)."""
    parts = [model_key(encoder, False, dtype), sha256_of(qrels_file(Path(report))), REPORT_PROTOCOL]
    if device.type != "cpu":  # (a CPU's key as before the device was in it: its cached reports stay valid)
        parts.append(device.type)
    return digest_key(parts)


def before_after(request: AdaptRequest, adapted: Path, pooler: str | None) -> dict[str, Any]:
    """The start and the adapted model on the report's judgements: dense and hybrid nDCG@10 and Recall@100,
    and each difference's 95 % interval from a paired bootstrap over the queries."""
    assert request.report is not None
    scores = {label: report_scores(request.report, source, pooler, request.report_dtype)
              for label, source in (("start", request.model), ("adapted", str(adapted)))}  # fmt: skip
    name, queries = scores["start"]["task"], scores["start"]["queries"]
    bootstrap = MeanBootstrap(queries)
    for label, scored in scores.items():
        for key, values in scored["per_query"].items():
            bootstrap.add(f"{label}:{key}", np.asarray(values))
    differences = {
        key: asdict(bootstrap.compare(f"adapted:{key}", f"start:{key}"))
        for key in (f"{name}_ndcg@10", f"{name}_hybrid_ndcg@10")
    }
    differences["adapted_vs_bm25"] = asdict(
        bootstrap.compare(f"adapted:{name}_ndcg@10", f"start:{name}_bm25_ndcg@10")
    )
    return {
        "task": name, "queries": queries, "qrels": str(request.report), "method": request.method,
        "model": request.model, "metrics": {label: s["metrics"] for label, s in scores.items()},
        "per_query": {label: s["per_query"] for label, s in scores.items()}, "differences": differences,
        "measured_on": {label: s.get("measured_on", "not recorded") for label, s in scores.items()},
        "dtype": {label: s.get("dtype", "fp32") for label, s in scores.items()},
    }  # fmt: skip


def format_table(report: dict[str, Any]) -> str:
    name, rows = report["task"], report["metrics"]
    dtypes = "/".join(sorted(set(report.get("dtype", {}).values()) or {"fp32"}))
    lines = [
        f"{name} ({report['queries']} queries, {report['qrels']}): {report['model']} adapted by "
        f"{report['method']}, encoded in {dtypes}",
        "| model | nDCG@10 | Recall@100 | hybrid nDCG@10 | hybrid Recall@100 |",
        "|---|---|---|---|---|",
    ]
    for label in ("start", "adapted"):
        m = rows[label]
        lines.append(
            f"| {label} | {m[f'{name}_ndcg@10']:.2f} | {m[f'{name}_recall@100']:.2f} | "
            f"{m[f'{name}_hybrid_ndcg@10']:.2f} | {m[f'{name}_hybrid_recall@100']:.2f} |"
        )
    lines.append(f"| BM25 | {rows['start'][f'{name}_bm25_ndcg@10']:.2f} | "
                 f"{rows['start'][f'{name}_bm25_recall@100']:.2f} | | |")  # fmt: skip
    lines.append("")
    for key, label in ((f"{name}_ndcg@10", "adapted − start, nDCG@10"),
                       (f"{name}_hybrid_ndcg@10", "adapted − start, hybrid nDCG@10"),
                       ("adapted_vs_bm25", "adapted − BM25, nDCG@10")):  # fmt: skip
        d = Difference(**report["differences"][key])
        verdict = "told apart" if d.distinguishable else "not distinguishable"
        lines.append(f"{label}: {d} ({verdict}; 95 % paired bootstrap over the queries)")
    return "\n".join(lines)


def write_report(folder: Path, report: dict[str, Any], table: str) -> None:
    with atomic_file(folder / "adapt.json") as handle:
        handle.write(json.dumps(report, indent=2, default=float) + "\n")
    with atomic_file(folder / "adapt.md") as handle:
        handle.write(table + "\n")
