"""How many judgements a domain needs: the learning curve of ``sentcl adapt --method supervised``.

    python -m sentcl_reproduction.judgement_curve configs/domain/judgements_cpu.yaml

From one start, on one BEIR folder: the training judgements split by query into fit and choose (seeded: each
seed has its own split), the first N fit queries for each size (nested: a smaller size's queries are among a
larger one's), trained with in-batch negatives only and with one mined hard negative per row, every size for
the same number of steps (a small set is repeated; the checkpoint chosen on the choose queries at the end,
the start a candidate); plus, at the largest size with hard negatives, a label-free method first, and the
recipe checks (the same run with more steps or another learning rate, on the first seed: is the budget what
limits the gain?). The report
reads only the report judgements: nDCG@10, Recall@100 and the hybrid's nDCG@10 (mean ± std over the seeds),
each row against the start, BM25 and the start's hybrid with 95 % intervals from a paired bootstrap over the
queries (each replicate draws the queries and the seeds again), and the verdicts the issue asks for. Every
run is a ``sentcl adapt`` run folder: one reported is read back, one interrupted resumes, so the curve
resumes after any interruption; the report and its figure are written again after every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentcl.analysis.plots import plot_learning_curve
from sentcl.config import expand_path, load_yaml
from sentcl.data.corpus import read_corpus
from sentcl.evaluation.significance import Difference, MeanBootstrap
from sentcl.hardware import describe_machine, map_large_allocations
from sentcl.training.adapt import AdaptRequest, adapt, report_run, report_scores
from sentcl_reproduction.domain_student import TIMED_DOCUMENTS, documents_per_second, student

logger = logging.getLogger(__name__)

ALL = "all"
#: a static student is a table lookup and a mean: it is reported (and runs) in fp32 on every machine
STATIC_DTYPE = "fp32"


@dataclass
class Curve:
    output_dir: Path
    report: Path
    start: str
    corpus: str
    train: str
    report_qrels: str
    sizes: list[int | str]
    negatives: list[int]
    seeds: list[int]
    label_free_first: dict[str, Any]
    settings: dict[str, Any]
    source: Path
    #: the static students' recipe (docs/students.md): one per seed, of the largest size's hard-negative run
    student: str | None = None
    #: the largest size's hard-negative run again with other settings (``name`` and ``label``, then
    #: ``steps``, ``eval_steps``, ``learning_rate``), on its ``seeds`` or ``recipe_seeds`` (default the first)
    recipe_checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    recipe_seeds: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> Curve:
        raw = load_yaml(Path(path))
        paths = {k: expand_path(str(raw[k]), k) for k in ("corpus", "train", "report_qrels")}
        sizes = [s if s == ALL else int(s) for s in raw["sizes"]]
        return cls(Path(raw["output_dir"]), Path(raw["report"]), str(raw["start"]), paths["corpus"],
                   paths["train"], paths["report_qrels"], sizes, [int(n) for n in raw["negatives"]],
                   [int(s) for s in raw["seeds"]], raw.get("label_free_first") or {}, raw.get("settings", {}),
                   Path(path), raw.get("student"), list(raw.get("recipe_checks") or []),
                   [int(s) for s in raw.get("recipe_seeds") or raw["seeds"][:1]])  # fmt: skip


def row_name(size: int | str, negatives: int, first: str | None = None) -> str:
    kind = "hard negatives" if negatives else "in-batch"
    return f"{first} then supervised, {size}, {kind}" if first else f"{size}, {kind}"


def run_folder(
    curve: Curve,
    size: int | str,
    negatives: int,
    seed: int,
    first: str | None = None,
    check: str | None = None,
) -> Path:
    kind = "hard" if negatives else "in-batch"
    name = f"{first}-then-{size}-{kind}" if first else f"{size}-{kind}"
    return curve.output_dir / (f"{name}-{check}" if check else name) / f"seed-{seed}"


#: what a recipe check may change of a run's request
RECIPE_KEYS = ("steps", "eval_steps", "learning_rate")


def request_for(
    curve: Curve, size: int | str, negatives: int, seed: int, folder: Path, first: str | None = None
) -> AdaptRequest:
    settings = curve.settings
    request = AdaptRequest(
        model=curve.start, corpus=curve.corpus, output=str(folder), method=first or "supervised",
        steps=int(curve.label_free_first.get("steps", 100)) if first else int(settings["steps"]),
        batch_size=int(settings.get("batch_size", 32)),
        learning_rate=float(curve.label_free_first.get("learning_rate", 3e-5)) if first
        else float(settings.get("learning_rate", 2e-5)),
        eval_steps=int(settings.get("eval_steps", settings["steps"])), report=curve.report_qrels, seed=seed,
        report_dtype=str(settings.get("report_dtype", "fp32")), train=curve.train,
        choose_share=float(settings.get("choose_share", 0.2)), hard_negatives=negatives,
        fit_queries=None if size == ALL else int(size), then="supervised" if first else None,
        max_length=settings.get("max_length"), pooler=settings.get("pooler"),
    )  # fmt: skip
    request.resume = folder.is_dir() and not (folder / "summary.json").is_file()
    request.overwrite = False
    return request


def reported(
    curve: Curve,
    size: int | str,
    negatives: int,
    seed: int,
    first: str | None = None,
    check: dict | None = None,
) -> dict:
    """One run's report (adapt.json): read back, reported (trained, not reported), or trained now; ``check``
    a recipe check's changes to the run."""
    folder = run_folder(curve, size, negatives, seed, first, check["name"] if check else None)
    if (folder / "adapt.json").is_file():
        return json.loads((folder / "adapt.json").read_text(encoding="utf-8"))
    request = request_for(curve, size, negatives, seed, folder, first)
    if check:
        changes = {key: type(getattr(request, key))(check[key]) for key in RECIPE_KEYS if key in check}
        request = dataclasses.replace(request, **changes)
    started = time.monotonic()
    if (folder / "summary.json").is_file():
        report, _ = report_run(request, folder)
    else:
        report = adapt(request).report
    logger.info(
        "%s, seed %d: %.1f min", row_name(size, negatives, first), seed, (time.monotonic() - started) / 60
    )
    return report


