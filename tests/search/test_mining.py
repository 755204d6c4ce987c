"""Hard-negative mining on vectors whose ranking is known: the rank range, the margins, the score bounds,
every positive of an anchor and near-duplicates left out; the same negatives as sentence-transformers'
``mine_hard_negatives`` on identical vectors over a grid of settings; and `sentcl mine` from the CLI."""

import csv
import json

import numpy as np
import pytest
import torch

from sentcl.cli.main import main
from sentcl.search.mining import MiningError, MiningOptions, mine
from tests.conftest import SENTENCES


class Table:
    """Each text's vector is [1, angle-coded] so that cosine with the anchor falls with the listed order."""

    def __init__(self, scores: dict[str, float]):
        self.scores = scores  # text → cosine with the direction (1, 0)

    def encode(self, sentences):
        out = []
        for text in sentences:
            c = self.scores.get(text, 1.0)
            out.append([c, float(np.sqrt(max(0.0, 1 - c * c)))])
        return np.array(out)


SCORES = {"anchor": 1.0, "positive": 0.9, "POSITIVE ": 0.95, "near positive": 0.95,
          "n1": 0.89, "n2": 0.8, "n3": 0.7, "n4": 0.5, "n5": 0.2, "other positive": 0.97}  # fmt: skip
PAIRS = [("anchor", "positive"), ("anchor", "near positive")]
CORPUS = ["POSITIVE ", "n1", "n2", "n3", "n4", "n5"]


def negatives(options, pairs=PAIRS[:1], corpus=CORPUS):
    mined = mine(Table(SCORES), pairs, options, corpus)
    return [n for _, _, n in mined.rows], mined


def test_the_closest_non_positive_candidates_in_rank_order():
    found, mined = negatives(MiningOptions(num_negatives=3))
    assert found == ["n1", "n2", "n3"]  # "POSITIVE " is the positive folded: never a negative
    assert mined.positive_scores == [pytest.approx(0.9)] * 3 and mined.without == 0  # one per row
    assert negatives(MiningOptions(range_min=1, range_max=3, num_negatives=2))[0] == ["n2", "n3"]


def test_every_positive_of_an_anchor_is_excluded():
    mined = mine(Table(SCORES), PAIRS, MiningOptions(num_negatives=1), [*CORPUS, "other positive"])
    assert [(p, n) for _, p, n in mined.rows] == [
        ("positive", "other positive"),
        ("near positive", "other positive"),
    ]
    assert all(n not in ("positive", "near positive", "POSITIVE ") for _, _, n in mined.rows)


def test_margins_and_the_score_ceiling():
    assert negatives(MiningOptions(absolute_margin=0.05, num_negatives=2))[0] == ["n2", "n3"]  # ≤ 0.85
    assert negatives(MiningOptions(relative_margin=0.3, num_negatives=2))[0] == ["n4", "n5"]  # ≤ 0.63
    assert negatives(MiningOptions(max_score=0.75, num_negatives=1))[0] == ["n3"]
    assert negatives(MiningOptions(min_score=0.6))[0] == ["n1", "n2", "n3"][:3]
    assert negatives(MiningOptions(min_score=0.75))[0] == ["n1", "n2"]
    found, mined = negatives(MiningOptions(range_max=2, max_score=0.1, num_negatives=1))
    assert found == [] and mined.without == 1


def test_the_range_counts_candidates_that_pass_the_filters():
    """range_min skips the best candidates that pass, not raw ranks (sentence-transformers' rule): with n1
    removed by the ceiling, the range starts at n2."""
    assert negatives(MiningOptions(range_min=1, num_negatives=2, max_score=0.85))[0] == ["n3", "n4"]


def test_margins_are_taken_from_the_hardest_positive_and_are_sign_safe():
    scores = {"a": 1.0, "p1": 0.9, "p2": 0.6, "x": 0.7, "y": 0.5, "z": 0.55}
    mined = mine(
        Table(scores),
        [("a", "p1"), ("a", "p2")],
        MiningOptions(absolute_margin=0.0, num_negatives=3),
        ["x", "y", "z"],
    )
    assert mined.negatives["a"] == ["z", "y"]  # ≤ 0.6, the lower positive's score, not 0.9
    assert [(p, n) for _, p, n in mined.rows] == [("p1", "z"), ("p1", "y"), ("p2", "z"), ("p2", "y")]
    low = {"a": 1.0, "p": -0.5, "x": -0.52, "y": -0.6}
    mined = mine(Table(low), [("a", "p")], MiningOptions(relative_margin=0.1, num_negatives=2), ["x", "y"])
    assert mined.negatives["a"] == ["y"]  # ≤ −0.5 − 0.05: x at −0.52 is too close; (1 − m)·s would keep it


def test_random_sampling_is_seeded_and_stays_in_the_range():
    first = negatives(MiningOptions(range_max=5, num_negatives=2, sampling="random", seed=3))[0]
    again = negatives(MiningOptions(range_max=5, num_negatives=2, sampling="random", seed=3))[0]
    assert first == again and set(first) <= {"n1", "n2", "n3", "n4", "n5"} and len(set(first)) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (MiningOptions(range_min=5, range_max=5), r"--range-min 5 / --range-max 5"),
        (MiningOptions(range_max=3, num_negatives=4), r"--num-negatives 4: at most the 3"),
        (MiningOptions(max_score=float("nan")), r"--max-score nan: a finite number"),
        (MiningOptions(relative_margin=1.0), r"--relative-margin 1.0: in \[0, 1\)"),
        (MiningOptions(sampling="best"), r"--sampling 'best'"),
    ],
)
def test_impossible_settings_are_refused(options, message):
    with pytest.raises(MiningError, match=message):
        mine(Table(SCORES), PAIRS, options)


