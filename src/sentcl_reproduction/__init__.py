"""``sentcl reproduce PLAN``: raw encoder → baselines, post-processing, trained methods → one report.

plan.py reads the YAML plan, pipeline.py runs and caches the stages, claims.py judges the seeds' claims
from the measured rows, document.py writes the Markdown report and its figures.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sentcl.evaluation import resolve_data_dir
from sentcl_reproduction.document import encoder_section, write_document
from sentcl_reproduction.pipeline import (
    Pending,
    Row,
    RowResult,
    StageOutcome,
    export_results,
    import_results,
    measure_rows,
    plan_rows,
)
from sentcl_reproduction.plan import Plan, load_plan

logger = logging.getLogger(__name__)


def reproduce(
    plan_path: str | Path, data_dir: str | None = None, report_only: bool = False
) -> tuple[Path, list[StageOutcome]]:
    """Run the plan's stages that are not done, then write its report. ``report_only``: run none, and
    write the report from the stages done so far (cached or committed), naming what it leaves out; the
    committed results are added to, never trimmed."""
    plan: Plan = load_plan(plan_path)
    plan.report_only = report_only
    data = resolve_data_dir(data_dir)
    outcomes: list[StageOutcome] = []
    imported = import_results(plan)
    if imported:
        logger.info("%d stages taken from %s", imported, plan.results)
    measured: dict[Path, RowResult] = {}

    def measure_now(rows: list[Row]) -> None:
        for result in measure_rows(plan, rows, data, outcomes):
            measured[result.row.folder] = result

    rows, pretrain_dirs, searches, pending = plan_rows(plan, data, outcomes, measure_now)
    results = [measured[row.folder] for row in rows]
    if not report_only:  # the stages of a method left out are kept for the run that finishes it
        used = [row.folder for row in rows] + [row.run_dir for row in rows if row.run_dir is not None]
        used += [c.run_dir for search in searches for c in search.candidates]
        used += [folder for folder in pretrain_dirs.values() if folder is not None]
        export_results(plan, sorted(set(used)))
    sections, summary = [], ["## Summary", ""]
    for spec in plan.encoders:
        if spec.name not in pretrain_dirs:  # report_only: the encoder itself is not done
            summary.append(f"- `{spec.name}`: not run yet.")
            continue
        mine = [r for r in results if r.row.encoder == spec.name]
        text, verdicts = encoder_section(
            plan,
            spec.name,
            spec.note,
            mine,
            pretrain_dirs[spec.name],
            [s for s in searches if s.encoder == spec.name],
        )
        sections.append(text)
        judged = [v for v in verdicts if v.judged]
        held = [v.claim for v in judged if v.holds]
        failed = [v.claim for v in judged if v.holds is False]
        open_ = [v.claim for v in judged if v.undecided]
        if not judged:
            summary.append(f"- `{spec.name}`: reference rows only (no claim is judged on them).")
            continue
        kept = [v.claim for v in verdicts if v.kept_start]
        summary.append(
            f"- `{spec.name}`: {len(held)} of {len(judged)} judged claims hold"
            + (f"; fail: {'; '.join(failed)}" if failed else "")
            + (f"; not distinguishable at this budget: {'; '.join(open_)}" if open_ else "")
            + "."
            + (f" Not judged, because a method never beat its starting model: {len(kept)}." if kept else "")
        )
    intro = _unfinished(plan, pending) + plan.intro.strip() + "\n\n" + "\n".join(summary) + "\n"
    return write_document(plan, sections, outcomes, intro, partial=bool(pending)), outcomes


def _unfinished(plan: Plan, pending: list[Pending]) -> str:
    """The notice at the top of a report written from an unfinished plan."""
    if not pending:
        return ""
    items = "\n".join(f"- `{p.encoder}`: {p.what} (first stage not done: {p.stage})" for p in pending)
    return (
        f"> **Unfinished.** Written by `sentcl reproduce --report-only {plan.path}` from the stages done so "
        f"far; {len(pending)} part(s) of the plan have no row yet, and every claim, figure and time below "
        f"covers only the rows present. `{plan.produced_by}` runs the rest.\n\n{items}\n\n"
    )


__all__ = ["load_plan", "reproduce"]