@dataclass
class Row:
    name: str
    size: int | str
    negatives: int
    reports: list[dict]
    seeds: list[int]
    #: "student": a static student of the row ``teacher`` names (not a point of the curve)
    kind: str = "run"
    teacher: str | None = None

    def values(self, key: str) -> list[float]:
        return [r["metrics"]["adapted"][f"{r['task']}_{key}"] for r in self.reports]

    def per_query(self, key: str) -> np.ndarray:
        return np.array([r["per_query"]["adapted"][f"{r['task']}_{key}"] for r in self.reports])


def over_seeds(values: list[float]) -> str:
    spread = np.std(values, ddof=1) if len(values) > 1 else 0.0
    return f"{np.mean(values):.2f} ± {spread:.2f}"


def verdict(difference: Difference) -> str:
    if not difference.distinguishable:
        return "not distinguishable"
    return "holds" if difference.delta > 0 else "fails"


def compare(rows: list[Row], first: dict) -> tuple[MeanBootstrap, dict[str, float]]:
    """Every row's per-query scores (over its seeds) and the start's, BM25's and the start's hybrid's on the
    same bootstrap draws."""
    start = first["per_query"]["start"]
    name = first["task"]
    bootstrap = MeanBootstrap(first["queries"])
    references = {}
    for label, key in (("start", "ndcg@10"), ("BM25", "bm25_ndcg@10"), ("start's hybrid", "hybrid_ndcg@10")):
        bootstrap.add(label, np.array(start[f"{name}_{key}"]))
        references[label] = first["metrics"]["start"][f"{name}_{key}"]
    for row in rows:
        bootstrap.add(row.name, row.per_query("ndcg@10"))
        bootstrap.add(f"{row.name} hybrid", row.per_query("hybrid_ndcg@10"))
    return bootstrap, references


