"""Hard-negative mining for (anchor, positive) pairs under sentence-transformers' ``mine_hard_negatives``
rules and option names (tests/search/test_mining.py agrees with it on identical vectors):

1. The candidates are the distinct texts of ``corpus`` then the positives; the queries are the distinct
   anchors. Every candidate is encoded with the model's ``document`` prompt, every anchor with its ``query``
   prompt; similarity is cosine. Each query's ``range_max + P`` nearest candidates are taken (P: the most
   pairs any anchor has).
2. Filters, on those candidates: the query's own positives are out; with ``absolute_margin`` a candidate
   must score at most ``s⁺ − margin``, with ``relative_margin`` at most ``s⁺ − |s⁺|·margin`` (sign-safe),
   where s⁺ is the query's *lowest* positive score (its hardest positive); ``max_score`` / ``min_score``
   bound the score itself.
3. The rank range applies to the candidates that passed: the ``range_max`` best, less the first
   ``range_min``. Of those the first ``num_negatives`` (``sampling="top"``) or as many drawn at random
   (``"random"``, kept in score order).
4. One row (anchor, positive, negative) per positive of the query and per negative, grouped by query.

``range_max`` left unset is derived as theirs: ``range_min + num_negatives + P``, or
``range_min + 10·num_negatives + P`` when a margin or ``max_score`` is set. Their defaults: three negatives.

Where sentcl differs, on purpose: random sampling is seeded (``seed``; theirs uses Python's global
``random``), and ``skip_near_duplicates`` (on by default; off gives their rule exactly) also removes a
candidate that equals the anchor or one of its positives once case and whitespace are folded: the same
sentence in another row is no negative. Anchors with fewer negatives than asked are counted, never
silently dropped from the count.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from sentcl.embedder import DOCUMENT, QUERY, Embedder, for_role, unit_rows
from sentcl.errors import UserError

logger = logging.getLogger(__name__)

#: queries scored against the whole corpus at once (bounds the [chunk, corpus] score matrix)
QUERY_CHUNK = 4096
#: how many near-duplicates of an anchor or its positives the scan can step over
NEAR_DUPLICATE_SPARE = 8


class MiningError(UserError, ValueError):
    """Mining settings that cannot be met (the message names the option)."""


@dataclass(frozen=True)
class MiningOptions:
    range_min: int = 0
    range_max: int | None = None
    num_negatives: int = 3
    absolute_margin: float | None = None
    relative_margin: float | None = None
    max_score: float | None = None
    min_score: float | None = None
    sampling: str = "top"
    seed: int = 12
    skip_near_duplicates: bool = True

    def check(self) -> None:
        for name in ("absolute_margin", "relative_margin", "max_score", "min_score"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise MiningError(f"--{name.replace('_', '-')} {value}: a finite number is needed")
        if self.range_min < 0:
            raise MiningError(f"--range-min {self.range_min}: 0 or more")
        if self.num_negatives < 1:
            raise MiningError(f"--num-negatives {self.num_negatives}: at least 1")
        if self.range_max is not None:
            if self.range_min >= self.range_max:
                raise MiningError(
                    f"--range-min {self.range_min} / --range-max {self.range_max}: 0 ≤ min < max needed"
                )
            if self.num_negatives > self.range_max - self.range_min:
                raise MiningError(
                    f"--num-negatives {self.num_negatives}: at most the {self.range_max - self.range_min} "
                    f"candidates of the rank range"
                )
        if self.relative_margin is not None and not 0 <= self.relative_margin < 1:
            raise MiningError(f"--relative-margin {self.relative_margin}: in [0, 1)")
        if self.absolute_margin is not None and not -2 < self.absolute_margin < 2:
            raise MiningError(f"--absolute-margin {self.absolute_margin}: a cosine difference, in (-2, 2)")
        if self.sampling not in ("top", "random"):
            raise MiningError(f"--sampling {self.sampling!r}: top or random")

    def rank_limit(self, most_pairs: int) -> int:
        """``range_max``, or sentence-transformers' derivation of it for anchors with up to ``most_pairs``
        pairs."""
        if self.range_max is not None:
            return self.range_max
        filtered = (
            self.absolute_margin is not None or self.relative_margin is not None or self.max_score is not None
        )
        return self.range_min + (10 if filtered else 1) * self.num_negatives + most_pairs


@dataclass
class Mined:
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    #: anchors (distinct) left with no negative once the filters ran, and with fewer than asked
    without: int = 0
    short: int = 0
    anchors: int = 0
    #: the negatives' and the positives' cosine with their anchors, one per row, for the summary
    negative_scores: list[float] = field(default_factory=list)
    positive_scores: list[float] = field(default_factory=list)
    #: the rank limit used (``range_max`` as given or derived)
    range_max: int = 0
    #: each distinct anchor's negatives, in order (what the agreement with sentence-transformers compares)
    negatives: dict[str, list[str]] = field(default_factory=dict)


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
    if not pairs:
        raise MiningError("no (anchor, positive) pairs to mine for")
    texts = list(dict.fromkeys([*corpus, *(p for _, p in pairs)]))
    row_of_text = {t: i for i, t in enumerate(texts)}
    anchors = list(dict.fromkeys(a for a, _ in pairs))
    positives: dict[str, list[int]] = {a: [] for a in anchors}
    pair_count: dict[str, int] = dict.fromkeys(anchors, 0)
    for anchor, positive in pairs:
        pair_count[anchor] += 1
        if row_of_text[positive] not in positives[anchor]:
            positives[anchor].append(row_of_text[positive])
    most_pairs = max(pair_count.values())
    limit = options.rank_limit(most_pairs)  # check() and the derivation leave num_negatives room in it

    documents = torch.from_numpy(_unit(for_role(embedder, DOCUMENT).encode(texts)))
    queries = torch.from_numpy(_unit(for_role(embedder, QUERY).encode(anchors)))
    # sentence-transformers' depth, and a few more for the near-duplicates sentcl skips: each one skipped
    # lets the scan go one candidate further, so without near-duplicates the scan is exactly theirs
    base_depth = limit + most_pairs
    spare = NEAR_DUPLICATE_SPARE if options.skip_near_duplicates else 0
    depth = min(base_depth + spare, len(texts))
    scores, ids = [], []
    for start in range(0, len(anchors), QUERY_CHUNK):
        best = torch.topk(queries[start : start + QUERY_CHUNK] @ documents.T, k=depth, dim=1)
        scores.append(best.values)
        ids.append(best.indices)
    top_scores, top_ids = torch.cat(scores).numpy(), torch.cat(ids).numpy()

    rng = np.random.default_rng(options.seed)
    mined = Mined(range_max=limit, anchors=len(anchors))
    folded = [fold(t) for t in texts] if options.skip_near_duplicates else None
    for q, anchor in enumerate(anchors):
        own = positives[anchor]
        positive_scores = [float(queries[q] @ documents[i]) for i in own]
        hardest = min(positive_scores)
        excluded = {fold(anchor), *(folded[i] for i in own)} if folded is not None else set()
        kept = []  # (score, corpus row) of the candidates that pass, in rank order
        reach = base_depth
        for rank, (score, i) in enumerate(zip(top_scores[q].tolist(), top_ids[q].tolist(), strict=True)):
            if rank >= reach:
                break
            if i in own:
                continue
            if folded is not None and folded[i] in excluded:
                reach += 1
                continue
            if not _passes(score, hardest, options):
                continue
            kept.append((score, i))
            if len(kept) == limit:  # the range is over these; no later candidate enters it
                break
        window = kept[options.range_min :]
        if options.sampling == "random" and len(window) > options.num_negatives:
            drawn = sorted(rng.choice(len(window), options.num_negatives, replace=False))
            chosen = [window[j] for j in drawn]
        else:
            chosen = window[: options.num_negatives]
        mined.negatives[anchor] = [texts[i] for _, i in chosen]
        if not chosen:
            mined.without += 1
            continue
        mined.short += len(chosen) < options.num_negatives
        for i, positive_score in zip(own, positive_scores, strict=True):
            for score, negative in chosen:
                mined.rows.append((anchor, texts[i], texts[negative]))
                mined.negative_scores.append(score)
                mined.positive_scores.append(positive_score)
    if mined.without or mined.short:
        logger.info(
            "%d of %d anchors have no negative that passes the filters, %d fewer than %d",
            mined.without, len(anchors), mined.short, options.num_negatives,
        )  # fmt: skip
    return mined


def _unit(vectors) -> np.ndarray:
    return np.ascontiguousarray(unit_rows(np.asarray(vectors, dtype=np.float32)))


def _passes(score: float, hardest: float, options: MiningOptions) -> bool:
    """Whether a candidate scoring ``score`` passes the margins (against the query's hardest positive,
    ``hardest``) and the score bounds, as sentence-transformers writes each test."""
    if options.absolute_margin is not None and score + options.absolute_margin > hardest:
        return False
    if options.relative_margin is not None and score > hardest - abs(hardest) * options.relative_margin:
        return False
    if options.max_score is not None and score > options.max_score:
        return False
    return not (options.min_score is not None and score < options.min_score)
