"""Write the reproduction report (Markdown + PNG figures) from measured rows; nothing here trains."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from sentcl.analysis.plots import (
    PlanePoint,
    plot_alignment_uniformity,
    plot_cosine_density,
    plot_leaderboard,
    plot_singular_values,
)
from sentcl.analysis.report import ModelAnalysis, markdown_table
from sentcl.atomic_write import atomic_file
from sentcl.evaluation.significance import CONFIDENCE, RESAMPLES, PairedBootstrap, tie_bands
from sentcl_reproduction.claims import HOLDS, PAPER_STS, Check, Measured, Verdict, check_outcome, judge
from sentcl_reproduction.pipeline import MethodSearch, RowResult, StageOutcome, slug
from sentcl_reproduction.plan import Plan

_TEST_SPLIT_TASKS = ("STSBenchmark", "SICKRelatedness")  # the 7-task table reads their test splits
#: the per-seed numbers a table line keeps for its intervals
_SEED_METRICS = ("align", "uniform", "avg_cos_random", "sv10", "effective_rank")


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


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    if len(values) < 2:
        return (values[0] if values else float("nan")), None
    return float(np.mean(values)), float(np.std(values, ddof=1))


def _test_pooler(run_dir: Path | None) -> str:
    """The pooler a trained row is measured with: [CLS] + a train-only MLP is the raw [CLS]."""
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        return ""
    model = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")).get("model", {})
    pooler = model.get("pooler", "")
    if pooler == "cls":
        return "cls_before_pooler" if model.get("mlp_only_train") else "cls (+ MLP)"
    return pooler


def _best_step(run_dir: Path | None) -> int | None:
    if run_dir is None or not (run_dir / "summary.json").is_file():
        return None
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("best_step")


def group_rows(results: Sequence[RowResult]) -> list[tuple[Measured, list[RowResult]]]:
    """Table lines in order: one per baseline and post-processed row, one per trained method (its seeds
    averaged: STS and every geometry number; the figures keep its first seed's arrays)."""
    groups: dict[str, list[RowResult]] = {}
    for result in results:
        groups.setdefault(result.row.label, []).append(result)
    lines = []
    for label, members in groups.items():
        dev, dev_std = _mean_std([m.sts["STS-B dev"] for m in members])
        train, train_std = _mean_std([m.sts.get("STS-B train", float("nan")) for m in members])
        first = members[0].analysis
        spectrum = {
            key: float(np.mean([m.analysis.spectrum[key] for m in members]))
            for key in first.spectrum
            if all(key in m.analysis.spectrum for m in members)
        }
        analysis = dataclasses.replace(
            first,
            spearman=dev,
            align=float(np.mean([m.analysis.align for m in members])),
            uniform=float(np.mean([m.analysis.uniform for m in members])),
            spectrum=spectrum,
        )
        row = members[0].row
        pooler = row.pooler or _test_pooler(row.run_dir)
        if row.postprocess:
            pooler = f"{row.pooler} + {row.postprocess}"
        kept_start = row.kind == "method" and all(_best_step(m.row.run_dir) == 0 for m in members)
        values = {
            "train": [m.sts.get("STS-B train", float("nan")) for m in members],
            "dev": [m.sts["STS-B dev"] for m in members],
        } | {
            key: [getattr(m.analysis, key) if key in ("align", "uniform") else m.analysis.spectrum[key]
                  for m in members]
            for key in _SEED_METRICS
            if all(key in ("align", "uniform") or key in m.analysis.spectrum for m in members)
        }  # fmt: skip
        measured = Measured(
            label, analysis, dev, train, dev_std, train_std, len(members), pooler or "", kept_start,
            exact=row.kind != "method", seed_values=values,
        )  # fmt: skip
        lines.append((measured, members))
    return lines


def _sts_table(lines: Sequence[tuple[Measured, list[RowResult]]]) -> str:
    extra: list[str] = []
    for _, members in lines:
        for result in members:
            extra += [k for k in result.sts if k not in extra and k not in ("STS-B dev", "STS-B train")]
    header = "| " + " | ".join(["row", "measured with", "seeds", "STS-B dev", "STS-B train", *extra]) + " |"
    table = [header, "|---|---|---:|---:|---:|" + "---:|" * len(extra)]
    for measured, members in lines:
        cells = [measured.sts("dev"), measured.sts("train")]
        for column in extra:
            values = [m.sts[column] for m in members if column in m.sts]
            mean, std = _mean_std(values) if values else (float("nan"), None)
            cells.append("" if not values else f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else ""))
        table.append(
            f"| {measured.label} | {measured.pooler} | {measured.seeds} | " + " | ".join(cells) + " |"
        )
    return "\n".join(table)


