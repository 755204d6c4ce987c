"""Embedding quantization: fewer bytes per vector, as sentence-transformers' ``quantize_embeddings`` makes
them (tests/search/test_quantization.py checks the codes are identical).

* ``int8`` / ``uint8``: each dimension's calibrated range [min, max] cut into 256 buckets, a vector's value
  replaced by its bucket (``floor((x − min) / step)``, clipped; int8 is the bucket − 128). 4× smaller than
  float32. The ranges come from calibration vectors (a sample of the corpus); without them, from the vectors
  being quantized.
* ``ubinary`` / ``binary``: one bit per dimension, ``x > 0``, packed 8 to a byte (binary is the byte − 128
  as int8). 32× smaller; compared by Hamming distance, and rescored with the float query against int8 codes
  (search/index.py, kind ``binary``).
"""

from __future__ import annotations

import numpy as np

from sentcl.errors import UserError

EMBEDDING_PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


class QuantizationError(UserError, ValueError):
    """A precision, ranges or calibration that cannot quantize these vectors."""


def int8_ranges(calibration: np.ndarray) -> np.ndarray:
    """[2, D]: each dimension's minimum and maximum over ``calibration`` [N, D] (N ≥ 2)."""
    calibration = np.asarray(calibration, dtype=np.float32)
    if calibration.ndim != 2 or len(calibration) < 2:
        raise QuantizationError("int8 ranges need at least two calibration vectors")
    return np.vstack((calibration.min(axis=0), calibration.max(axis=0)))


def _steps(ranges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = ranges[0].astype(np.float32)
    steps = (ranges[1].astype(np.float32) - starts) / 255
    return starts, np.where(steps == 0, 1, steps).astype(np.float32)


def quantize(vectors: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """``vectors`` [N, D] float → codes in ``precision`` (``EMBEDDING_PRECISIONS``); int8 / uint8 use
    ``ranges`` [2, D] (default: the vectors' own, from at least two of them)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if precision not in EMBEDDING_PRECISIONS:
        raise QuantizationError(f"precision {precision!r} is not one of {', '.join(EMBEDDING_PRECISIONS)}")
    if precision == "float32":
        return vectors
    if precision.endswith("binary"):
        bits = np.packbits(vectors > 0, axis=-1)
        return (bits.astype(np.int16) - 128).astype(np.int8) if precision == "binary" else bits
    ranges = int8_ranges(vectors) if ranges is None else np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, vectors.shape[1]):
        raise QuantizationError(
            f"ranges of shape {ranges.shape} for {vectors.shape[1]}-dim vectors; [2, D] needed"
        )
    starts, steps = _steps(ranges)
    buckets = np.clip(np.floor((vectors - starts) / steps), 0, 255)
    return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)


def dequantize_int8(codes: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """int8 codes → float32 at their buckets' centres (what rescoring compares a float query with)."""
    starts, steps = _steps(np.asarray(ranges, dtype=np.float32))
    return starts + (codes.astype(np.float32) + 128.5) * steps


def bytes_per_vector(precision: str, dimension: int) -> int:
    if precision == "float32":
        return 4 * dimension
    return dimension if precision.endswith("int8") else (dimension + 7) // 8
