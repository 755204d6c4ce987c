"""``sentcl evaluate``: STS, SentEval transfer, the user's own pair files and BEIR folders, optionally after
a post-processor (fitted now or loaded)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sentcl import finite_json
from sentcl.atomic_write import atomic_file, check_file_target, check_replaceable
from sentcl.cli.common import (
    DATA_DIR_HELP,
    PICKLES,
    add_dtype_arguments,
    add_fit_arguments,
    add_overwrite_argument,
    dimensions,
    fit,
    inference_encoder,
    positive_int,
)  # fmt: skip
from sentcl.config import ConfigError
from sentcl.embedder import Batched, Embedder
from sentcl.evaluation.data_dir import data_dir_for
from sentcl.evaluation.senteval_protocols import PROTOCOLS
from sentcl.evaluation.significance import Comparison, SeedInterval, compare, summarize
from sentcl.evaluation.suite import EvaluationSuite
from sentcl.evaluation.tasks import known_tasks
from sentcl.model import pooler_argument
from sentcl.model.pooling import LOADING_DEFAULT
from sentcl.passages import PASSAGE_SCORES
from sentcl.postprocess import POSTPROCESSORS, PostProcessedEmbedder, load_postprocessor
from sentcl.postprocess.corpus import fit_corpus
from sentcl.training.seeds import seed_folders

NAMES = ("evaluate",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "evaluate",
        parents=[PICKLES],
        help="evaluate a model: STS, SentEval transfer, your own pair files and retrieval (BEIR) folders",
    )
    p.add_argument("model", help="a model folder, a sentcl run folder or a hub id")
    p.add_argument(
        "--pooler",
        type=pooler_argument,
        help=f"default: the one saved with the model, else {LOADING_DEFAULT}",
    )
    p.add_argument(
        "--tasks",
        default="sts",
        help=f"comma-separated task names (sts: the 7-task table, transfer: SentEval's): {known_tasks()}; or "
        f"your own data: a pair file (.csv/.tsv/.jsonl with sentence1, sentence2, score or label) or a "
        f"retrieval folder in BEIR's layout (docs/evaluation.md)",
    )
    p.add_argument("--aggregation", default="all", choices=["all", "mean", "wmean"], help="for STS12–16")
    p.add_argument(
        "--transfer-protocol",
        default="simcse",
        choices=list(PROTOCOLS),
        help="simcse: SentEval's PyTorch logistic regression as SimCSE's paper ran it (default); "
        "senteval-sklearn: SentEval's scikit-learn path",
    )
    p.add_argument(
        "--retrieval",
        help="for retrieval folders: comma-separated among dense (the model), bm25 (bm25s, no model) and "
        "hybrid (the two fused by reciprocal rank); the first is primary (default dense); refused when "
        "--tasks names no retrieval folder",
    )
    p.add_argument(
        "--passages",
        choices=list(PASSAGE_SCORES),
        help="for retrieval folders: split documents longer than the model reads into overlapping token "
        "windows (the title before each) and score a document by its best (max) or first passage; BM25 "
        "reads whole documents (docs/evaluation.md). Default: each document as the model truncates it",
    )
    p.add_argument(
        "--passage-overlap",
        type=int,
        help="with --passages: tokens neighbouring windows share (default: an eighth of the window)",
    )
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--json", help="also write all scores to this JSON file")
    p.add_argument(
        "--postprocess", help="whitening | flow | abtt (fitted now), or a saved post-processor folder"
    )
    add_fit_arguments(p)
    p.add_argument("--save-postprocess", help="save the fitted post-processor in this folder")
    add_overwrite_argument(p, "--save-postprocess", also="a file at --json")
    p.add_argument(
        "--seeds",
        action="store_true",
        help="MODEL is a folder `sentcl train --seeds` wrote (or MODEL1,MODEL2,...): evaluate each, then "
        "mean ± std and the 95 %% interval of every metric",
    )
    p.add_argument(
        "--against",
        help="another model (or seeds folder): the difference of every metric with its 95 %% intervals "
        "(over the models, and a paired bootstrap over the evaluation pairs, or over a retrieval folder's "
        "queries) and whether it is told apart",
    )
    add_dtype_arguments(p, default="fp32")


def run_command(args: argparse.Namespace) -> int:
    models = seed_models(args.model) if args.seeds else [args.model]
    others = (
        (seed_models(args.against) if _has_seeds(args.against) else [args.against]) if args.against else []
    )
    if args.save_postprocess:  # refused before anything is encoded, fitted or written
        if args.postprocess not in POSTPROCESSORS:
            known = ", ".join(POSTPROCESSORS)
            raise ConfigError(
                f"--save-postprocess saves a post-processor fitted now: pass --postprocess {known}"
            )
        if len(models) + len(others) > 1:
            raise ConfigError("--save-postprocess saves one fitted post-processor: evaluate one model")
        check_replaceable(args.save_postprocess, "postprocessor", args.overwrite, "--save-postprocess")
    if args.json:
        check_file_target(args.json, "--json", args.overwrite)
    # the user's own files need no shared data; a post-processor fitted on a named corpus does
    fits_on_shared = bool(args.postprocess) and not Path(args.postprocess).is_dir()  # a named corpus
    data_dir = data_dir_for(args.tasks, args.data_dir, also_needed=fits_on_shared)
    if args.passage_overlap is not None and not args.passages:
        raise ConfigError("--passage-overlap: for --passages (documents are not split without it)")
    suite = EvaluationSuite(
        data_dir, args.tasks, args.aggregation, args.transfer_protocol, args.retrieval or "dense",
        passages=args.passages or "", passage_overlap=args.passage_overlap,
    )  # fmt: skip
    for option, value in (("--retrieval", args.retrieval), ("--passages", args.passages)):
        if value is not None and "beir" not in suite.families:
            raise ConfigError(f"{option} {value}: for retrieval folders; --tasks {args.tasks} names none")
    if suite.sts is not None:
        suite.sts.require_primary()  # one line before any model loads
    runs: list[Evaluated] = []
    for model in models:  # models of one kind and dimension: their metrics are averaged
        runs.append(evaluate_model(model, args, suite, data_dir, like=runs[0] if runs else None))
    for run in runs:
        print(run.label)
        print(run.tables)
    payload: dict = {"model": args.model, "postprocess": args.postprocess}
    if len(runs) == 1:
        payload |= {"pooler": runs[0].pooler, "metrics": runs[0].metrics} | runs[0].results
    else:
        summary = summarize([run.metrics for run in runs])
        print(f"\n{args.model}: {len(runs)} models, mean ± std [95 % interval over them, from 3 on]")
        print(format_summary(summary))
        payload |= {
            "models": [run.as_json() for run in runs],
            "summary": {k: asdict(v) for k, v in summary.items()},
        }
    if others:
        against: list[Evaluated] = []
        for model in others:
            against.append(evaluate_model(model, args, suite, data_dir, like=against[0] if against else None))
        comparison = compare(
            [r.metrics for r in runs], [r.metrics for r in against], [r.pairs for r in runs],
            [r.pairs for r in against], [r.items for r in runs], [r.items for r in against],
        )  # fmt: skip
        print(f"\n{args.model} minus {args.against} ({len(runs)} against {len(against)} models):")
        print(format_comparison(comparison))
        payload |= {"against": args.against, "against_models": [run.as_json() for run in against]}
        payload["comparison"] = {
            key: {"difference": c.difference, "told_apart": c.told_apart}
            | {name: [i.low, i.high] for name, i in c.intervals.items()}
            for key, c in comparison.items()
        }
    if args.json:
        with atomic_file(Path(args.json)) as handle:
            finite_json.dump(payload, handle, indent=2)
    return 0


@dataclass
class Evaluated:
    """One model's evaluation: what is printed, what goes to --json, and each metric's evaluation pairs."""

    model: str
    label: str
    pooler: str
    metrics: dict[str, float]
    tables: str
    results: dict
    pairs: dict[str, tuple[np.ndarray, np.ndarray]]
    #: what kind of encoder it is and its vectors' dimension: models averaged over seeds share both
    kind: str = ""
    dimension: int = 0
    #: metric → its value per evaluated item (a retrieval folder's per-query nDCG@10), for --against
    items: dict[str, np.ndarray] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"model": self.model, "pooler": self.pooler, "metrics": self.metrics} | self.results


def evaluate_model(
    model: str,
    args: argparse.Namespace,
    suite: EvaluationSuite,
    data_dir: Path,
    like: Evaluated | None = None,
) -> Evaluated:
    """``model`` encoded as the command's options say (pooler, dtype, dimensions, a post-processor fitted on
    it or loaded) and evaluated by ``suite``; ``like``: a model of the same set (``--seeds``), whose kind and
    dimension this one must share (checked before it is evaluated)."""
    args = argparse.Namespace(**(vars(args) | {"model": model}))
    dtype = args.dtype
    encoder = inference_encoder(args)
    kind = f"{type(encoder).__name__} (pooler {encoder.pooler})"
    if like is not None and (kind, encoder.dimension) != (like.kind, like.dimension):
        raise ConfigError(
            f"--seeds: {model} is a {kind} of {encoder.dimension} dimensions, {like.model} a {like.kind} of "
            f"{like.dimension}: the runs of one set are one kind of model"
        )
    # prompts: retrieval tasks encode queries and documents with them
    embedder: Embedder = Batched(encoder, args.batch_size, dim=dimensions(args.dim, encoder.dimension))
    label = f"{model} (pooler {encoder.pooler}{'' if dtype == 'fp32' else ', ' + dtype})"
    if args.postprocess:
        if Path(args.postprocess).is_dir():
            processor = load_postprocessor(args.postprocess)
        elif args.postprocess in POSTPROCESSORS:
            processor = fit(args.postprocess, embedder, fit_corpus(args.fit_on, data_dir, args.fit_max))
            if args.save_postprocess:
                processor.save(
                    args.save_postprocess, fitted_on=f"{model}: {args.fit_on}", overwrite=args.overwrite
                )
        else:
            known = ", ".join(POSTPROCESSORS)
            raise ConfigError(
                f"--postprocess {args.postprocess!r}: neither a saved folder nor one of {known}"
            )
        embedder = PostProcessedEmbedder(embedder, processor)
        label += f" + {processor.name}"
    metrics, tables = suite.run(embedder)
    sts = suite.sts
    pairs = sts.metric_pairs(sts.last_report) if sts is not None and sts.last_report is not None else {}
    items = {
        key: values
        for e in suite.evaluators
        if hasattr(e, "per_item")
        for key, values in e.per_item().items()
    }
    return Evaluated(
        model,
        label,
        encoder.pooler,
        metrics,
        tables,
        dict(suite.results),
        pairs,
        kind,
        encoder.dimension,
        items,
    )


def _has_seeds(folder: str) -> bool:
    return Path(folder).is_dir() and bool(seed_folders(folder))


def seed_models(spec: str) -> list[str]:
    """``--seeds``: the models of a folder ``sentcl train --seeds`` wrote (its ``seed-N`` run folders), or a
    comma-separated list of models."""
    if "," in spec:
        models = [part.strip() for part in spec.split(",") if part.strip()]
        if not models:
            raise ConfigError(f"--seeds: {spec!r} names no model; name them: MODEL1,MODEL2,...")
        return models
    folders = seed_folders(spec)
    if not folders:
        raise ConfigError(
            f"--seeds: {spec} holds no seed-N folders (sentcl train --seeds writes them); or name the "
            f"models: MODEL1,MODEL2,..."
        )
    return [str(folder) for folder in folders]


def format_summary(summary: dict[str, SeedInterval]) -> str:
    width = max((len(k) for k in summary), default=6)
    return "\n".join(f"{key:<{width}}  {value}  (n={value.n})" for key, value in summary.items())


def format_comparison(comparison: dict[str, Comparison]) -> str:
    width = max((len(k) for k in comparison), default=6)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in comparison.items())
