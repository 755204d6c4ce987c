"""A domain's judgements as training data (``sentcl adapt --method supervised --train QRELS``).

* **Pairs.** A BEIR folder's qrels split read as (query, relevant document) pairs: graded qrels count as
  relevant where the score is above 0; a document is its title and text joined by a space, as BEIR's
  evaluation joins them (the training cuts it to ``data.max_length`` tokens). qrels naming a query or a
  document the folder does not have are one line naming the file and line (evaluation/local_files.py).
* **Fit and choose.** The training queries are split by query, never by pair: the query ids sorted, shuffled
  with ``seed``, the first ``choose_share`` of them (rounded, at least one) judge the checkpoint, the rest
  train it, in that shuffled order — so ``fit_queries=N`` takes the first N, and a smaller N's queries are
  always among a larger one's (nested subsets, what a learning curve needs).
* **Hard negatives.** Mined per query from the start model's dense ranking (search/mining.py, under
  sentence-transformers' ``mine_hard_negatives`` rules): the judged relevant documents are never negatives;
  a candidate must score below the query's hardest positive (``absolute_margin`` 0); the 10 nearest are
  skipped and one is drawn at random (seeded) from ranks 10–49 (``range_min`` 10, ``range_max`` 50) —
  sentence-transformers' defaults take the top 3 with no margin; this is the guard its own hard-negative
  datasets used (natural-questions-hard-negatives: range 10–50, margin 0, random), because an unjudged
  relevant document is most likely among a query's very nearest. ``hard_negatives=0`` trains on in-batch
  negatives only (MultipleNegativesRankingLoss's setting).
* **Where.** The rows (``train.jsonl``: anchor, positive[, negative]) and the choose split
  (``qrels/choose.tsv``, beside links to the folder's ``corpus.jsonl`` and ``queries.jsonl``) are written once
  into sentcl's cache under a key of everything they depend on (the judgements' and the folder's bytes, the
  split, the mining model's weights), atomically; a run folder's recipe names them, so ``--resume`` and a
  study's seeds read the same files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sentcl.atomic_write import atomic_folder
from sentcl.config import ConfigError
from sentcl.embedder import Batched
from sentcl.evaluation.local_files import LocalTaskError, Retrieval, qrels_file, read_retrieval
from sentcl.hub_files import cache_dir
from sentcl.search.mining import MiningOptions, mine
from sentcl.training.checkpoint import sha256_of

if TYPE_CHECKING:
    from sentcl.embedder import Embedder

logger = logging.getLogger(__name__)

#: the false-negative guard of the mined negatives (module docstring)
MINING = MiningOptions(range_min=10, range_max=50, num_negatives=1, absolute_margin=0.0, sampling="random")
#: bump when the rows or the split change, so cached stage data is made again
PROTOCOL = "judgements-v1"


@dataclass
class Judgements:
    """The training judgements, split: ``fit`` query ids in their (seeded) order, ``choose`` query ids; the
    first ``fit_count`` fit queries train (all of them by default)."""

    retrieval: Retrieval
    fit: list[str]
    choose: list[str]
    fit_count: int | None = None

    @property
    def fitted(self) -> list[str]:
        """The queries that train: the first ``fit_count`` of the fit order."""
        return self.fit[: self.fit_count] if self.fit_count is not None else self.fit


def read_judgements(qrels: str | Path, option: str) -> Retrieval:
    """The judged queries of a BEIR qrels file, or one ConfigError naming ``option`` and the file's fault."""
    try:
        return read_retrieval(Path(qrels))
    except LocalTaskError as exc:
        raise ConfigError(f"{option} {qrels}: {exc}") from None


def split_queries(query_ids: list[str], choose_share: float, seed: int) -> tuple[list[str], list[str]]:
    """(fit ids in the seeded order, choose ids): by query, deterministic for a seed."""
    order = sorted(query_ids)
    random.Random(seed).shuffle(order)
    chosen = max(1, round(choose_share * len(order)))
    return order[chosen:], sorted(order[:chosen])


