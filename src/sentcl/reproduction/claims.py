"""The seeds' claims (SimCSE §5/§7, Wang & Isola), each judged from measured rows by a stated rule.

A claim whose rows are missing from the plan is reported as "not measured", never as holding.
"""

from __future__ import annotations

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
class Verdict:
    claim: str
    rule: str
    holds: bool | None  # None: not measured
    evidence: str


def _fmt(a: ModelAnalysis) -> str:
    return (
        f"{a.label}: ρ {a.spearman:.2f}, ℓ_align {a.align:.3f}, ℓ_uniform {a.uniform:.3f}, "
        f"avg cos {a.spectrum['avg_cos_random']:.3f}, sv10 {a.spectrum.get('sv10', float('nan')):.3f}, "
        f"eff. rank {a.spectrum['effective_rank']:.1f}"
    )


def judge(
    raw: ModelAnalysis | None,
    unsup: ModelAnalysis | None,
    sup: ModelAnalysis | None,
    whitening: ModelAnalysis | None,
    flow: ModelAnalysis | None,
) -> list[Verdict]:
    """``raw``: the untrained encoder under the paper's baseline pooler (first-last avg)."""
    verdicts: list[Verdict] = []

    def add(claim: str, rule: str, rows: list[ModelAnalysis | None], test) -> None:
        if any(r is None for r in rows):
            verdicts.append(Verdict(claim, rule, None, "a row it needs is not in the plan"))
            return
        verdicts.append(Verdict(claim, rule, bool(test(*rows)), "; ".join(_fmt(r) for r in rows)))

    add(
        "The raw MLM encoder is anisotropic: high average cosine, a few dominating singular values",
        "raw average cosine > unsup SimCSE's and raw sv10 < unsup SimCSE's",
        [raw, unsup],
        lambda r, u: (
            r.spectrum["avg_cos_random"] > u.spectrum["avg_cos_random"]
            and r.spectrum["sv10"] < u.spectrum["sv10"]
        ),
    )
    add(
        "The raw encoder has good alignment but poor uniformity",
        "raw ℓ_align ≤ unsup SimCSE's + tolerance and raw ℓ_uniform > unsup SimCSE's",
        [raw, unsup],
        lambda r, u: r.align <= u.align + ALIGN_TOLERANCE and r.uniform > u.uniform,
    )
    add(
        "Unsup SimCSE improves uniformity while keeping alignment",
        f"ℓ_uniform falls and ℓ_align rises by at most {ALIGN_TOLERANCE}",
        [raw, unsup],
        lambda r, u: u.uniform < r.uniform and u.align <= r.align + ALIGN_TOLERANCE,
    )
    add(
        "Unsup SimCSE flattens the singular spectrum",
        "sv10 and effective rank both rise",
        [raw, unsup],
        lambda r, u: (
            u.spectrum["sv10"] > r.spectrum["sv10"]
            and u.spectrum["effective_rank"] > r.spectrum["effective_rank"]
        ),
    )
    add(
        "Unsup SimCSE raises STS",
        "STS-B dev ρ above the raw baseline's",
        [raw, unsup],
        lambda r, u: u.spearman > r.spearman,
    )
    for name, row in (("Whitening", whitening), ("Flow", flow)):
        add(
            f"{name} improves uniformity but hurts alignment",
            "ℓ_uniform below the raw baseline's and ℓ_align above it",
            [raw, row],
            lambda r, p: p.uniform < r.uniform and p.align > r.align,
        )
    add(
        "Supervised SimCSE improves alignment further",
        "sup ℓ_align below unsup's",
        [unsup, sup],
        lambda u, s: s.align < u.align,
    )
    add(
        "STS order of the paper: first-last avg < flow, whitening < unsup SimCSE < sup SimCSE",
        "STS-B dev ρ in that order (flow and whitening in either order)",
        [raw, flow, whitening, unsup, sup],
        lambda r, f, w, u, s: (
            r.spearman < min(f.spearman, w.spearman) and max(f.spearman, w.spearman) < u.spearman < s.spearman
        ),
    )
    return verdicts
