"""Quantized embeddings: the codes are sentence-transformers' (quantize_embeddings) bit for bit, and a binary
index rescored with int8 codes finds what the float index finds."""

import numpy as np
import pytest
from sentence_transformers.util.quantization import quantize_embeddings

from sentcl.cli.main import main
from sentcl.search import IndexFolderError, SentenceIndex
from sentcl.search.quantization import QuantizationError, dequantize_int8, int8_ranges, quantize
from tests.conftest import SENTENCES


def clustered(n=600, dim=32, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, dim))
    return (centres[rng.integers(0, 12, n)] + 0.6 * rng.normal(size=(n, dim))).astype(np.float32)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_codes_are_sentence_transformers_codes(precision):
    vectors, calibration = clustered(200, seed=1), clustered(300, seed=2)
    ours = quantize(vectors, precision, int8_ranges(calibration) if "int8" in precision else None)
    theirs = quantize_embeddings(vectors, precision, calibration_embeddings=calibration)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    if "int8" in precision:  # without calibration: the vectors' own ranges, as theirs
        np.testing.assert_array_equal(quantize(vectors, precision), quantize_embeddings(vectors, precision))


def test_int8_round_trip_is_within_half_a_bucket():
    vectors = clustered(300)
    ranges = int8_ranges(vectors)
    back = dequantize_int8(quantize(vectors, "int8", ranges), ranges)
    step = (ranges[1] - ranges[0]) / 255
    assert np.all(np.abs(back - vectors) <= step / 2 + 1e-5)
    with pytest.raises(QuantizationError, match=r"ranges of shape \(2, 3\) for 32-dim"):
        quantize(vectors, "int8", np.zeros((2, 3)))
    with pytest.raises(QuantizationError, match="at least two calibration vectors"):
        int8_ranges(vectors[:1])


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_binary_index_rescored_with_int8_finds_what_flat_finds(tmp_path):
    rng = np.random.default_rng(3)
    corpus = rng.normal(size=(600, 64)).astype(np.float32)
    queries = corpus[:50] + 0.5 * rng.normal(size=(50, 64)).astype(np.float32)  # each near one document
    texts = [f"t{i}" for i in range(len(corpus))]
    flat = SentenceIndex.build(corpus, texts, "flat")
    binary = SentenceIndex.build(corpus, texts, "binary")
    assert binary.index.d == 64 and binary.rescore[0].dtype == np.int8
    found = binary.search(queries, top_k=10)
    assert (
        [row[0].id for row in found]
        == [row[0].id for row in flat.search(queries, top_k=1)]
        == list(range(50))
    )
    # with every document rescored, the ranking is the int8 codes' cosine ranking
    binary.rescore_multiplier = len(corpus)
    codes, ranges = binary.rescore
    cosine = unit(queries) @ unit(dequantize_int8(codes, ranges)).T
    for row, hits in zip(cosine, binary.search(queries, top_k=5), strict=True):
        assert [h.id for h in hits] == list(np.argsort(-row, kind="stable")[:5])
        np.testing.assert_allclose([h.score for h in hits], np.sort(row)[::-1][:5], atol=1e-5)
    binary.rescore_multiplier = 4
    binary.save(tmp_path / "idx")
    loaded = SentenceIndex.load(tmp_path / "idx")
    assert loaded.kind == "binary" and isinstance(loaded.rescore[0], np.memmap)
    assert [[h.id for h in r] for r in loaded.search(queries, 10)] == [[h.id for h in r] for r in found]
    with (tmp_path / "idx" / "rescore_int8.npy").open("r+b") as handle:
        handle.seek(-1, 2)
        handle.write(b"\x01")
    with pytest.raises(IndexFolderError, match=r"rescore_int8\.npy: does not match index\.json"):
        SentenceIndex.load(tmp_path / "idx")


def test_a_binary_index_needs_whole_bytes():
    with pytest.raises(ValueError, match="12 is not a multiple of 8"):
        SentenceIndex.build(clustered(20, dim=12), [str(i) for i in range(20)], "binary")


def test_encode_precision_and_binary_index_from_the_cli(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    calibration = tmp_path / "cal.txt"
    calibration.write_text("\n".join(reversed(SENTENCES)) + "\nanother sentence here\n")
    common = ["encode", str(tiny_model_dir), str(corpus), "--dtype", "fp32"]
    assert main([*common, "--out", str(tmp_path / "f.npy")]) == 0
    assert main([*common, "--out", str(tmp_path / "q.npy"), "--precision", "int8", "--calibration",
                 str(calibration), "--save-ranges", str(tmp_path / "r.npy")]) == 0  # fmt: skip
    floats, codes, ranges = (np.load(tmp_path / f) for f in ("f.npy", "q.npy", "r.npy"))
    assert codes.dtype == np.int8 and ranges.shape == (2, floats.shape[1])
    np.testing.assert_array_equal(codes, quantize_embeddings(floats, "int8", ranges=ranges))
    assert main([*common, "--out", str(tmp_path / "q2.npy"), "--precision", "int8", "--ranges",
                 str(tmp_path / "r.npy")]) == 0  # fmt: skip
    np.testing.assert_array_equal(np.load(tmp_path / "q2.npy"), codes)
    assert main([*common, "--out", str(tmp_path / "b.npy"), "--precision", "ubinary"]) == 0
    assert np.load(tmp_path / "b.npy").shape == (len(SENTENCES), floats.shape[1] // 8)
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "x.npy"), "--ranges", str(tmp_path / "r.npy")]) == 2
    assert "for --precision int8/uint8, not float32" in capsys.readouterr().err
    np.save(tmp_path / "bad.npy", np.zeros((3, 4)))
    assert main([*common, "--out", str(tmp_path / "x.npy"), "--precision", "int8", "--ranges",
                 str(tmp_path / "bad.npy")]) == 2  # fmt: skip
    assert "[2, D] finite ranges" in capsys.readouterr().err and not (tmp_path / "x.npy").exists()
    assert (
        main(["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "idx"), "--kind", "binary"])
        == 0
    )
    assert main(["search", str(tmp_path / "idx"), SENTENCES[0], "-k", "1"]) == 0
    assert SENTENCES[0] in capsys.readouterr().out