def judgements_for(
    train: str, seed: int, choose_share: float | None, choose: str | None, report: str | None,
    fit_queries: int | None, batch_size: int,
) -> Judgements:  # fmt: skip
    """The training judgements read and split, or one ConfigError (nothing written): a query also in the
    report's (or an explicit choose file's) judgements, a split with no relevant pair, fewer fit queries than
    one batch."""
    retrieval = read_judgements(train, "--train")
    ids = list(retrieval.query_ids)
    for option, other in (("--report", report), ("--choose", choose)):
        if other:
            shared = sorted(set(ids) & set(read_judgements(other, option).query_ids))
            if shared:
                more = f" and {len(shared) - 1} more" if len(shared) > 1 else ""
                raise ConfigError(
                    f"{option} {other}: query {shared[0]!r}{more} is also in --train {train}; judgements "
                    f"that train a model cannot {'report' if option == '--report' else 'choose'} it"
                )
    if choose:
        fit, held = sorted(ids), list[str]()
        random.Random(seed).shuffle(fit)
    else:
        share = 0.2 if choose_share is None else choose_share
        if not 0 < share < 1:
            raise ConfigError(f"--choose-share {share}: a share of the training queries, in (0, 1)")
        fit, held = split_queries(ids, share, seed)
    if fit_queries is not None and fit_queries > len(fit):
        raise ConfigError(f"--fit-queries {fit_queries}: --train {train} leaves {len(fit)} to fit on")
    judgements = Judgements(retrieval, fit, held, fit_queries)
    if len(judgements.fitted) < batch_size:
        raise ConfigError(
            f"--train {train}: {len(judgements.fitted)} queries to fit on, fewer than one batch of "
            f"{batch_size} (lower --batch-size, or judge more queries)"
        )
    return judgements


