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
from dataclasses import dataclass

from sentcl.analysis.report import ModelAnalysis

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
    STS numbers are means over its seeds, with their standard deviations (sample, n − 1)."""

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

    def sts(self, split: str) -> str:
        value, std = (self.train, self.train_std) if split == "train" else (self.dev, self.dev_std)
        if math.isnan(value):
            return "—"
        return f"{value:.2f} ± {std:.2f}" if std is not None else f"{value:.2f}"


@dataclass
class Verdict:
    claim: str
    rule: str
    holds: bool | None  # None: not measured, or not judged
    evidence: str
    #: not judged because a method's row is its start encoder (it never beat its starting model)
    kept_start: bool = False


def _fmt(m: Measured) -> str:
    a = m.analysis
    seeds = f", {m.seeds} seeds" if m.seeds > 1 else ""
    return (
        f"{m.label} ({m.pooler}{seeds}): STS-B train {m.sts('train')}, dev {m.sts('dev')}, "
        f"ℓ_align {a.align:.3f}, ℓ_uniform {a.uniform:.3f}, avg cos {a.spectrum['avg_cos_random']:.3f}, "
        f"sv10 {a.spectrum.get('sv10', float('nan')):.3f}, eff. rank {a.spectrum['effective_rank']:.1f}"
    )


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
) -> list[Verdict]:
    """``raw_same``: the untrained encoder under unsup SimCSE's test-time pooler; ``raw_best``: its best
    pooler by STS-B dev; ``post_base``: the paper's first-last avg baseline, which ``whitening`` and
    ``flow`` were fitted on; ``post_best``: the strongest post-processed row; ``unsup_same`` /
    ``sup_same``: the two SimCSE rows under one test-time pooler."""
    verdicts: list[Verdict] = []

    def add(claim: str, rule: str, rows: list[Measured | None], test) -> None:
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
        verdicts.append(Verdict(claim, rule, bool(test(*rows)), evidence))

    add(
        "The raw MLM encoder is anisotropic: high average cosine, a few dominating singular values",
        "same pooler: raw average cosine > unsup SimCSE's and raw sv10 < unsup SimCSE's",
        [raw_same, unsup],
        lambda r, u: (
            r.analysis.spectrum["avg_cos_random"] > u.analysis.spectrum["avg_cos_random"]
            and r.analysis.spectrum["sv10"] < u.analysis.spectrum["sv10"]
        ),
    )
    add(
        "The raw encoder has good alignment but poor uniformity",
        f"same pooler: raw ℓ_align ≤ unsup SimCSE's + {ALIGN_TOLERANCE} and raw ℓ_uniform > unsup SimCSE's",
        [raw_same, unsup],
        lambda r, u: (
            r.analysis.align <= u.analysis.align + ALIGN_TOLERANCE and r.analysis.uniform > u.analysis.uniform
        ),
    )
    add(
        "Unsup SimCSE improves uniformity while keeping alignment",
        f"same pooler: ℓ_uniform falls and ℓ_align rises by at most {ALIGN_TOLERANCE}",
        [raw_same, unsup],
        lambda r, u: (
            u.analysis.uniform < r.analysis.uniform and u.analysis.align <= r.analysis.align + ALIGN_TOLERANCE
        ),
    )
    add(
        "Unsup SimCSE flattens the singular spectrum",
        "same pooler: sv10 and effective rank both rise",
        [raw_same, unsup],
        lambda r, u: (
            u.analysis.spectrum["sv10"] > r.analysis.spectrum["sv10"]
            and u.analysis.spectrum["effective_rank"] > r.analysis.spectrum["effective_rank"]
        ),
    )
    add(
        "Unsup SimCSE raises STS",
        "each side's best: unsup SimCSE's mean STS-B train ρ above the best raw pooler's",
        [raw_best, unsup],
        lambda r, u: u.train > r.train,
    )
    for name, row in (("Whitening", whitening), ("Flow", flow)):
        add(
            f"{name} improves uniformity but hurts alignment",
            "against the baseline it was fitted on: ℓ_uniform below it and ℓ_align above it",
            [post_base, row],
            lambda r, p: p.analysis.uniform < r.analysis.uniform and p.analysis.align > r.analysis.align,
        )
    add(
        "Unsup SimCSE beats post-processing",
        "unsup SimCSE's mean STS-B train ρ above the strongest post-processed row's (any post-processor, "
        "fitted on any baseline)",
        [unsup, post_best],
        lambda u, p: u.train > p.train,
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
        lambda u, s: s.analysis.align < u.analysis.align,
    )
    add(
        "STS order of the paper: first-last avg < flow, whitening < unsup SimCSE < sup SimCSE",
        "STS-B train ρ in that order: the baseline below the flow and whitening fitted on it (same pooler), "
        "then each side's best (flow and whitening in either order)",
        [post_base, flow, whitening, unsup, sup],
        lambda r, f, w, u, s: r.train < min(f.train, w.train) and max(f.train, w.train) < u.train < s.train,
    )
    return verdicts