def _search_table(searches: Sequence[MethodSearch]) -> str:
    lines = [
        "| method | setting | precision | STS-B dev at step 0 | best STS-B dev | at step | of | chosen |",
        "|---|---|---|---:|---:|---:|---:|:---:|",
    ]
    for search in searches:
        for index, c in enumerate(search.candidates):
            start = f"{c.start:.2f}" if c.start is not None else ""
            mark = "✔" if index == search.chosen else ""
            grown = " (grown)" if c.extension else ""
            lines.append(
                f"| {search.method} | {c.label}{grown} | {c.precision} | {start} | {c.best:.2f} | "
                f"{c.best_step} | {c.steps} | {mark} |"
            )
    return "\n".join(lines)


def _evals(candidate) -> list[tuple[int, float]]:
    path = candidate.run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [
        (r["step"], r["eval"]["stsb_dev_spearman"])
        for r in records
        if "stsb_dev_spearman" in r.get("eval", {})
    ]


def _previous_eval(candidate) -> int:
    steps = [step for step, _ in _evals(candidate)]
    return steps[-2] if len(steps) > 1 else 0


def _last_gain(candidate) -> float | None:
    """How much STS-B dev rose between the last two evaluations (how far from converged a run ends)."""
    evals = _evals(candidate)
    return evals[-1][1] - evals[-2][1] if len(evals) > 1 else None


def search_verdicts(searches: Sequence[MethodSearch]) -> str:
    """Per method: is the chosen learning rate inside the grid, and the chosen checkpoint inside the run?"""
    lines = ["| method | chosen setting | inside the grid | inside the run |", "|---|---|---|---|"]
    for search in searches:
        best = search.best
        sides = sorted(set(search.at_edge.values()))
        if best.best_step == 0:
            grid = "— (no setting tried beat the start" + (
                ", the grid grown downwards)" if any(c.extension for c in search.candidates) else ")"
            )
        elif sides:
            grid = f"**no: the {' and '.join(sides)} value tried; it may still improve beyond it**"
        else:
            grid = "yes" + (" (after growing it)" if any(c.extension for c in search.candidates) else "")
        if best.best_step == 0:
            run = "the start (training never beat it)"
        elif best.at_horizon:
            assert best.steps is not None  # (at_horizon says so)
            gain = _last_gain(best)
            run = f"**no: best at the last step ({best.best_step}); still improving at the horizon**" + (
                f" (+{gain:.2f} over its last {best.steps - _previous_eval(best)} steps)"
                if gain is not None
                else ""
            )
        else:
            run = f"yes (best at step {best.best_step} of {best.steps})"
        lines.append(f"| {search.method} | {best.label} | {grid} | {run} |")
    return "\n".join(lines)


#: the pooler of the paper's "first-last avg" row: the whitening and flow papers fit on it
FIRST_LAST = "avg_first_last"


def _roles(
    plan: Plan, lines: Sequence[tuple[Measured, list[RowResult]]], searches: Sequence[MethodSearch] = ()
) -> dict[str, Measured | None]:
    """The rows each claim is judged on. ``post_base``: the paper's first-last avg baseline (avg_first_last
    where measured, else the first baseline), with the whitening and flow fitted on it; ``post_best``: the
    strongest post-processed row on STS-B train, whatever it was fitted on; ``unsup_same`` / ``sup_same``:
    the two SimCSE rows under one test-time pooler (their chosen rows where those share it, else each one's
    best seed-42 candidate under the pooler setting both searched)."""
    raw = [(m, rs[0].row) for m, rs in lines if rs[0].row.kind == "baseline"]
    baselines = [(m, row) for m, row in raw if not str(row.pooler).startswith("ditto")]  # Ditto: its own row
    roles: dict[str, Measured | None] = {}
    roles["ditto"] = next((m for m, row in raw if str(row.pooler).startswith("ditto")), None)
    first_last = next((m for m, row in baselines if row.pooler == FIRST_LAST), None)
    roles["post_base"] = first_last or (baselines[0][0] if baselines else None)
    base_pooler = next((row.pooler for m, row in baselines if m is roles["post_base"]), None)
    roles["raw_best"] = max((m for m, _ in baselines), key=lambda m: m.dev, default=None)
    for name in ("whitening", "flow"):
        roles[name] = next(
            (m for m, rs in lines if rs[0].row.postprocess == name and rs[0].row.pooler == base_pooler), None
        )
    post = [m for m, rs in lines if rs[0].row.postprocess]
    roles["post_best"] = max(post, key=lambda m: m.train if m.train == m.train else m.dev, default=None)
    for role in ("unsup", "sup"):
        roles[role] = next(
            (m for m, rs in lines if rs[0].row.method and plan.methods[rs[0].row.method].role == role), None
        )
    unsup = roles["unsup"]
    same = [m for m, row in baselines if unsup is not None and row.pooler == unsup.pooler]
    roles["raw_same"] = same[0] if same else None
    roles["unsup_same"], roles["sup_same"] = _same_pooler(plan, roles, searches)
    return roles


