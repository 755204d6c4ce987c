"""The domain study: does adapting an encoder to a domain's unlabelled text help that domain's
search, and which method? One plan (``configs/domain/study.yaml``), one command (``make domain-study``):

    python -m sentcl_reproduction.domain_study configs/domain/study.yaml

For each start (a model, or one made by a ``sentcl pretrain`` recipe) and each method (``sentcl adapt``'s,
optionally after masked-LM continued pre-training on the domain: the GPL paper's two-stage order), the same
search budget: every learning rate of ``learning_rates`` trained with the first seed, the checkpoint and the
rate chosen on the ``choose`` judgements (step 0, the start, is a candidate); the chosen rate trained with the
other seeds. The report reads only the ``report`` judgements: nDCG@10 and Recall@100 (mean ± std over the
seeds), the difference with the start and with BM25 and its 95 % interval from a paired bootstrap over the
queries (each replicate draws the queries and the seeds again), and a verdict — "holds", "fails" (the
interval excludes 0 the other way) or "not distinguishable". Every run is a ``sentcl adapt`` run folder:
one already reported is read back, one interrupted resumes from its checkpoint, so the study resumes after
any interruption; only the runs the table reads are reported (a first-seed run at a rate not chosen is
trained and chosen among, never reported: a report encodes the whole corpus); the study's report is written
again at the end of every pair. A method may cut its rows (``max_length``) and ``settings`` may set the
report's precision (``report_dtype``), as ``configs/domain/study_cpu.yaml``, the plan sized for 2 CPU cores,
does.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shutil
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sentcl.analysis.plots import plot_method_bars
from sentcl.config import expand_path, load_yaml
from sentcl.evaluation.significance import Difference, MeanBootstrap
from sentcl.hardware import map_large_allocations
from sentcl.training.adapt import METHODS, AdaptRequest, adapt, report_run
from sentcl.training.kinds import load_run_recipe, replace_training, run

logger = logging.getLogger(__name__)

#: what a plan's method may say: its ``sentcl adapt`` method (default: its name), a ``sentcl pretrain``
#: recipe run first (the two-stage order), the tokens a training row keeps (default: the method's)
METHOD_KEYS = ("method", "pretrain", "max_length")


@dataclass
class Plan:
    output_dir: Path
    report: Path
    corpus: str
    choose: str
    report_qrels: str
    starts: dict[str, dict[str, Any]]
    methods: dict[str, dict[str, Any]]
    learning_rates: list[float]
    seeds: list[int]
    settings: dict[str, Any] = field(default_factory=dict)
    source: Path = Path("configs/domain/study.yaml")  # the plan's file (the report names it)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        raw = load_yaml(Path(path))
        paths = {k: expand_path(str(raw[k]), k) for k in ("corpus", "choose", "report_qrels")}
        methods = {name: (spec or {}) for name, spec in raw["methods"].items()}
        for name, spec in methods.items():
            method = spec.get("method", name)
            if method not in METHODS:
                raise ValueError(f"methods.{name}: {method!r} is not one of {', '.join(METHODS)}")
            unknown = sorted(set(spec) - set(METHOD_KEYS))
            if unknown:
                raise ValueError(f"methods.{name}.{unknown[0]}: not one of {', '.join(METHOD_KEYS)}")
        return cls(Path(raw["output_dir"]), Path(raw["report"]), paths["corpus"], paths["choose"],
                   paths["report_qrels"], raw["starts"], methods, [float(x) for x in raw["learning_rates"]],
                   [int(s) for s in raw["seeds"]], raw.get("settings", {}), Path(path))  # fmt: skip


def pretrained(recipe: str, output: Path, model: str | None = None) -> str:
    """The model a ``sentcl pretrain`` recipe makes (from ``model`` where given), made once, in ``output``."""
    if (output / "summary.json").is_file():
        return str(output / "model")
    overrides = [f"model.name_or_path={model}"] if model else []
    config = load_run_recipe("pretrain", recipe, overrides)
    resume = (output / "checkpoint").is_dir()
    config = replace_training(config, output_dir=str(output), resume=resume, overwrite_output_dir=not resume)
    run("pretrain", config)
    return str(output / "model")


def start_model(plan: Plan, name: str) -> str:
    spec = plan.starts[name]
    if "pretrain" in spec:
        return pretrained(spec["pretrain"], plan.output_dir / "starts" / name)
    return str(spec["model"])


def run_folder(plan: Plan, start: str, method: str, lr: float, seed: int) -> Path:
    return plan.output_dir / start / method / f"lr-{lr:g}" / f"seed-{seed}"


def stage_folder(plan: Plan, start: str, method: str) -> Path:
    """Where a two-stage method's masked-LM stage from ``start`` is made."""
    return plan.output_dir / start / method / "pretrained"


