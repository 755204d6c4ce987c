"""The seeds' claims (SimCSE §5/§7, Wang & Isola), each judged from measured rows by a stated rule.

Like is compared with like: a geometry claim about a trained method compares it with the raw encoder
under the pooler the method was measured with (its chosen setting's test-time pooler); an STS claim
compares each side's best (the raw encoder's best pooler by STS-B dev, a method's chosen setting) on
STS-B **train**, which no choice has seen; post-processing is compared with the baseline it was fitted
on. A trained method's numbers are means over its seeds. A claim whose rows are missing from the plan
is reported as "not measured", never as holding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sentcl.analysis.report import ModelAnalysis
from sentcl.evaluation.significance import Difference, SeedInterval, seed_difference, seed_interval

#: "keeps alignment": ℓ_align may rise by at most this much (α = 2 on the unit sphere, range 0…4)
ALIGN_TOLERANCE = 0.05

#: BERT-base, 7-task STS average (SimCSE Table 1 and §7): the numbers the issue quotes
PAPER_STS = {
    "first-last avg": 56.70,
    "+ flow": 66.55,
    "+ whitening": 66.28,
    "unsup SimCSE": 76.25,
    "sup SimCSE": 81.57,
}


@dataclass
class Measured:
    """One line of an encoder's table as the claims see it. For a trained method: the geometry and the
    STS numbers are means over its seeds, with their standard deviations (sample, n − 1), and
    ``seed_values`` keeps each seed's numbers for the intervals."""

    label: str
    analysis: ModelAnalysis
    dev: float  # STS-B dev ρ ×100
    train: float  # STS-B train ρ ×100 (NaN when the split is absent)
    dev_std: float | None = None
    train_std: float | None = None
    seeds: int = 1
    pooler: str = ""  # the pooler it is measured with (test time)
    #: a trained method that never beat its starting model (best at step 0 in every run): its row is the
    #: start encoder, so a claim about what the method does to the encoder cannot be judged on it
    kept_start: bool = False
    #: a measurement with nothing random in it (an untrained encoder, a post-processor fitted by a seeded
    #: procedure): no seed variance. A trained row is not exact: with one seed it has no interval
    exact: bool = True
    #: metric ("train", "dev", "align", "uniform", a spectrum key) → its value for each seed
    seed_values: dict[str, list[float]] = field(default_factory=dict)

    @property
    def train_interval(self) -> SeedInterval | None:
        """The STS-B train mean over the seeds with its 95 % interval (from 3 seeds on); None without it."""
        return seed_interval(self.values("train")) if self.train == self.train else None

    def value(self, metric: str) -> float:
        if metric in ("train", "dev"):
            return getattr(self, metric)
        if metric in ("align", "uniform"):
            return getattr(self.analysis, metric)
        return self.analysis.spectrum.get(metric, float("nan"))

    def values(self, metric: str) -> list[float]:
        return self.seed_values.get(metric) or [self.value(metric)]

    def sts(self, split: str) -> str:
        value, std = (self.train, self.train_std) if split == "train" else (self.dev, self.dev_std)
        if math.isnan(value):
            return "—"
        return f"{value:.2f} ± {std:.2f}" if std is not None else f"{value:.2f}"


#: how a verdict reads
HOLDS, FAILS, OPEN = "holds", "fails", "not distinguishable at this budget"


@dataclass
class Verdict:
    claim: str
    rule: str
    holds: bool | None  # None: not measured, not judged, or not distinguishable
    evidence: str
    #: not judged because a method's row is its start encoder (it never beat its starting model)
    kept_start: bool = False
    #: judged, but the intervals cannot tell the sides apart at this budget
    undecided: bool = False

    @property
    def judged(self) -> bool:
        return self.holds is not None or self.undecided

    @property
    def outcome(self) -> str:
        if self.kept_start:
            return "not judged: the method kept its start"
        if self.undecided:
            return OPEN
        return {True: HOLDS, False: f"**{FAILS}**", None: "not measured"}[self.holds]


@dataclass
class Check:
    """One inequality of a rule: ``left.metric − right.metric − offset`` is above 0 (``op`` ">") or below
    it ("<")."""

    left: Measured
    metric: str
    op: str
    right: Measured
    offset: float = 0.0


#: (left, right) → the paired bootstrap of their STS-B ρ difference on the evaluation pairs, or None
PairTest = Callable[[Measured, Measured], Difference | None]


