"""Hard-negative mining: for (anchor, positive) pairs, the corpus sentences a model ranks close to the anchor
that are not its positive, as sentence-transformers' ``mine_hard_negatives`` chooses them.

Every distinct positive (and any extra corpus) is encoded with the model's ``document`` prompt, every anchor
with its ``query`` prompt, and searched exactly (cosine). For each anchor, the candidates ranked
``range_min`` … ``range_max`` are kept when they are

* not one of the anchor's positives (every pair with that anchor), nor a near-duplicate of the anchor or
  of a positive (the same text once case and whitespace are folded);
* below ``max_score`` (a candidate as close as a paraphrase is likely an unlabelled positive);
* at most ``positive_score − absolute_margin`` and at most ``positive_score × (1 − relative_margin)``;

and of those the first ``num_negatives`` (``sampling="top"``) or as many drawn at random with ``seed``
(``"random"``). An anchor left with no negative is counted and left out (the log and the summary say how
many); with several negatives, one triplet row per negative.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, unit_rows
from sentcl.serving.index import SentenceIndex

logger = logging.getLogger(__name__)


class MiningError(ValueError):
    """Mining settings that cannot be met (the message names the option)."""


@dataclass(frozen=True)
class MiningOptions:
    range_min: int = 0
    range_max: int = 10
    num_negatives: int = 1
    absolute_margin: float | None = None
    relative_margin: float | None = None
    max_score: float | None = None
    sampling: str = "top"
    seed: int = 12

    def check(self) -> None:
        if not 0 <= self.range_min < self.range_max:
            raise MiningError(
                f"--range-min {self.range_min} / --range-max {self.range_max}: 0 ≤ min < max needed"
            )
        if not 1 <= self.num_negatives <= self.range_max - self.range_min:
            raise MiningError(
                f"--num-negatives {self.num_negatives}: between 1 and the {self.range_max - self.range_min} "
                f"candidates of the rank range"
            )
        if self.relative_margin is not None and not 0 <= self.relative_margin < 1:
            raise MiningError(f"--relative-margin {self.relative_margin}: in [0, 1)")
        if self.absolute_margin is not None and not -2 < self.absolute_margin < 2:
            raise MiningError(f"--absolute-margin {self.absolute_margin}: a cosine difference, in (-2, 2)")
        if self.sampling not in ("top", "random"):
            raise MiningError(f"--sampling {self.sampling!r}: top or random")


@dataclass
class Mined:
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    #: anchors left with no negative once the filters ran
    without: int = 0
    #: the negatives' and the positives' cosine with their anchors, for the summary
    negative_scores: list[float] = field(default_factory=list)
    positive_scores: list[float] = field(default_factory=list)


def fold(text: str) -> str:
    return " ".join(text.casefold().split())


def mine(
    embedder: Embedder,
    pairs: Sequence[tuple[str, str]],
    options: MiningOptions = MiningOptions(),
    corpus: Sequence[str] = (),
) -> Mined:
    """(anchor, positive, negative) rows for ``pairs``; ``corpus`` adds candidates beside the positives."""
    options.check()
    texts = list(dict.fromkeys([p for _, p in pairs] + list(corpus)))
    documents = unit_rows(np.asarray(for_role(embedder, DOCUMENT).encode(texts), dtype=np.float32))
    anchors = list(dict.fromkeys(a for a, _ in pairs))
    queries = unit_rows(np.asarray(for_role(embedder, QUERY).encode(anchors), dtype=np.float32))
    row_of_text = {t: i for i, t in enumerate(texts)}
    row_of_anchor = {a: i for i, a in enumerate(anchors)}
    index = SentenceIndex.build(documents, texts, "flat")
    # a few more than the range: the positive and near-duplicates may sit inside it
    positives_of: dict[str, set[str]] = {}
    for anchor, positive in pairs:
        positives_of.setdefault(anchor, {fold(anchor)}).add(fold(positive))
    depth = min(len(texts), options.range_max + 8 + max(len(v) for v in positives_of.values()))
    hits = index.search(queries, top_k=depth)
    rng = np.random.default_rng(options.seed)
    mined = Mined()
    for anchor, positive in pairs:
        q = row_of_anchor[anchor]
        positive_score = float(queries[q] @ documents[row_of_text[positive]])
        excluded = positives_of[anchor]
        ranked = [h for h in hits[q] if fold(h.text) not in excluded][options.range_min : options.range_max]
        kept = [h for h in ranked if _passes(h.score, positive_score, options)]
        if not kept:
            mined.without += 1
            continue
        if options.sampling == "random":
            chosen = [
                kept[i]
                for i in sorted(rng.choice(len(kept), min(len(kept), options.num_negatives), replace=False))
            ]
        else:
            chosen = kept[: options.num_negatives]
        mined.positive_scores.append(positive_score)
        for hit in chosen:
            mined.rows.append((anchor, positive, hit.text))
            mined.negative_scores.append(hit.score)
    if mined.without:
        logger.info(
            "%d of %d anchors have no negative that passes the filters; left out", mined.without, len(pairs)
        )
    return mined


def _passes(score: float, positive: float, options: MiningOptions) -> bool:
    if options.max_score is not None and score > options.max_score:
        return False
    if options.absolute_margin is not None and score > positive - options.absolute_margin:
        return False
    return not (options.relative_margin is not None and score > positive * (1 - options.relative_margin))