class NotRunError(LookupError):
    """A run the report needs is not finished, and the study was asked not to train (``--report-only``)."""


def adapted(
    plan: Plan, start: str, method: str, lr: float, seed: int, train: bool = True, report: bool = True
) -> dict:
    """One run's report (adapt.json), trained now or read back; an interrupted run resumes. Without
    ``report``, the run only trained (its summary.json; a first-seed run at a rate not chosen is never
    reported), and {} comes back; a run trained so is reported when a report is asked of it."""
    folder = run_folder(plan, start, method, lr, seed)
    return adapted_into(plan, start, method, lr, seed, folder, train, report)


def adapted_into(
    plan: Plan, start: str, method: str, lr: float, seed: int, folder: Path, train: bool = True,
    report: bool = True,
) -> dict:  # fmt: skip
    """:func:`adapted` with its run in ``folder``: the same run elsewhere (the study kept no weights)."""
    spec = plan.methods[method]
    if (folder / "adapt.json").is_file():
        return json.loads((folder / "adapt.json").read_text(encoding="utf-8"))
    trained = trained_in(folder)
    if trained and not report:
        return {}
    if not train:
        raise NotRunError(str(folder))
    model = start_model(plan, start)
    if "pretrain" in spec:  # the two-stage order: masked-LM on the domain first, from this start
        model = pretrained(spec["pretrain"], stage_folder(plan, start, method), model)
    reportable = trained and (folder / "model").is_dir()  # (a run that came back without its weights is not)
    resume = (folder / "checkpoint").is_dir() and not trained
    if folder.exists() and not resume and not reportable:
        shutil.rmtree(folder)  # a run that died before its first checkpoint: the study's own folder
    request = AdaptRequest(
        model, plan.corpus, str(folder), spec.get("method", method), learning_rate=lr, seed=seed,
        choose=plan.choose, report=plan.report_qrels if report else None, resume=resume,
        max_length=spec.get("max_length"), **plan.settings,
    )  # fmt: skip
    if reportable:  # trained before without its report: reported now
        report_run(request, folder)
    else:
        adapt(request)
    return json.loads((folder / "adapt.json").read_text(encoding="utf-8")) if report else {}


def trained_in(folder: Path) -> bool:
    """Whether a run finished its training in ``folder`` (its report aside; its weights may not have come
    back from the machine that trained it: then a report asked of it trains it again)."""
    return (folder / "summary.json").is_file()


def chosen_on_train(plan: Plan, start: str, method: str, train: bool = True) -> float:
    """The learning rate whose first-seed run scored best on the choice judgements (its kept step's)."""
    scores = {}
    for lr in plan.learning_rates:
        adapted(plan, start, method, lr, plan.seeds[0], train, report=False)
        folder = run_folder(plan, start, method, lr, plan.seeds[0])
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        scores[lr] = summary["best_metrics"][summary["primary_metric"]]
    return max(scores, key=lambda lr: scores[lr])


@dataclass
class Row:
    start: str
    method: str
    lr: float
    ndcg: list[float]  # per seed
    recall: list[float]
    versus_start: Difference
    versus_bm25: Difference
    steps: list[int]  # the step each seed kept (0: the start, nothing beat it)
    hybrid: list[float]  # per seed: BM25 + the adapted model, fused by rank
    hybrid_versus_bm25: Difference
    hybrid_versus_dense: Difference  # the adapted model's hybrid against the adapted model
    machines: list[str]  # where the seeds' reports were measured (adapt.json's measured_on)


def start_report(plan: Plan, start: str, train: bool = True) -> dict:
    """A report (adapt.json) of a run that began at ``start`` itself, whose "start" scores are the start's: a
    two-stage method's runs begin at its masked-LM stage's model instead, so they cannot say how the study's
    start scores."""
    single = [method for method, spec in plan.methods.items() if "pretrain" not in spec]
    if not single:
        raise ValueError("methods: the plan needs a method that starts from the start itself (no pretrain)")
    for method in single:
        for lr in plan.learning_rates:
            folder = run_folder(plan, start, method, lr, plan.seeds[0])
            if (folder / "adapt.json").is_file():
                return json.loads((folder / "adapt.json").read_text(encoding="utf-8"))
    lr = chosen_on_train(plan, start, single[0], train)
    return adapted(plan, start, single[0], lr, plan.seeds[0], train)