def _method_row(lines: Sequence[tuple[Measured, list[RowResult]]], method: str) -> Measured | None:
    """The row of ``method``'s chosen setting (its seeds' means), None where it is not measured."""
    return next((m for m, rs in lines if rs[0].row.method == method), None)


def _same_pooler(
    plan: Plan, roles: dict[str, Measured | None], searches: Sequence[MethodSearch]
) -> tuple[Measured | None, Measured | None]:
    unsup, sup = roles["unsup"], roles["sup"]
    if unsup is None or sup is None:
        return None, None
    if unsup.pooler == sup.pooler:
        return unsup, sup
    by_role = {
        plan.methods[search.method].role: search for search in searches if plan.methods[search.method].role
    }
    if "unsup" not in by_role or "sup" not in by_role:
        return None, None
    shared = [
        p
        for p in plan.methods[by_role["unsup"].method].poolers
        if p in plan.methods[by_role["sup"].method].poolers
    ]
    if not shared:
        return None, None
    picked = []
    for role in ("unsup", "sup"):
        options = [c for c in by_role[role].candidates if c.pooler == shared[0]]
        best = max(options, key=lambda c: c.best if c.best == c.best else float("-inf"))
        picked.append(
            _candidate_measured(f"{by_role[role].method} [{best.label}, seed {plan.seeds[0]}]", best)
        )
    return picked[0], picked[1]


def _method_lines(lines: Sequence[tuple[Measured, list[RowResult]]]) -> list[Measured]:
    """The trained methods with an STS-B train ρ: the leaderboard's bars, in table order."""
    return [m for m, rs in lines if rs[0].row.kind == "method" and m.train == m.train]


def _leaderboard(
    lines: Sequence[tuple[Measured, list[RowResult]]], roles: dict[str, Measured | None]
) -> tuple[list[tuple[str, float, float | None]], list[tuple[str, float]]]:
    """The leaderboard's bars (each method, with its test-time pooler where the methods use several) and
    its reference lines: the untrained start under the best raw pooler and under every other pooler a
    method is measured with (a method that tests with avg starts from avg, not from the best pooler), the
    paper's first-last avg baseline and the strongest post-processed row."""
    methods = _method_lines(lines)
    poolers = list(dict.fromkeys(m.pooler for m in methods))
    several = len(poolers) > 1
    bars = [(f"{m.label} [{m.pooler}]" if several else m.label, m.train, m.train_std) for m in methods]
    baselines = [m for m, rs in lines if rs[0].row.kind == "baseline"]
    starts = [roles["raw_best"]] + [
        next((b for b in baselines if b.pooler == p), None)
        for p in poolers
        if roles["raw_best"] is None or p != roles["raw_best"].pooler
    ]
    tagged = [("start", r) for r in starts] + [("first-last avg", roles["post_base"]),
                                                ("best post-processed", roles["post_best"])]  # fmt: skip
    references, seen = [], set()
    for tag, r in tagged:
        if r is not None and r.train == r.train and id(r) not in seen:
            seen.add(id(r))
            references.append((f"{tag} ({r.label})", r.train))
    return bars, references