def check_outcome(check: Check, pairs: PairTest | None = None) -> tuple[str, str]:
    """HOLDS when every interval of the difference lies on the claimed side of 0, FAILS when every one lies
    on the other, OPEN otherwise; and the intervals as text. The intervals: over seeds (Welch; an exact
    row has no seed variance), and for STS also the paired bootstrap over evaluation pairs."""
    left, right = check.left, check.right
    seeds = seed_difference(left.values(check.metric), right.values(check.metric), left.exact, right.exact)
    if seeds is None:
        point = left.value(check.metric) - right.value(check.metric) - check.offset
        return OPEN, f"{point:+.3f}, one seed of a trained row: no interval"
    shift = check.offset
    over = "exact" if left.exact and right.exact else "seeds"  # two untrained rows: nothing random
    intervals = [(over, Difference(seeds.delta - shift, seeds.low - shift, seeds.high - shift))]
    if check.metric in ("train", "dev") and pairs is not None:
        paired = pairs(left, right)
        if paired is not None:
            intervals.append(("pairs", paired))
    sign = 1.0 if check.op == ">" else -1.0
    text = ", ".join(f"{name} {interval}" for name, interval in intervals)
    if all(sign * i.low > 0 and sign * i.high > 0 for _, i in intervals):
        return HOLDS, text
    if all(sign * i.low < 0 and sign * i.high < 0 for _, i in intervals):
        return FAILS, text
    return OPEN, text


def _fmt(m: Measured) -> str:
    a = m.analysis
    seeds = f", {m.seeds} seeds" if m.seeds > 1 else ""
    return (
        f"{m.label} ({m.pooler}{seeds}): STS-B train {m.sts('train')}, dev {m.sts('dev')}, "
        f"ℓ_align {a.align:.3f}, ℓ_uniform {a.uniform:.3f}, avg cos {a.spectrum['avg_cos_random']:.3f}, "
        f"sv10 {a.spectrum.get('sv10', float('nan')):.3f}, eff. rank {a.spectrum['effective_rank']:.1f}"
    )


_METRIC_NAMES = {
    "train": "STS-B train ρ", "dev": "STS-B dev ρ", "align": "ℓ_align", "uniform": "ℓ_uniform",
    "avg_cos_random": "avg cos", "sv10": "sv10", "effective_rank": "eff. rank",
}  # fmt: skip