def rows_of(plan: Plan, start: str, method: str, train: bool = True) -> tuple[Row, dict]:
    """``method``'s row from ``start`` and the report whose "start" scores are the study's start's."""
    lr = chosen_on_train(plan, start, method, train)
    reports = [adapted(plan, start, method, lr, seed, train) for seed in plan.seeds]
    first = start_report(plan, start, train)
    name = reports[0]["task"]
    key = f"{name}_ndcg@10"
    bootstrap = MeanBootstrap(reports[0]["queries"])
    bootstrap.add("adapted", np.array([r["per_query"]["adapted"][key] for r in reports]))
    bootstrap.add("start", np.array(first["per_query"]["start"][key]))
    bootstrap.add("bm25", np.array(first["per_query"]["start"][f"{name}_bm25_ndcg@10"]))
    hybrid = f"{name}_hybrid_ndcg@10"
    bootstrap.add("adapted hybrid", np.array([r["per_query"]["adapted"][hybrid] for r in reports]))
    row = Row(
        start, method, lr, [r["metrics"]["adapted"][key] for r in reports],
        [r["metrics"]["adapted"][f"{name}_recall@100"] for r in reports],
        bootstrap.compare("adapted", "start"), bootstrap.compare("adapted", "bm25"),
        [kept_step(plan, start, method, lr, seed) for seed in plan.seeds],
        [r["metrics"]["adapted"][hybrid] for r in reports],
        bootstrap.compare("adapted hybrid", "bm25"), bootstrap.compare("adapted hybrid", "adapted"),
        sorted({r.get("measured_on", {}).get("adapted", "not recorded") for r in reports}),
    )  # fmt: skip
    return row, first


def kept_step(plan: Plan, start: str, method: str, lr: float, seed: int) -> int:
    folder = run_folder(plan, start, method, lr, seed)
    return int(json.loads((folder / "summary.json").read_text(encoding="utf-8"))["best_step"])


def over_seeds(values: list[float]) -> str:
    """Mean ± standard deviation over seeds (0 for one seed)."""
    spread = np.std(values, ddof=1) if len(values) > 1 else 0.0
    return f"{np.mean(values):.2f} ± {spread:.2f}"


def verdict(difference: Difference | None) -> str:
    if difference is None or not difference.distinguishable:
        return "not distinguishable"
    return "holds" if difference.delta > 0 else "fails"