def stage_data(
    judgements: Judgements, hard_negatives: int, miner: Embedder | None, miner_key: str, seed: int
) -> Path:
    """The folder of the supervised stage's files (module docstring), made once in the cache. Two levels:
    the split's folder (its choose qrels and, where ``hard_negatives`` is 1, every fit query's negative,
    mined by ``miner`` — an encoder whose weights ``miner_key`` names — over all the fit queries, so a
    learning curve's subsets mine once), and inside it one folder of training rows per fit count."""
    retrieval = judgements.retrieval
    beir = retrieval.qrels_path.parent.parent
    identity = [
        PROTOCOL, sha256_of(qrels_file(retrieval.qrels_path)), sha256_of(beir / "corpus.jsonl"),
        sha256_of(beir / "queries.jsonl"), judgements.fit, judgements.choose, hard_negatives,
        miner_key if hard_negatives else None, seed, MINING.__dict__,
    ]  # fmt: skip
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
    split = cache_dir() / "adapt-judgements" / f"{beir.name}-{digest}"  # the choice's task: <name>-choose
    if not (split / "negatives.json").is_file():
        negatives: dict[str, int] = {}
        if hard_negatives:
            if miner is None:
                raise ValueError("hard negatives are mined by a model: pass miner=")
            negatives = mined_negatives(judgements, miner, seed)
        with atomic_folder(split, "judgements", overwrite=True) as tmp:
            (tmp / "negatives.json").write_text(json.dumps(negatives) + "\n", encoding="utf-8")
            if judgements.choose:
                (tmp / "qrels").mkdir()
                write_qrels(tmp / "qrels" / "choose.tsv", retrieval, set(judgements.choose))
                for name in ("corpus.jsonl", "queries.jsonl"):
                    (tmp / name).symlink_to((beir / name).resolve())
    negatives = json.loads((split / "negatives.json").read_text(encoding="utf-8"))
    count = len(judgements.fitted)
    rows_folder = split / f"fit-{count}"
    if not (rows_folder / "train.jsonl").is_file():
        rows = training_rows(judgements, negatives if hard_negatives else None)
        with atomic_folder(rows_folder, "judgements", overwrite=True) as tmp:
            with (tmp / "train.jsonl").open("w", encoding="utf-8") as handle:
                for row in rows:
                    names = ("anchor", "positive", "negative")[: len(row)]
                    handle.write(json.dumps(dict(zip(names, row, strict=True)), ensure_ascii=False) + "\n")
            summary = {"fit_queries": count, "choose_queries": len(judgements.choose), "rows": len(rows),
                       "hard_negatives": hard_negatives, "mining": MINING.__dict__,
                       "source": str(retrieval.qrels_path)}  # fmt: skip
            (tmp / "judgements.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return rows_folder


def training_rows(judgements: Judgements, negatives: dict[str, int] | None) -> list[tuple[str, ...]]:
    """One row per (fitted query, relevant document), in the fit order; with the query's negative (a corpus
    row, ``negatives``) where given."""
    retrieval = judgements.retrieval
    row_of = {query: i for i, query in enumerate(retrieval.query_ids)}
    rows: list[tuple[str, ...]] = []
    for query in judgements.fitted:
        text = retrieval.queries[row_of[query]]
        for doc in sorted(retrieval.relevant[row_of[query]]):
            pair = (text, retrieval.corpus[doc])
            rows.append(pair if negatives is None else (*pair, retrieval.corpus[negatives[query]]))
    return rows


def mined_negatives(judgements: Judgements, miner: Embedder, seed: int) -> dict[str, int]:
    """Each fit query's negative (a corpus row), mined by ``miner`` under ``MINING``: every judged relevant
    document of the query is excluded, not only a pair's (other splits' judgements are not read: the report
    stays unread). A query with no candidate that passes gets a random document it is not judged relevant
    to, never dropped."""
    retrieval = judgements.retrieval
    row_of = {query: i for i, query in enumerate(retrieval.query_ids)}
    doc_row = {text: i for i, text in enumerate(retrieval.corpus)}
    pairs = [
        (retrieval.queries[row_of[query]], retrieval.corpus[doc])
        for query in judgements.fit
        for doc in sorted(retrieval.relevant[row_of[query]])
    ]
    options = MiningOptions(**(MINING.__dict__ | {"seed": seed}))
    mined = mine(Batched(miner, 64, show_progress=True), pairs, options, corpus=retrieval.corpus)
    negatives: dict[str, int] = {}
    rng = random.Random(seed)
    for query in judgements.fit:
        row = row_of[query]
        found = mined.negatives.get(retrieval.queries[row])
        if found:
            negatives[query] = doc_row[found[0]]
            continue
        if len(retrieval.relevant[row]) >= len(retrieval.corpus):
            raise ConfigError(
                f"--train {retrieval.qrels_path}: query {query!r} is judged relevant to every document"
            )
        while query not in negatives:
            doc = rng.randrange(len(retrieval.corpus))
            if doc not in retrieval.relevant[row]:
                negatives[query] = doc
    if mined.without:
        logger.warning(
            "%d of %d fit queries have no candidate in ranks %d-%d below their positive; each gets a random "
            "document it is not judged relevant to as its negative",
            mined.without, mined.anchors, MINING.range_min, MINING.range_max,
        )  # fmt: skip
    return negatives


def write_qrels(path: Path, retrieval: Retrieval, queries: set[str]) -> None:
    """The relevant pairs of ``queries`` as a BEIR qrels file."""
    lines = ["query-id\tcorpus-id\tscore"]
    for query, relevant in zip(retrieval.query_ids, retrieval.relevant, strict=True):
        if query in queries:
            lines += [
                f"{query}\t{retrieval.corpus_ids[doc]}\t{grade:g}" for doc, grade in sorted(relevant.items())
            ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