def test_mine_from_the_cli(tiny_model_dir, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    rows = [
        json.dumps({"anchor": a, "positive": b}) for a, b in zip(SENTENCES[:6], SENTENCES[6:], strict=True)
    ]
    pairs.write_text("\n".join(rows) + "\n")
    out = tmp_path / "mined.tsv"
    argv = [
        "mine",
        str(tiny_model_dir),
        str(pairs),
        "--out",
        str(out),
        "--num-negatives",
        "2",
        "--dtype",
        "fp32",
    ]
    assert main(argv) == 0
    rows = list(csv.reader(out.open(), delimiter="\t"))
    assert rows[0] == ["sent0", "sent1", "hard_neg"] and len(rows) == 1 + 2 * 6
    for _, positive, negative in rows[1:]:
        assert negative != positive and negative in SENTENCES[6:]
    assert "12 rows from 6 pairs; 6 of 6 anchors kept a negative" in capsys.readouterr().out
    assert main(argv) == 2  # the file is there now: replaced only with --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite", "--range-min", "9", "--range-max", "3"]) == 2
    assert "--range-min 9 / --range-max 3" in capsys.readouterr().err


# ------------------------------------------------------------------ against sentence-transformers
class _Vectors:
    """One fixed vector per text, given to both miners: sentcl's Embedder and the part of a
    SentenceTransformer that ``mine_hard_negatives`` calls (encode_query / encode_document, similarity)."""

    device = torch.device("cpu")

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def encode(self, sentences, **_):
        return np.stack([self.table[s] for s in sentences]).astype(np.float32)

    def encode_query(self, sentences, normalize_embeddings=False, **_):
        vectors = self.encode(sentences)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True) if normalize_embeddings else vectors

    encode_document = encode_query

    def similarity(self, a, b):
        from sentence_transformers.util import cos_sim

        return cos_sim(a, b)

    def similarity_pairwise(self, a, b):
        from sentence_transformers.util import pairwise_cos_sim

        return pairwise_cos_sim(a, b)


def _pairs(seed: int = 0) -> tuple[list[tuple[str, str]], list[str], _Vectors]:
    """300 anchors with one to three positives each (a positive is its anchor's vector plus noise, so
    positive scores spread around 0.7), some pairs repeated, 300 corpus sentences of which a third lie near
    some anchor: margins, ceilings and ranges all bite."""
    rng = np.random.default_rng(seed)
    table: dict[str, np.ndarray] = {}

    def text(vector: np.ndarray) -> str:
        name = f"s{len(table)}"
        table[name] = vector
        return name

    dim = 24
    pairs, anchors = [], []
    for _ in range(300):
        base = rng.normal(size=dim)
        anchor = text(base)
        anchors.append(base)
        for _ in range(int(rng.choice([1, 1, 1, 2, 3]))):
            pairs.append((anchor, text(base + rng.uniform(0.4, 1.2) * rng.normal(size=dim))))
    pairs += pairs[:15]  # the same pair twice counts as two pairs of that anchor, as theirs does
    corpus = [text(rng.normal(size=dim)) for _ in range(200)]
    corpus += [text(anchors[int(rng.integers(300))] + rng.normal(size=dim)) for _ in range(100)]
    return pairs, corpus, _Vectors(table)


GRID = [
    {},
    {"num_negatives": 1},
    {"range_min": 10, "range_max": 50, "num_negatives": 5},
    {"range_min": 10, "range_max": 50, "max_score": 0.8, "relative_margin": 0.05, "num_negatives": 5},
    {"range_min": 3, "absolute_margin": 0.02, "num_negatives": 3},
    {"range_max": 20, "relative_margin": 0.1, "min_score": 0.0, "num_negatives": 4},
    {"range_min": 5, "range_max": 30, "max_score": 0.5, "num_negatives": 2},
]


@pytest.mark.parametrize("settings", GRID, ids=[json.dumps(g) for g in GRID])
def test_the_same_negatives_as_sentence_transformers_on_identical_vectors(settings):
    datasets = pytest.importorskip("datasets")
    from sentence_transformers.util import mine_hard_negatives

    pairs, corpus, vectors = _pairs()
    theirs = mine_hard_negatives(
        datasets.Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [p for _, p in pairs]}),
        vectors, corpus=corpus, verbose=False, **settings,
    )  # fmt: skip
    ours = mine(vectors, pairs, MiningOptions(skip_near_duplicates=False, **settings), corpus)
    their_negatives: dict[str, list[str]] = {}
    first_positive: dict[str, str] = {}
    for row in theirs:
        first = first_positive.setdefault(row["anchor"], row["positive"])
        if row["positive"] == first:
            their_negatives.setdefault(row["anchor"], []).append(row["negative"])
    anchors = list(ours.negatives)
    same = sum(ours.negatives[a] == their_negatives.get(a, []) for a in anchors) / len(anchors)
    print(f"{settings}: {same:.1%} of {len(anchors)} anchors the same, {len(ours.rows)} rows")
    assert same >= 0.99 and ours.rows
    filters = {k: v for k, v in settings.items() if k.endswith(("margin", "score"))}
    if filters:  # the filters bite: without them a tenth of the anchors or more get other negatives
        plain = mine(
            vectors,
            pairs,
            MiningOptions(
                skip_near_duplicates=False, **{k: v for k, v in settings.items() if k not in filters}
            ),
            corpus,
        )
        changed = sum(plain.negatives[a] != ours.negatives[a] for a in anchors) / len(anchors)
        assert changed > 0.1, changed
    rows = [(r["anchor"], r["positive"], r["negative"]) for r in theirs]
    assert len(ours.rows) == len(rows)
    assert sum(a == b for a, b in zip(ours.rows, rows, strict=True)) >= 0.99 * len(rows)