def write_report(plan: Plan, rows: list[Row], starts: dict[str, dict]) -> None:
    lines = [
        "# The domain study: SciFact", "",
        f"Generated by `python -m sentcl_reproduction.domain_study {plan.source}` from the plan's runs in "
        f"`{plan.output_dir}`; every number below was measured by it.", "",
    ]  # fmt: skip
    done = {(r.start, r.method) for r in rows}
    missing = [f"{method} from {start}" for start in plan.starts for method in plan.methods
               if (start, method) not in done]  # fmt: skip
    if missing:
        lines += [f"**Partial**: the plan's runs not reported yet: {', '.join(missing)}.", ""]
    machines = sorted({machine for row in rows for machine in row.machines})
    lines += [f"The test reports were measured on: {'; and '.join(machines) or 'nothing yet'}.", ""]
    for start, first in starts.items():
        figure = plot_start(plan, start, first, [r for r in rows if r.start == start])
        intro, head = start_section(start, first)
        image = f"![test nDCG@10 from {start}]({figure.relative_to(plan.report.parent)})"
        lines += [*intro, image, "", *head]
        for row in (r for r in rows if r.start == start):
            cells = [
                row.method,
                f"{row.lr:g}",
                ", ".join(map(str, row.steps)),
                over_seeds(row.ndcg),
                f"{np.mean(row.recall):.2f}",
                str(row.versus_start),
                verdict(row.versus_start),
                str(row.versus_bm25),
                verdict(row.versus_bm25),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", *hybrid_table([r for r in rows if r.start == start]), ""]
    plan.report.parent.mkdir(parents=True, exist_ok=True)
    plan.report.write_text("\n".join(lines) + "\n", encoding="utf-8")


def figure_name(plan: Plan, start: str) -> str:
    """The figure of ``start``, named after the plan's report so that two plans never share one:
    domain_study.md → domain_<start>.png, domain_study_cpu.md → domain_cpu_<start>.png."""
    return f"{plan.report.stem.replace('domain_study', 'domain', 1)}_{start}.png"


def plot_start(plan: Plan, start: str, first: dict, rows: list[Row]) -> Path:
    """Each method's test nDCG@10 (mean, std over seeds) against the start, BM25 and the start's hybrid."""
    name, metrics = first["task"], first["metrics"]["start"]
    references = {"start": metrics[f"{name}_ndcg@10"], "BM25": metrics[f"{name}_bm25_ndcg@10"],
                  "start's hybrid": metrics[f"{name}_hybrid_ndcg@10"]}  # fmt: skip
    bars = [(r.method, float(np.mean(r.ndcg)), float(np.std(r.ndcg, ddof=1)) if len(r.ndcg) > 1 else 0.0)
            for r in rows]  # fmt: skip
    return plot_method_bars(bars, references, plan.report.parent / "images" / figure_name(plan, start),
                            "test nDCG@10", f"{name}: adapted from {start}")  # fmt: skip


def hybrid_table(rows: list[Row]) -> list[str]:
    """Each method's hybrid (BM25 + the adapted model by reciprocal rank fusion) against BM25 and against
    the adapted model alone: "hybrid beats both" holds for a method when both intervals exclude 0 above."""
    head = [
        "method",
        "hybrid nDCG@10",
        "hybrid − BM25 [95 %]",
        "verdict",
        "hybrid − adapted [95 %]",
        "verdict",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.method, over_seeds(row.hybrid)]
        for difference in (row.hybrid_versus_bm25, row.hybrid_versus_dense):
            cells += [str(difference), verdict(difference)]
        lines.append("| " + " | ".join(cells) + " |")
    return ["Hybrid search with each adapted model (BM25 + dense, reciprocal rank fusion):", "", *lines]


def start_section(start: str, first: dict) -> tuple[list[str], list[str]]:
    """The start's paragraph (its hybrid against BM25 and against the start alone, paired over queries),
    and the head of its table."""
    name, metrics = first["task"], first["metrics"]["start"]
    ndcg, recall = metrics[f"{name}_ndcg@10"], metrics[f"{name}_recall@100"]
    bm25, hybrid = metrics[f"{name}_bm25_ndcg@10"], metrics[f"{name}_hybrid_ndcg@10"]
    bootstrap = MeanBootstrap(first["queries"])
    for label, key in (("start", "ndcg@10"), ("bm25", "bm25_ndcg@10"), ("hybrid", "hybrid_ndcg@10")):
        bootstrap.add(label, np.array(first["per_query"]["start"][f"{name}_{key}"]))
    over_bm25, over_start = bootstrap.compare("hybrid", "bm25"), bootstrap.compare("hybrid", "start")
    head = ["method", "lr (chosen on train)", "step kept per seed (0: the start)", "nDCG@10", "Recall@100"]
    head += ["− start [95 %]", "verdict"]
    head += ["− BM25 [95 %]", "verdict"]
    intro = [
        f"## From {start}", "",
        f"The start: nDCG@10 {ndcg:.2f}, Recall@100 {recall:.2f}; BM25 {bm25:.2f}; the start's hybrid "
        f"{hybrid:.2f} ({first['queries']} test queries). The start's hybrid − BM25: {over_bm25} "
        f"({verdict(over_bm25)}); − the start: {over_start} ({verdict(over_start)}).", "",
    ]  # fmt: skip
    return intro, ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]


def selected(plan: Plan, starts: list[str] | None, methods: list[str] | None) -> tuple[list[str], list[str]]:
    """The starts and methods to run, in the plan's order (all of them unless named)."""
    for option, named, known in (("--start", starts, plan.starts), ("--method", methods, plan.methods)):
        unknown = [name for name in named or [] if name not in known]
        if unknown:
            raise SystemExit(f"{option} {unknown[0]}: not in the plan, which has: {', '.join(known)}")
    return ([s for s in plan.starts if not starts or s in starts],
            [m for m in plan.methods if not methods or m in methods])  # fmt: skip


