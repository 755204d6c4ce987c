"""Static students on the domain: where a static encoder distilled from the domain's
teacher sits on the speed–quality frontier of the domain's search.

    python -m sentcl_reproduction.domain_student configs/domain/study.yaml --start all-MiniLM-L6-v2

The teacher is the study's adapted model chosen on the choice judgements only: among the plan's methods
whose runs are finished for that start, the one whose seeds' kept checkpoints scored best on them (mean over
the seeds, at the learning rate the study chose). For every seed of the plan, two static students are
distilled on the domain's sentences (``configs/domain/static_student.yaml``: the students recipe, the
checkpoint chosen on the choice judgements): one from that seed's adapted model, one from the start — does
adapting the teacher reach the student? The report reads the test judgements only: nDCG@10 (mean ± std over
seeds), the difference with what each model comes from (a student's teacher, the adapted model's start) and
with BM25 (95 % intervals from a paired bootstrap over the queries, the seeds drawn again), and documents/s
encoding the domain's documents on the CPU (median of 3 timed runs on one machine, each model at sentcl's
default precision unless ``--dtype`` says otherwise). Every student is a ``sentcl train`` run folder: one
finished is read back, one interrupted resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentcl.analysis.plots import plot_frontier
from sentcl.data.corpus import read_corpus
from sentcl.evaluation.significance import Difference, MeanBootstrap
from sentcl.hardware import describe_machine
from sentcl.model.inference import for_inference, load_encoder
from sentcl.training.adapt import report_scores
from sentcl.training.kinds import load_run_recipe, replace_training, run
from sentcl_reproduction.domain_study import (
    NotRunError,
    Plan,
    adapted_into,
    chosen_on_train,
    over_seeds,
    run_folder,
    start_model,
    verdict,
)

logger = logging.getLogger(__name__)

RECIPE = "configs/domain/static_student.yaml"
TIMED_DOCUMENTS = 500  # documents encoded per timed run
TIMED_RUNS = 3


def teacher_method(plan: Plan, start: str, named: str | None = None) -> tuple[str, float, float]:
    """(method, learning rate, mean choice score) of the finished method whose seeds scored best on the
    choice judgements, or of ``named`` (``--teacher``: its rate still chosen on them); refuses when no
    method of the plan, or ``named``, is finished for ``start``."""
    if named is not None and named not in plan.methods:
        raise SystemExit(f"--teacher {named}: not in the plan, which has: {', '.join(plan.methods)}")
    scored = []
    for method in plan.methods:
        try:
            lr = chosen_on_train(plan, start, method, train=False)
            folders = [run_folder(plan, start, method, lr, seed) for seed in plan.seeds]
            if not all((f / "adapt.json").is_file() for f in folders):
                continue
        except NotRunError:
            continue
        summaries = [json.loads((f / "summary.json").read_text(encoding="utf-8")) for f in folders]
        score = float(np.mean([s["best_metrics"][s["primary_metric"]] for s in summaries]))
        scored.append((method, lr, score))
    if not scored:
        raise SystemExit(f"{start}: no method of the plan has finished every seed; run the study first")
    if named is not None:
        finished = [row for row in scored if row[0] == named]
        if not finished:
            raise SystemExit(f"--teacher {named}: not every seed of it is finished from {start}")
        return finished[0]
    return max(scored, key=lambda row: row[2])


def teacher_model(plan: Plan, start: str, method: str, lr: float, seed: int, folder: Path) -> str:
    """The study's adapted model of ``seed``; where its run kept no weights (a study's runs brought back
    from another machine without them), the same run trained again in ``folder``."""
    model = run_folder(plan, start, method, lr, seed) / "model"
    if any(model.glob("*.safetensors")):
        return str(model)
    again = folder / f"teacher {method} lr-{lr:g} seed-{seed}"
    logger.info("%s: no weights; the run is trained again in %s", model.parent, again)
    adapted_into(plan, start, method, lr, seed, again)
    return str(again / "model")


def student(teacher: str, seed: int, output: Path, recipe: str = RECIPE) -> str:
    """The static student of ``teacher`` (trained now, resumed, or read back): its model folder."""
    if (output / "summary.json").is_file():
        return str(output / "model")
    overrides = [f"model.name_or_path={teacher}", f"objective.teacher={teacher}", f"training.seed={seed}"]
    config = load_run_recipe("train", recipe, overrides)
    resume = (output / "checkpoint").is_dir()
    config = replace_training(config, output_dir=str(output), resume=resume, overwrite_output_dir=not resume)
    run("train", config)
    return str(output / "model")


def documents_per_second(model: str, documents: list[str], dtype: str = "auto") -> float:
    """Median over ``TIMED_RUNS`` runs (after one untimed) of documents/s on the CPU, in ``dtype`` (default
    sentcl's: auto)."""
    encoder = for_inference(load_encoder(model), dtype)
    encoder.encode(documents[:32], batch_size=32)
    times = []
    for _ in range(TIMED_RUNS):
        begin = time.perf_counter()
        encoder.encode(documents, batch_size=32)
        times.append(time.perf_counter() - begin)
    return len(documents) / statistics.median(times)


@dataclass
class Point:
    name: str
    models: list[str]  # one per seed (the start: one)
    teacher: str | None = None  # the point this one comes from (a student's teacher, the adapted's start)
    ndcg: list[float] = field(default_factory=list)
    per_second: float = 0.0
    versus_teacher: Difference | None = None
    versus_bm25: Difference | None = None


def measure(
    plan: Plan, start: str, recipe: str = RECIPE, dtype: str = "auto", teacher: str | None = None
) -> tuple[list[Point], dict]:
    method, lr, score = teacher_method(plan, start, teacher)
    chosen = "the finished method whose seeds scored best on the choice judgements"
    if teacher is not None:  # what the rule would have chosen, said beside it
        best, _, best_score = teacher_method(plan, start)
        chosen = (
            f"named by --teacher (mean choice nDCG@10 {score:.2f}; the best on the choice judgements is "
            f"`{best}`, {best_score:.2f})"
        )
    first = start_model(plan, start)
    folder = plan.output_dir / start / "static students"
    adapted = [teacher_model(plan, start, method, lr, seed, folder) for seed in plan.seeds]
    points = [
        Point(start, [first]),
        Point(f"{method} (adapted)", adapted, teacher=start),
        Point(f"static student of {start}", [student(first, s, folder / "of the start" / f"seed-{s}", recipe)
                                             for s in plan.seeds], teacher=start),
        Point(f"static student of {method}", [student(t, s, folder / f"of {method}" / f"seed-{s}", recipe)
                                              for t, s in zip(adapted, plan.seeds, strict=True)],
              teacher=f"{method} (adapted)"),
    ]  # fmt: skip
    scores = {p.name: [report_scores(plan.report_qrels, m, None) for m in p.models] for p in points}
    reference = scores[start][0]
    name = reference["task"]
    bootstrap = MeanBootstrap(reference["queries"])
    bootstrap.add("BM25", np.asarray(reference["per_query"][f"{name}_bm25_ndcg@10"]))
    for point in points:
        per_query = [s["per_query"][f"{name}_ndcg@10"] for s in scores[point.name]]
        bootstrap.add(point.name, np.asarray(per_query))
        point.ndcg = [s["metrics"][f"{name}_ndcg@10"] for s in scores[point.name]]
    documents = [row[0] for row in read_corpus(plan.corpus, "document").rows][:TIMED_DOCUMENTS]
    for point in points:
        point.per_second = documents_per_second(point.models[0], documents, dtype)
        point.versus_bm25 = bootstrap.compare(point.name, "BM25")
        if point.teacher:
            point.versus_teacher = bootstrap.compare(point.name, point.teacher)
    # does adapting the teacher reach the student? (the same recipe, seeds and sentences on both sides)
    students = bootstrap.compare(points[3].name, points[2].name)
    return points, reference["metrics"] | {
        "task": name,
        "method": method,
        "lr": lr,
        "students": students,
        "chosen": chosen,
    }


def report(
    plan: Plan,
    start: str,
    points: list[Point],
    reference: dict,
    figure: Path,
    machine: str,
    dtype: str = "auto",
) -> str:
    name = reference["task"]
    bm25 = reference[f"{name}_bm25_ndcg@10"]
    plot_frontier(
        [(p.name, p.per_second, float(np.mean(p.ndcg))) for p in points], {"BM25": bm25}, figure,
        f"documents/s encoding {TIMED_DOCUMENTS} {name} documents (log)", "test nDCG@10",
        f"{name}: static students on the speed–quality frontier",
    )  # fmt: skip
    head = ["model", "seeds", "test nDCG@10", "− what it comes from [95 %]", "verdict", "− BM25 [95 %]",
            "verdict", "documents/s", "× the start"]  # fmt: skip
    lines = [
        f"Teacher: `{reference['method']}` at lr {reference['lr']:g} from {start}, {reference['chosen']}. "
        f"Test judgements only below; documents/s on the CPU "
        f"({machine}), each model at --dtype {dtype}.", "",
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
    ]  # fmt: skip
    base = points[0].per_second
    for point in points:
        versus_teacher = (
            ["", ""] if point.teacher is None else [str(point.versus_teacher), verdict(point.versus_teacher)]
        )
        cells = [point.name, str(len(point.models)), over_seeds(point.ndcg), *versus_teacher,
                 str(point.versus_bm25), verdict(point.versus_bm25), f"{point.per_second:,.1f}",
                 f"{point.per_second / base:,.1f}×"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    students = reference["students"]
    lines += ["", f"BM25: {bm25:.2f}. The {points[3].name} − the {points[2].name}: {students} "
              f"({verdict(students)}).", "", f"![{name}: the frontier]({figure.name})"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="the domain study's plan, e.g. configs/domain/study.yaml")
    parser.add_argument("--start", required=True, help="the start whose teacher is distilled")
    parser.add_argument("--recipe", default=RECIPE, help=f"the students' recipe (default {RECIPE})")
    parser.add_argument("--out", type=Path, required=True, help="the markdown report (a PNG beside it)")
    parser.add_argument(
        "--dtype", default="auto", help="the precision documents/s is timed at (default auto)"
    )
    parser.add_argument(
        "--teacher",
        help="this method of the plan as the teacher (default: the best on the choice judgements)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    plan = Plan.load(args.plan)
    if args.start not in plan.starts:
        raise SystemExit(f"--start {args.start}: not in the plan, which has: {', '.join(plan.starts)}")
    points, reference = measure(plan, args.start, args.recipe, args.dtype, args.teacher)
    figure = args.out.with_suffix(".png")
    text = report(plan, args.start, points, reference, figure, describe_machine(), args.dtype)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    (args.out.with_suffix(".json")).write_text(
        json.dumps([p.__dict__ | {"versus_teacher": str(p.versus_teacher), "versus_bm25": str(p.versus_bm25)}
                    for p in points], indent=2), encoding="utf-8",
    )  # fmt: skip
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
