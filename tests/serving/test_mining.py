"""Hard-negative mining on vectors whose ranking is known: the rank range, the margins, the score ceiling,
every positive of an anchor and near-duplicates left out; and `sentcl mine` from the CLI."""

import csv
import json

import numpy as np
import pytest

from sentcl.cli.main import main
from sentcl.serving.mining import MiningError, MiningOptions, mine
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
    assert mined.positive_scores == [pytest.approx(0.9)] and mined.without == 0
    assert negatives(MiningOptions(range_min=1, range_max=3, num_negatives=2))[0] == ["n2", "n3"]


def test_every_positive_of_an_anchor_is_excluded():
    mined = mine(Table(SCORES), PAIRS, MiningOptions(), [*CORPUS, "other positive"])
    assert [(p, n) for _, p, n in mined.rows] == [
        ("positive", "other positive"),
        ("near positive", "other positive"),
    ]
    assert all(n not in ("positive", "near positive", "POSITIVE ") for _, _, n in mined.rows)


def test_margins_and_the_score_ceiling():
    assert negatives(MiningOptions(absolute_margin=0.05, num_negatives=2))[0] == ["n2", "n3"]  # ≤ 0.85
    assert negatives(MiningOptions(relative_margin=0.3, num_negatives=2))[0] == ["n4", "n5"]  # ≤ 0.63
    assert negatives(MiningOptions(max_score=0.75))[0] == ["n3"]
    found, mined = negatives(MiningOptions(range_max=2, max_score=0.1))
    assert found == [] and mined.without == 1


def test_random_sampling_is_seeded_and_stays_in_the_range():
    first = negatives(MiningOptions(range_max=5, num_negatives=2, sampling="random", seed=3))[0]
    again = negatives(MiningOptions(range_max=5, num_negatives=2, sampling="random", seed=3))[0]
    assert first == again and set(first) <= {"n1", "n2", "n3", "n4", "n5"} and len(set(first)) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (MiningOptions(range_min=5, range_max=5), r"--range-min 5 / --range-max 5"),
        (MiningOptions(range_max=3, num_negatives=4), r"--num-negatives 4: between 1 and the 3"),
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
    assert "12 rows for 6 of 6 pairs" in capsys.readouterr().out
    assert main(argv) == 2  # the file is there now: replaced only with --overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite", "--range-min", "9", "--range-max", "3"]) == 2
    assert "--range-min 9 / --range-max 3" in capsys.readouterr().err