def next_runs(plan: Plan, start: str, method: str) -> list[tuple[float, int]]:
    """The runs of ``start`` × ``method`` that can train now, as (rate, seed): the first seed's at every rate
    until they are all finished, then the other seeds' at the rate chosen on train; none when all are done."""
    first = [(lr, plan.seeds[0]) for lr in plan.learning_rates]
    waiting = [(lr, seed) for lr, seed in first if not trained_in(run_folder(plan, start, method, lr, seed))]
    if waiting:
        return waiting
    lr = chosen_on_train(plan, start, method, train=False)
    return [
        (lr, seed)
        for seed in plan.seeds[1:]
        if not (run_folder(plan, start, method, lr, seed) / "adapt.json").is_file()
    ]


def _in_process(threads: int, start: str, method: str) -> None:
    import torch

    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s {method} from {start}: %(message)s")


def _train_run(plan: Plan, start: str, method: str, lr: float, seed: int, threads: int) -> None:
    """One run, in a process of its own (``--jobs``)."""
    _in_process(threads, start, method)
    adapted(plan, start, method, lr, seed, report=seed != plan.seeds[0])  # the first seeds: chosen among


def _make_stage(plan: Plan, start: str, method: str, threads: int) -> None:
    """A two-stage method's masked-LM stage from ``start``, in a process of its own (``--jobs``)."""
    _in_process(threads, start, method)
    pretrained(plan.methods[method]["pretrain"], stage_folder(plan, start, method), start_model(plan, start))


def train_in_parallel(plan: Plan, starts: list[str], methods: list[str], jobs: int) -> None:
    """Every start × method's runs, ``jobs`` runs at once, each in its own process (a GPU several share; the
    CPU's cores divided among them): a start made by a recipe is made first, once; then a two-stage method's
    masked-LM stage; then every rate's first-seed run at once, and once a pair's are all finished, the other
    seeds at the rate chosen on train, at once. A failed pair is one error naming it, after the others have
    finished; every finished run stays and is read back."""
    for start in starts:
        start_model(plan, start)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    pairs = [(start, method) for start in starts for method in methods]
    failed: dict[tuple[str, str], str] = {}
    asked: set[tuple] = set()
    running: dict[Future, tuple[str, str]] = {}
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:

        def submit(start: str, method: str) -> None:
            try:
                runs = next_runs(plan, start, method)
            except (OSError, ValueError, KeyError) as error:  # a first-seed run's summary unreadable
                failed[start, method] = str(error)
                return
            stage = stage_folder(plan, start, method) / "summary.json"
            tasks = (
                [(_make_stage, plan, start, method, threads)]
                if runs and "pretrain" in plan.methods[method] and not stage.is_file()
                else [(_train_run, plan, start, method, lr, seed, threads) for lr, seed in runs]
            )
            for task in tasks:
                key = (task[0].__name__, *task[2:-1])  # the plan aside: not hashable
                if key in asked:  # it ran and left nothing to read back
                    failed[start, method] = f"{key} finished without its report"
                    return
                asked.add(key)
                running[pool.submit(*task)] = (start, method)

        for pair in pairs:
            submit(*pair)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                pair = running.pop(future)
                if future.exception() is not None:
                    failed.setdefault(pair, str(future.exception()))
                elif pair not in failed and pair not in running.values():
                    submit(*pair)
    if failed:
        (start, method), error = next(iter(failed.items()))
        raise SystemExit(
            f"--jobs {jobs}: {len(failed)} of {len(pairs)} failed; the first: {method} from {start}: {error}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="e.g. configs/domain/study.yaml")
    parser.add_argument("--start", action="append", help="only this start of the plan (repeatable)")
    parser.add_argument("--method", action="append", help="only this method of the plan (repeatable)")
    parser.add_argument(
        "--report-only", action="store_true",
        help="train nothing: the report of the methods whose runs are all finished, the rest listed",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="runs trained at once, each in its own process (for a GPU or many cores; default 1)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise SystemExit(f"--jobs {args.jobs}: must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    map_large_allocations()  # many runs in this process: each one's large tensors go back when freed
    plan = Plan.load(args.plan)
    starts, methods = selected(plan, args.start, args.method)
    if args.jobs > 1 and not args.report_only:
        train_in_parallel(plan, starts, methods, args.jobs)
    rows: list[Row] = []
    firsts: dict[str, dict] = {}
    for start in starts:
        for method in methods:
            try:
                row, first = rows_of(plan, start, method, train=not args.report_only)
            except NotRunError as missing:
                logging.getLogger(__name__).info(
                    "%s from %s: not reported, %s is not finished", method, start, missing
                )
                continue
            rows.append(row)
            firsts.setdefault(start, first)
            write_report(plan, rows, firsts)
    print(plan.report.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