def _candidate_measured(label: str, candidate) -> Measured | None:
    """A search candidate as a claims row: its STS-B dev and the geometry it logged at its best step."""
    records = [
        json.loads(line)
        for line in (candidate.run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    at_best = [r for r in records if r.get("step") == candidate.best_step and "geometry" in r]
    if not at_best:
        return None
    geometry = at_best[-1]["geometry"]
    analysis = ModelAnalysis(
        label, candidate.best, geometry["align"], geometry["uniform"],
        {k: v for k, v in geometry.items() if k not in ("align", "uniform")},
        np.zeros(0), np.zeros(0), np.zeros(0),
    )  # fmt: skip
    return Measured(
        label, analysis, candidate.best, float("nan"), pooler=_test_pooler(candidate.run_dir), exact=False
    )


def _paper_table(roles: dict[str, Measured | None]) -> str:
    mapping = {
        "first-last avg": "post_base",
        "+ flow": "flow",
        "+ whitening": "whitening",
        "unsup SimCSE": "unsup",
        "sup SimCSE": "sup",
    }
    lines = [
        "| paper row | paper (BERT-base, 7-task avg) | row here | measured with | STS-B dev | STS-B train |",
        "|---|---:|---|---|---:|---:|",
    ]
    best = roles.get("raw_best")
    if best is not None and best is not roles.get("post_base"):
        cells = [best.label, best.pooler, best.sts("dev"), best.sts("train")]
        lines.append("| (raw, its best pooler) | | " + " | ".join(cells) + " |")
    for name, role in mapping.items():
        row = roles.get(role)
        if row is None:
            absent = "no row (not in the plan, or not run yet)"
            lines.append(f"| {name} | {PAPER_STS[name]:.2f} | {absent} | | | |")
            continue
        lines.append(
            f"| {name} | {PAPER_STS[name]:.2f} | {row.label} | {row.pooler} | {row.sts('dev')} | "
            f"{row.sts('train')} |"
        )
    return "\n".join(lines)


def _verdict_table(verdicts: Sequence[Verdict]) -> str:
    lines = ["| claim | rule | here |", "|---|---|---|"]
    for v in verdicts:
        lines.append(f"| {v.claim} | {v.rule} | {v.outcome} |")
    return "\n".join(lines)


@dataclasses.dataclass
class PairEvidence:
    """The paired bootstrap of an encoder's rows: on which split's pairs, and which rows it covers."""

    split: str  # "train" or "dev"; "" when no row kept its pairs
    bootstrap: PairedBootstrap | None
    #: rows that kept no STS-B train pairs (measured before rows kept them)
    lacking_train: list[str]

    def __call__(self, left: Measured, right: Measured):
        if self.bootstrap is None or not {left.label, right.label} <= self.bootstrap.replicates.keys():
            return None
        return self.bootstrap.compare(left.label, right.label)


def pair_evidence(lines: Sequence[tuple[Measured, list[RowResult]]]) -> PairEvidence:
    """One paired bootstrap over the rows' evaluation pairs: STS-B train where every row kept its pairs,
    else STS-B dev (which every row keeps, the split that chose each setting and checkpoint) for all of
    them, so that every comparison is made on one set of pairs."""
    lacking = [m.label for m, members in lines if any(r.train_cosines is None for r in members)]
    split = "dev" if lacking else "train"

    def pairs_of(result: RowResult) -> tuple[np.ndarray, np.ndarray]:
        if split == "train":
            assert result.train_cosines is not None and result.train_gold is not None
            return result.train_cosines, result.train_gold
        return result.analysis.cosines, result.analysis.gold

    usable = [(m, [pairs_of(r) for r in members]) for m, members in lines]
    usable = [(m, p) for m, p in usable if all(len(g) > 2 for _, g in p)]
    if not usable:
        return PairEvidence("", None, lacking)
    gold = usable[0][1][0][1]
    bootstrap = PairedBootstrap(gold)  # a row scored against other gold scores is left out of it
    for measured, pairs in usable:
        if all(np.array_equal(g, gold) for _, g in pairs):
            bootstrap.add(measured.label, np.stack([scores for scores, _ in pairs]))
    return PairEvidence(split, bootstrap, lacking)


def _interval_cell(m: Measured) -> str:
    if m.train_interval is None:
        return "—"
    if m.exact:
        return f"{m.train:.2f} (one measurement)"
    return str(m.train_interval)


def leaderboard_bands(
    lines: Sequence[tuple[Measured, list[RowResult]]], pairs: PairEvidence
) -> list[tuple[Measured, int, str]]:
    """Every row with an STS-B train ρ, best first, with its tie band and how it compares with the next row
    (the intervals of the difference, and whether it holds)."""
    ranked = sorted((m for m, _ in lines if m.train == m.train), key=lambda m: -m.train)
    by_label = {m.label: m for m in ranked}

    def apart(upper: str, lower: str) -> bool:
        return check_outcome(Check(by_label[upper], "train", ">", by_label[lower]), pairs)[0] == HOLDS

    bands = tie_bands([m.label for m in ranked], apart)
    out = []
    for i, (m, band) in enumerate(zip(ranked, bands, strict=True)):
        if i + 1 < len(ranked):
            outcome, intervals = check_outcome(Check(m, "train", ">", ranked[i + 1]), pairs)
            told = "yes" if outcome == HOLDS else "no"
            out.append((m, band, f"{intervals} | {told}"))
        else:
            out.append((m, band, " | "))
    return out


def _leaderboard_table(banded: Sequence[tuple[Measured, int, str]], pairs: PairEvidence) -> str:
    lines = [
        "| band | row | measured with | seeds | STS-B train: mean ± std [95 % interval over seeds] | "
        "minus the next row: 95 % intervals | told apart from the next row |",
        "|---:|---|---|---:|---|---|:---:|",
    ]
    for m, band, comparison in banded:
        lines.append(f"| {band} | {m.label} | {m.pooler} | {m.seeds} | {_interval_cell(m)} | {comparison} |")
    return "\n".join(lines)


def _significance_text(pairs: PairEvidence, seeds: int) -> str:
    """How the bands and the verdicts below are decided, and on which pairs."""
    confidence = f"{100 * CONFIDENCE:g} %"
    text = (
        f"Two rows are told apart when every {confidence} interval of their difference excludes 0: over "
        f"the seeds (Welch's interval of the difference of the {seeds} seeds' means; an untrained row is "
        f"one exact measurement) and over the evaluation pairs (a paired bootstrap, {RESAMPLES} draws of the "
        f"pairs shared by both rows, each row's seeds drawn again in every draw). Rows are ranked by STS-B "
        f"train; a row opens a new tie band when it is told apart from the first row of the band above. A "
        f"claim holds when every comparison it makes is told apart in its direction, fails when one is told "
        f"apart against it, and is not distinguishable at this budget otherwise."
    )
    if pairs.split == "dev":
        text += (
            f" **The pairs here are STS-B dev's**: these rows were measured before rows kept their "
            f"STS-B train pairs ({len(pairs.lacking_train)} rows lack them: "
            f"{', '.join(pairs.lacking_train)}). STS-B dev chose every setting and checkpoint, so its "
            f"differences favour each method's own choice; a row measured again keeps its train pairs, and "
            f"once every row has them the bootstrap runs on STS-B train."
        )
    elif pairs.split == "":
        text += " No row kept its evaluation pairs: the intervals are over seeds alone."
    return text


def encoder_section(
    plan: Plan,
    name: str,
    note: str,
    results: Sequence[RowResult],
    pretrain_dir: Path | None,
    searches: Sequence[MethodSearch] = (),
) -> tuple[str, list[Verdict]]:
    images = plan.images
    images.mkdir(parents=True, exist_ok=True)
    link = Path(os.path.relpath(images, plan.report.parent))
    key = slug(name)
    lines = group_rows(results)
    figures = [members[0].analysis for _, members in lines]  # a method's figures: its first seed
    plot_alignment_uniformity(
        [PlanePoint(a.label, a.align, a.uniform, a.trajectory) for a in figures],
        images / f"{key}_align_uniform.png",
    )
    plot_singular_values({a.label: a.singular_values for a in figures}, images / f"{key}_spectrum.png")
    roles = _roles(plan, lines, searches)
    pairs = pair_evidence(lines)
    banded = leaderboard_bands(lines, pairs)
    bands = {m.label: band for m, band, _ in banded}
    bars, references = _leaderboard(lines, roles)
    if bars:
        bar_bands = [bands[m.label] for m in _method_lines(lines)]
        plot_leaderboard(bars, references, images / f"{key}_leaderboard.png", bands=bar_bands)
    density = [
        r for r in (roles["raw_best"], roles["whitening"], roles["flow"], roles["unsup"], roles["sup"]) if r
    ]
    density = density or [m for m, _ in lines[:4]]
    plot_cosine_density(
        {r.label: (r.analysis.cosines, r.analysis.gold) for r in density},
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
    names = ("raw_same", "raw_best", "unsup", "sup", "whitening", "flow", "post_base")
    rivals = [
        (method.name, _method_row(lines, method.name), method.beats)
        for method in plan.methods.values()
        if method.beats and any(rs[0].row.method == method.name for _, rs in lines)
    ]
    verdicts = judge(
        **{name: roles[name] for name in (*names, "post_best", "unsup_same", "sup_same", "ditto")},
        pairs=pairs,
        rivals=rivals,
    )
    missing = next((r.missing for r in results if r.missing), {})
    parts += [
        "### STS (Spearman ×100)",
        "",
        "Trained methods: their chosen setting (below), mean ± standard deviation over "
        f"{len(plan.seeds)} seeds ({', '.join(map(str, plan.seeds))}). STS-B dev chose the setting and "
        "the checkpoint; **STS-B train** was never used for a choice.",
        "",
        _sts_table(lines),
        "",
    ]
    if banded:
        parts += [
            "### Which differences are real",
            "",
            _significance_text(pairs, len(plan.seeds)),
            "",
            _leaderboard_table(banded, pairs),
            "",
        ]
    if bars:
        parts += [
            f"![leaderboard: STS-B train, mean ± std over the seeds, tie bands]"
            f"({link / f'{key}_leaderboard.png'})",
            "",
        ]
    if missing:
        parts += [
            "Absent from the data directory, so there is no 7-task average: "
            + ", ".join(f"{task} (test split)" if task in _TEST_SPLIT_TASKS else task for task in missing)
            + ".",
            "",
        ]
    parts += [
        "### Geometry (STS-B dev probe)",
        "",
        "Trained methods: means over their seeds (STS-B ρ here is dev).",
        "",
        markdown_table([m.analysis for m, _ in lines]),
        "",
    ]
    if searches:
        parts += [
            "### The search each method got",
            "",
            f"Seed {plan.seeds[0]}; every setting's best STS-B dev over its evaluations, step 0 included "
            "(a run that never beats its start keeps the start model).",
            "",
            _search_table(searches),
            "",
            "Where each choice lies: a learning rate at either end of the grid makes the grid grow that "
            "way (the next value, tried with the same pooler) until the choice is inside it or the extension "
            "list ends; where no setting beat the start, smaller learning rates are tried while the list has "
            "any; a best checkpoint at the last evaluation means the run was still improving when the budget "
            "ended.",
            "",
            search_verdicts(searches),
            "",
        ]
    if any(v.judged for v in verdicts):  # an encoder with no trained rows judges nothing
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
            *[f"- {v.claim}: {v.evidence}" for v in verdicts if v.judged or v.kept_start],
            "",
        ]
    parts += [
        "### Figures",
        "",
        f"![alignment and uniformity]({link / f'{key}_align_uniform.png'})",
        "",
        "Stars: each row's final point (a trained method: its first seed); lines: the trained methods' "
        "trajectories (logged at every evaluation, the step number at both ends).",
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
    partial: bool = False,
) -> Path:
    ran = sum(o.seconds for o in outcomes if o.action != "cached")
    total = sum(o.seconds for o in outcomes)
    machines: dict[str, list[float]] = {}
    for o in outcomes:
        machines.setdefault(o.machine or "not recorded", []).append(o.seconds)
    where = "; ".join(
        f"{len(times)} stages, {sum(times) / 60:.1f} min on {machine}" for machine, times in machines.items()
    )
    timing = ["| stage | this run | seconds | machine |", "|---|---|---:|---|"]
    timing += [f"| {o.name} | {o.action} | {o.seconds:.0f} | {o.machine} |" for o in outcomes]
    which = "The stages done so far" if partial else "All stages from scratch"
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
            f"{which}: {total / 60:.1f} min on the machines that ran them ({where}); this "
            f"run computed {ran / 60:.1f} min of it and took the rest from the cache in "
            f"`{plan.output_dir}` or the committed results.",
            "",
            *timing,
            "",
        ]
    )
    plan.report.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(plan.report) as handle:
        handle.write(text)
    return plan.report