def judge(
    raw_same: Measured | None,
    raw_best: Measured | None,
    unsup: Measured | None,
    sup: Measured | None,
    whitening: Measured | None,
    flow: Measured | None,
    post_base: Measured | None,
    post_best: Measured | None = None,
    unsup_same: Measured | None = None,
    sup_same: Measured | None = None,
    pairs: PairTest | None = None,
    rivals: Sequence[tuple[str, Measured | None, str]] = (),
    ditto: Measured | None = None,
) -> list[Verdict]:
    """``raw_same``: the untrained encoder under unsup SimCSE's test-time pooler; ``raw_best``: its best
    pooler by STS-B dev; ``post_base``: the paper's first-last avg baseline, which ``whitening`` and
    ``flow`` were fitted on; ``post_best``: the strongest post-processed row; ``unsup_same`` /
    ``sup_same``: the two SimCSE rows under one test-time pooler. ``rivals``: (method, its chosen row,
    "unsup" | "sup"): a claim that the method beats that SimCSE row; ``ditto``: the Ditto row (its head chosen
    on STS-B dev), judged against the raw encoder's best pooler and the strongest post-processed row.
    ``pairs``: the paired bootstrap of two
    rows' STS difference over the evaluation pairs. A rule is a conjunction of checks: it holds when every
    check holds, fails when one fails, and is not distinguishable at this budget otherwise."""
    verdicts: list[Verdict] = []

    def add(claim: str, rule: str, rows: list[Measured | None], checks) -> None:
        if any(r is None for r in rows):
            verdicts.append(Verdict(claim, rule, None, "a row it needs is not in the plan, or not run yet"))
            return
        unchanged = [r for r in rows if r is not None and r.kept_start]
        if unchanged:
            verdicts.append(
                Verdict(
                    claim, rule, None,
                    f"{unchanged[0].label} never beat its starting model (its best STS-B dev was at step 0 "
                    f"in every setting and seed), so its row is the start encoder: nothing to judge",
                    kept_start=True,
                )
            )  # fmt: skip
            return
        distinct = {id(r): r for r in rows}.values()  # a row serving twice is shown once
        evidence = "; ".join(_fmt(r) for r in distinct)  # type: ignore[arg-type]
        outcomes = []
        for check in checks(*rows):
            outcome, intervals = check_outcome(check, pairs)
            outcomes.append(outcome)
            what = _METRIC_NAMES.get(check.metric, check.metric)
            offset = f" − {check.offset:g}" if check.offset else ""
            evidence += (
                f"; {what}: {check.left.label} − {check.right.label}{offset} {check.op} 0 → {outcome} "
                f"({intervals})"
            )
        if FAILS in outcomes:
            verdicts.append(Verdict(claim, rule, False, evidence))
        elif all(o == HOLDS for o in outcomes):
            verdicts.append(Verdict(claim, rule, True, evidence))
        else:
            verdicts.append(Verdict(claim, rule, None, evidence, undecided=True))

    add(
        "The raw MLM encoder is anisotropic: high average cosine, a few dominating singular values",
        "same pooler: raw average cosine > unsup SimCSE's and raw sv10 < unsup SimCSE's",
        [raw_same, unsup],
        lambda r, u: [Check(r, "avg_cos_random", ">", u), Check(r, "sv10", "<", u)],
    )
    add(
        "The raw encoder has good alignment but poor uniformity",
        f"same pooler: raw ℓ_align ≤ unsup SimCSE's + {ALIGN_TOLERANCE} and raw ℓ_uniform > unsup SimCSE's",
        [raw_same, unsup],
        lambda r, u: [Check(r, "align", "<", u, ALIGN_TOLERANCE), Check(r, "uniform", ">", u)],
    )
    add(
        "Unsup SimCSE improves uniformity while keeping alignment",
        f"same pooler: ℓ_uniform falls and ℓ_align rises by at most {ALIGN_TOLERANCE}",
        [raw_same, unsup],
        lambda r, u: [Check(u, "uniform", "<", r), Check(u, "align", "<", r, ALIGN_TOLERANCE)],
    )
    add(
        "Unsup SimCSE flattens the singular spectrum",
        "same pooler: sv10 and effective rank both rise",
        [raw_same, unsup],
        lambda r, u: [Check(u, "sv10", ">", r), Check(u, "effective_rank", ">", r)],
    )
    add(
        "Unsup SimCSE raises STS",
        "each side's best: unsup SimCSE's mean STS-B train ρ above the best raw pooler's",
        [raw_best, unsup],
        lambda r, u: [Check(u, "train", ">", r)],
    )
    for name, row in (("Whitening", whitening), ("Flow", flow)):
        add(
            f"{name} improves uniformity but hurts alignment",
            "against the baseline it was fitted on: ℓ_uniform below it and ℓ_align above it",
            [post_base, row],
            lambda r, p: [Check(p, "uniform", "<", r), Check(p, "align", ">", r)],
        )
    add(
        "Unsup SimCSE beats post-processing",
        "unsup SimCSE's mean STS-B train ρ above the strongest post-processed row's (any post-processor, "
        "fitted on any baseline)",
        [unsup, post_best],
        lambda u, p: [Check(u, "train", ">", p)],
    )
    same = unsup_same is not None and unsup is not None and unsup_same is unsup
    add(
        "Supervised SimCSE improves alignment further",
        "same test-time pooler: sup ℓ_align below unsup's"
        + (
            " (both chosen rows, seeds' means)"
            if same
            else " (their chosen poolers differ, so each one's best seed-42 candidate under the pooler "
            "setting both searched, its geometry at its best step)"
        ),
        [unsup_same, sup_same],
        lambda u, s: [Check(s, "align", "<", u)],
    )
    add(
        "STS order of the paper: first-last avg < flow, whitening < unsup SimCSE < sup SimCSE",
        "STS-B train ρ in that order: the baseline below the flow and whitening fitted on it (same pooler), "
        "then each side's best (flow and whitening in either order)",
        [post_base, flow, whitening, unsup, sup],
        lambda r, f, w, u, s: [
            Check(r, "train", "<", f),
            Check(r, "train", "<", w),
            Check(f, "train", "<", u),
            Check(w, "train", "<", u),
            Check(u, "train", "<", s),
        ],
    )
    if ditto is not None:
        add(
            "Ditto beats the raw encoder's best pooler",
            "each side's best (Ditto's head and the raw pooler both chosen on STS-B dev): Ditto's STS-B "
            "train ρ above the best raw pooler's",
            [ditto, raw_best],
            lambda d, r: [Check(d, "train", ">", r)],
        )
        add(
            "Post-processing beats Ditto",
            "the strongest post-processed row's STS-B train ρ (any post-processor, fitted on any baseline) "
            "above Ditto's",
            [post_best, ditto],
            lambda p, d: [Check(p, "train", ">", d)],
        )
    for method, row, role in rivals:
        simcse = unsup if role == "unsup" else sup
        which = "unsupervised" if role == "unsup" else "supervised"
        add(
            f"{method} beats {which} SimCSE",
            f"each side's best: {method}'s mean STS-B train ρ above {which} SimCSE's",
            [row, simcse],
            lambda m, s: [Check(m, "train", ">", s)],
        )
    return verdicts
