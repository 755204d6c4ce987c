"""The one interface evaluation, analysis and post-processing depend on: texts → vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Return one row per sentence, shape [N, D]."""
        ...
