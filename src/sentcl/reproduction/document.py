"""Write the reproduction report (Markdown + PNG figures) from measured rows; nothing here trains."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from sentcl.analysis.plots import (
    PlanePoint,
    plot_alignment_uniformity,
    plot_cosine_density,
    plot_singular_values,
)
from sentcl.analysis.report import markdown_table
from sentcl.atomic_write import atomic_file
from sentcl.reproduction.claims import PAPER_STS, Verdict, judge
from sentcl.reproduction.pipeline import RowResult, StageOutcome, slug
from sentcl.reproduction.plan import Plan

_TEST_SPLIT_TASKS = ("STSBenchmark", "SICKRelatedness")  # the 7-task table reads their test splits
_MARK = {True: "holds", False: "**does not hold**", None: "not measured"}


def _pretraining(folder: Path | None) -> dict | None:
    if folder is None or not (folder / "metrics.jsonl").is_file():
        return None
    records = [
        json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    evals = [r for r in records if "eval" in r]
    if not evals:
        return None
    return {"first": evals[0], "last": evals[-1], "steps": max(r["step"] for r in records)}


def _sts_table(results: Sequence[RowResult]) -> str:
    columns: list[str] = []
    for result in results:
        columns += [k for k in result.sts if k not in columns]
    header = "| row | " + " | ".join(columns) + " |"
    rule = "|---|" + "---:|" * len(columns)
    lines = [header, rule]
    for result in results:
        cells = [f"{result.sts[c]:.2f}" if c in result.sts else "" for c in columns]
        lines.append(f"| {result.row.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _role_rows(plan: Plan, results: Sequence[RowResult]) -> dict[str, RowResult | None]:
    baselines = [r for r in results if r.row.kind == "baseline"]
    roles: dict[str, RowResult | None] = {"raw": baselines[0] if baselines else None}
    for name in ("whitening", "flow"):
        roles[name] = next((r for r in results if r.row.postprocess == name), None)
    for role in ("unsup", "sup"):
        roles[role] = next(
            (r for r in results if r.row.method and plan.methods[r.row.method].role == role), None
        )
    return roles


def _paper_table(roles: dict[str, RowResult | None]) -> str:
    mapping = {
        "first-last avg": "raw",
        "+ flow": "flow",
        "+ whitening": "whitening",
        "unsup SimCSE": "unsup",
        "sup SimCSE": "sup",
    }
    lines = [
        "| paper row | paper (BERT-base, 7-task avg) | row here | STS-B dev | STS-B train |",
        "|---|---:|---|---:|---:|",
    ]
    for name, role in mapping.items():
        row = roles.get(role)
        if row is None:
            lines.append(f"| {name} | {PAPER_STS[name]:.2f} | not in the plan | | |")
            continue
        train = f"{row.sts['STS-B train']:.2f}" if "STS-B train" in row.sts else "—"
        dev = f"{row.sts['STS-B dev']:.2f}"
        lines.append(f"| {name} | {PAPER_STS[name]:.2f} | {row.row.label} | {dev} | {train} |")
    return "\n".join(lines)


def _verdict_table(verdicts: Sequence[Verdict]) -> str:
    lines = ["| claim | rule | here |", "|---|---|---|"]
    lines += [f"| {v.claim} | {v.rule} | {_MARK[v.holds]} |" for v in verdicts]
    return "\n".join(lines)


def encoder_section(
    plan: Plan, name: str, note: str, results: Sequence[RowResult], pretrain_dir: Path | None
) -> tuple[str, list[Verdict]]:
    images = plan.images
    images.mkdir(parents=True, exist_ok=True)
    link = Path(os.path.relpath(images, plan.report.parent))
    key = slug(name)
    analyses = [r.analysis for r in results]
    plot_alignment_uniformity(
        [PlanePoint(a.label, a.align, a.uniform, a.trajectory) for a in analyses],
        images / f"{key}_align_uniform.png",
    )
    plot_singular_values({a.label: a.singular_values for a in analyses}, images / f"{key}_spectrum.png")
    roles = _role_rows(plan, results)
    density = [
        r for r in (roles["raw"], roles["whitening"], roles["flow"], roles["unsup"], roles["sup"]) if r
    ]
    density = density or list(results[:4])
    plot_cosine_density(
        {r.row.label: (r.analysis.cosines, r.analysis.gold) for r in density},
        images / f"{key}_cosine_density.png",
    )
    parts = [f"## Encoder `{name}`", ""]
    if note:
        parts += [note.strip(), ""]
    info = _pretraining(pretrain_dir)
    if info is not None and pretrain_dir is not None:
        shutil.copyfile(pretrain_dir / "mlm_loss.png", images / f"{key}_pretraining.png")
        first, last = info["first"]["eval"], info["last"]["eval"]
        probe = [record.get("stsb_dev_spearman", float("nan")) for record in (first, last)]
        parts += [
            f"Pre-trained for {info['steps']} steps: held-out MLM loss {first['mlm_loss']:.2f} → "
            f"{last['mlm_loss']:.2f} (perplexity {last['perplexity']:.1f}); the informational "
            f"STS-B dev probe of the pre-training loop (its own pooler) {probe[0]:.2f} → {probe[1]:.2f}.",
            "",
            f"![pre-training loss]({link / f'{key}_pretraining.png'})",
            "",
        ]
    verdicts = judge(
        *(roles[r].analysis if roles[r] else None for r in ("raw", "unsup", "sup", "whitening", "flow"))
    )
    missing = next((r.missing for r in results if r.missing), {})
    parts += [
        "### STS (Spearman ×100)",
        "",
        _sts_table(results),
        "",
    ]
    if missing:
        parts += [
            "Absent from the data directory, so there is no 7-task average: "
            + ", ".join(f"{task} (test split)" if task in _TEST_SPLIT_TASKS else task for task in missing)
            + ".",
            "",
        ]
    parts += ["### Geometry (STS-B dev probe)", "", markdown_table(analyses), ""]
    if any(v.holds is not None for v in verdicts):  # an encoder with no trained rows judges nothing
        parts += [
            "### Against the paper",
            "",
            _paper_table(roles),
            "",
            "### The claims",
            "",
            _verdict_table(verdicts),
            "",
            "Evidence, row by row:",
            "",
            *[f"- {v.claim}: {v.evidence}" for v in verdicts if v.holds is not None],
            "",
        ]
    parts += [
        "### Figures",
        "",
        f"![alignment and uniformity]({link / f'{key}_align_uniform.png'})",
        "",
        "Stars: each row's final point; lines: the trained methods' trajectories (logged at every "
        "evaluation, the step number at both ends).",
        "",
        f"![singular spectrum]({link / f'{key}_spectrum.png'})",
        "",
        f"![cosine density per gold bucket]({link / f'{key}_cosine_density.png'})",
        "",
    ]
    return "\n".join(parts), verdicts


def write_document(
    plan: Plan,
    sections: list[str],
    outcomes: Sequence[StageOutcome],
    intro: str,
) -> Path:
    ran = sum(o.seconds for o in outcomes if o.action != "cached")
    total = sum(o.seconds for o in outcomes)
    timing = ["| stage | this run | seconds |", "|---|---|---:|"]
    timing += [f"| {o.name} | {o.action} | {o.seconds:.0f} |" for o in outcomes]
    text = "\n".join(
        [
            f"# {plan.title}",
            "",
            f"Generated by `sentcl reproduce {plan.path}` (`{plan.produced_by}`); do not edit by hand.",
            "",
            intro.strip(),
            "",
            *sections,
            "## Stages and time",
            "",
            f"All stages from scratch: {total / 60:.1f} min on the machine that ran them; this run computed "
            f"{ran / 60:.1f} min of it and took the rest from the cache in `{plan.output_dir}`.",
            "",
            *timing,
            "",
        ]
    )
    plan.report.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(plan.report) as handle:
        handle.write(text)
    return plan.report
