"""Vectors as Arrow columns: the fixed-size-list column that encoded shards (sentcl/integrations/ray_data.py)
and lance tables (sentcl/search/lance_index.py) hold, and back. pyarrow is an optional dependency (the
``ray`` and ``lance`` extras); the caller names what needs it."""

from __future__ import annotations

from typing import Any

import numpy as np

from sentcl.extras import require


def vector_column(matrix: np.ndarray, extra: str, needed_by: str) -> Any:
    """A [rows, D] matrix as a fixed-size-list column of D."""
    pa = require("pyarrow", extra, needed_by)
    matrix = np.ascontiguousarray(matrix)
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])


def column_matrix(column: Any) -> np.ndarray:
    """Such a column (an array or a chunked array) back as a [rows, D] matrix."""
    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    return column.values.to_numpy(zero_copy_only=False).reshape(len(column), column.type.list_size)
