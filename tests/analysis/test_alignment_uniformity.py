import itertools

import numpy as np
import pytest

from sentcl.analysis.alignment_uniformity import (
    align_uniform,
    alignment,
    pair_file_probe,
    stsb_probe,
    uniformity,
)
from tests.conftest import write_stsb


def direct_uniformity(x, t=2.0):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    values = [np.exp(-t * np.sum((u[i] - u[j]) ** 2)) for i, j in itertools.combinations(range(len(u)), 2)]
    return float(np.log(np.mean(values)))


@pytest.mark.parametrize("chunk", [1, 3, 7, 1024])
def test_uniformity_equals_direct_pairwise_computation(chunk):
    x = np.random.default_rng(0).normal(size=(23, 5))
    assert uniformity(x, t=2.0, chunk=chunk) == pytest.approx(direct_uniformity(x), abs=1e-10)


def test_alignment_equals_direct_computation():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, 10, 4))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    v = y / np.linalg.norm(y, axis=1, keepdims=True)
    assert alignment(x, y, alpha=2) == pytest.approx(
        np.mean([np.sum((a - b) ** 2) for a, b in zip(u, v, strict=False)])
    )
    assert alignment(x, x) == pytest.approx(0.0)


def test_even_spread_is_more_uniform_than_clusters():
    angles = np.linspace(0, 2 * np.pi, 64, endpoint=False)
    circle = np.c_[np.cos(angles), np.sin(angles)]
    rng = np.random.default_rng(2)
    clustered = np.r_[rng.normal([1, 0], 0.05, size=(32, 2)), rng.normal([0, 1], 0.05, size=(32, 2))]
    assert uniformity(circle) < uniformity(clustered)


class Table:
    def __init__(self, table):
        self.table = table

    def encode(self, sentences):
        return np.array([self.table[s] for s in sentences], dtype=np.float32)


def test_stsb_probe_takes_pairs_above_four_and_all_sentences(tmp_path):
    rows = [(4.6, "a", "b"), (4.0, "c", "d"), (1.0, "a", "e")]
    write_stsb(tmp_path / "stsb" / "senteval", "dev", rows)
    probe = stsb_probe(tmp_path)
    assert (probe.positives1, probe.positives2) == (["a"], ["b"])
    assert probe.sentences == ["a", "b", "c", "d", "e"]
    vectors = {"a": (1, 0), "b": (0, 1), "c": (1, 1), "d": (-1, 0), "e": (0, -1)}
    result = align_uniform(Table(vectors), probe)
    assert result["align"] == pytest.approx(2.0)  # ‖(1,0) − (0,1)‖² = 2
    x = np.array([vectors[s] for s in probe.sentences], dtype=float)
    assert result["uniform"] == pytest.approx(direct_uniformity(x), abs=1e-6)


def test_pair_file_probe_and_its_errors(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("x\ty\nz\tw\n")
    probe = pair_file_probe(path)
    assert probe.positives1 == ["x", "z"] and probe.sentences == ["w", "x", "y", "z"]
    bad = tmp_path / "bad.tsv"
    bad.write_text("x\ty\nonly-one\n")
    with pytest.raises(ValueError, match=r"bad\.tsv:2"):
        pair_file_probe(bad)