def write_report(curve: Curve, rows: list[Row], missing: list[str]) -> None:
    if not rows:
        return
    first = rows[0].reports[0]
    bootstrap, references = compare(rows, first)
    figure = plot_learning_curve(
        {
            label: [(fit_size(row), float(np.mean(row.values("ndcg@10"))), spread(row.values("ndcg@10")))
                    for row in rows if row.negatives == negatives and "then" not in row.name
                    and row.kind == "run"]
            for negatives, label in ((0, "in-batch negatives"), (1, "+ mined hard negatives"))
        },
        references, curve.report.parent / "images" / f"{curve.report.stem}.png", "labelled queries fitted on",
        "test nDCG@10", f"{first['task']}: {curve.start.split('/')[-1]} on judgements",
    )  # fmt: skip
    machines = sorted({r.get("measured_on", {}).get("adapted", "?") for row in rows for r in row.reports})
    lines = [
        f"# How many judgements: {first['task']}", "",
        f"Generated by `python -m sentcl_reproduction.judgement_curve {curve.source}` from the runs in "
        f"`{curve.output_dir}`; every number below was measured by it. Start {curve.start}; settings "
        f"{json.dumps(curve.settings)}; seeds {curve.seeds}. Test reports measured on: "
        f"{'; '.join(machines)}.",
        "",
    ]  # fmt: skip
    if missing:
        lines += [f"**Partial**: not reported yet: {', '.join(missing)}.", ""]
    lines += [f"![test nDCG@10 against labelled queries]({figure.relative_to(curve.report.parent)})", ""]
    lines += [f"References: {', '.join(f'{k} {v:.2f}' for k, v in references.items())} "
              f"({first['queries']} test queries).", ""]  # fmt: skip
    head = ["row", "fit queries", "nDCG@10", "Recall@100", "− start [95 %]", "verdict", "hybrid nDCG@10",
            "hybrid − BM25 [95 %]", "verdict", "hybrid − start's hybrid [95 %]", "verdict"]  # fmt: skip
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        versus = [bootstrap.compare(row.name, "start"), bootstrap.compare(f"{row.name} hybrid", "BM25"),
                  bootstrap.compare(f"{row.name} hybrid", "start's hybrid")]  # fmt: skip
        cells = [row.name, str(fit_size(row)), over_seeds(row.values("ndcg@10")),
                 f"{np.mean(row.values('recall@100')):.2f}", str(versus[0]), verdict(versus[0]),
                 over_seeds(row.values("hybrid_ndcg@10")), str(versus[1]), verdict(versus[1]), str(versus[2]),
                 verdict(versus[2])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    for row in (r for r in rows if r.kind == "student"):
        speed = row.reports[0]["speed"]
        lines += ["", f"Documents/s encoding {speed['documents']} of the domain's documents on "
                  f"{speed['machine']} (median of 3, --dtype {curve.settings.get('report_dtype', 'fp32')}; "
                  f"the student's test report in {STATIC_DTYPE}): the start "
                  f"{speed['start']:,.1f}, the {row.name} {speed['student']:,.1f} "
                  f"({speed['student'] / speed['start']:,.0f}×)."]  # fmt: skip
    lines += ["", *verdicts(rows, bootstrap)]
    curve.report.parent.mkdir(parents=True, exist_ok=True)
    curve.report.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fit_size(row: Row) -> int:
    """The queries a row fitted on (``all``: every fit query of the first seed's split)."""
    return int(row.reports[0]["judgements"]["fit_queries"]) if row.size == ALL else int(row.size)


def spread(values: list[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def verdicts(rows: list[Row], bootstrap: MeanBootstrap) -> list[str]:
    """ "N judgements beat the start", "hard negatives help at N", "label-free first helps"."""
    lines = ["Verdicts (95 % paired bootstrap over the test queries and the seeds):", ""]
    by = {(row.size, row.negatives, "then" in row.name): row for row in rows if row.kind == "run"}
    for (size, negatives, chained), row in by.items():
        if chained:
            plain = by.get((size, negatives, False))
            if plain is not None:
                d = bootstrap.compare(row.name, plain.name)
                seeds = "" if row.seeds == plain.seeds else f" (seeds {row.seeds} against {plain.seeds})"
                lines.append(
                    f"- label-free first helps ({row.name} − {plain.name}): {d}, {verdict(d)}{seeds}"
                )
            continue
        d = bootstrap.compare(row.name, "start")
        lines.append(f"- {row.name} beats the start: {d}, {verdict(d)}")
        if negatives and (size, 0, False) in by:
            other = by[(size, 0, False)]
            h = bootstrap.compare(row.name, other.name)
            seeds = "" if row.seeds == other.seeds else f" (seeds {row.seeds} against {other.seeds})"
            lines.append(f"- hard negatives help at {size}: {h}, {verdict(h)}{seeds}")
    for row in (r for r in rows if r.kind == "recipe"):
        plain = by.get((row.size, row.negatives, False))
        if plain is not None:
            d = bootstrap.compare(row.name, plain.name)
            lines.append(
                f"- recipe check, {row.name} − {plain.name}: {d}, {verdict(d)} (seeds {row.seeds} against "
                f"{plain.seeds})"
            )
    return lines + student_verdicts(rows, bootstrap)


def student_verdicts(rows: list[Row], bootstrap: MeanBootstrap) -> list[str]:
    """A static student's hybrid against the start's dense search, at its speed."""
    lines = []
    for row in (r for r in rows if r.kind == "student"):
        d = bootstrap.compare(f"{row.name} hybrid", "start")
        teacher = bootstrap.compare(row.name, row.teacher) if row.teacher else None
        lines.append(
            f"- the hybrid of BM25 and the {row.name} reaches the start's dense search: {d}, {verdict(d)}; "
            f"the student − its teacher: {teacher}, {verdict(teacher) if teacher else ''}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("plan")
    parser.add_argument("--sizes", help="only these sizes (comma-separated), e.g. all")
    parser.add_argument("--seeds", help="only these seeds (comma-separated)")
    parser.add_argument("--report-only", action="store_true", help="report the finished runs, train none")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    map_large_allocations()  # many runs in this process: each one's large tensors go back when freed
    curve = Curve.load(args.plan)
    sizes = [s if s == ALL else int(s) for s in args.sizes.split(",")] if args.sizes else curve.sizes
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else curve.seeds
    plan: list[tuple[int | str, int, str | None]] = [
        (size, negatives, None) for size in curve.sizes for negatives in curve.negatives
    ]
    if curve.label_free_first:
        plan.append((curve.sizes[-1], 1, str(curve.label_free_first["method"])))
    rows: list[Row] = []
    missing: list[str] = []
    for size, negatives, first in plan:
        reports, done = [], []
        for seed in curve.seeds:
            folder = run_folder(curve, size, negatives, seed, first)
            wanted = size in sizes and seed in seeds and not args.report_only
            if (folder / "adapt.json").is_file() or wanted:
                reports.append(reported(curve, size, negatives, seed, first))
                done.append(seed)
            else:
                missing.append(f"{row_name(size, negatives, first)} seed {seed}")
        if reports:
            rows.append(Row(row_name(size, negatives, first), size, negatives, reports, done))
        write_report(curve, rows, missing)
    for check in curve.recipe_checks:
        reports, done = [], []
        for seed in [int(s) for s in check.get("seeds") or curve.recipe_seeds]:
            folder = run_folder(curve, curve.sizes[-1], 1, seed, None, check["name"])
            wanted = curve.sizes[-1] in sizes and seed in seeds and not args.report_only
            if (folder / "adapt.json").is_file() or wanted:
                reports.append(reported(curve, curve.sizes[-1], 1, seed, None, check))
                done.append(seed)
            else:
                missing.append(f"{row_name(curve.sizes[-1], 1)}, {check['label']} seed {seed}")
        if reports:
            name = f"{row_name(curve.sizes[-1], 1)}, {check['label']}"
            rows.append(Row(name, curve.sizes[-1], 1, reports, done, kind="recipe"))
            write_report(curve, rows, missing)
    if curve.student:
        train = [seed for seed in seeds if curve.sizes[-1] in sizes and not args.report_only]
        rows += students(curve, rows, train, missing)
        write_report(curve, rows, missing)
    return 0


def speeds(curve: Curve, model: str, path: Path, dtype: str) -> dict:
    """Documents/s of the student and of the start on this CPU (median of 3 over the domain's first
    documents), measured once and kept beside the students (the report reads them back)."""
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    documents = [row[0] for row in read_corpus(curve.corpus, "document").rows][:TIMED_DOCUMENTS]
    measured = {"start": documents_per_second(curve.start, documents, dtype),
                "student": documents_per_second(model, documents, dtype), "documents": len(documents),
                "machine": describe_machine()}  # fmt: skip
    path.write_text(json.dumps(measured, indent=2), encoding="utf-8")
    return measured


def students(curve: Curve, rows: list[Row], train: list[int], missing: list[str]) -> list[Row]:
    """The static student of each seed's largest-size hard-negative model (distilled on the domain's
    sentences by ``curve.student``, its checkpoint chosen as that recipe says), on the report judgements,
    and documents/s of it and of the start on this CPU."""
    teacher = next(
        (
            r
            for r in rows
            if r.size == curve.sizes[-1] and r.negatives and r.kind == "run" and "then" not in r.name
        ),
        None,
    )
    if teacher is None or curve.student is None:
        return []
    name = f"static student of {teacher.name}"
    reports, seeds = [], []
    dtype = str(curve.settings.get("report_dtype", "fp32"))
    kept = curve.output_dir / f"student-of-{curve.sizes[-1]}-hard"
    for seed in curve.seeds:
        folder = kept / f"seed-{seed}"
        if (folder / "summary.json").is_file():
            model = str(folder / "model")
        elif seed in train and seed in teacher.seeds:
            model = student(
                str(run_folder(curve, curve.sizes[-1], 1, seed) / "model"), seed, folder, curve.student
            )
        else:
            missing.append(f"{name} seed {seed}")
            continue
        scores = report_scores(curve.report_qrels, model, None, STATIC_DTYPE)
        reports.append({"task": scores["task"], "metrics": {"adapted": scores["metrics"]},
                        "per_query": {"adapted": scores["per_query"]},
                        "measured_on": {"adapted": scores["measured_on"]}, "model": model})  # fmt: skip
        seeds.append(seed)
    if not reports:
        return []
    row = Row(name, curve.sizes[-1], 1, reports, seeds, kind="student", teacher=teacher.name)
    row.reports[0]["judgements"] = teacher.reports[0].get("judgements", {})
    row.reports[0]["speed"] = speeds(curve, reports[0]["model"], kept / "speed.json", dtype)
    return [row]


if __name__ == "__main__":
    raise SystemExit(main())
