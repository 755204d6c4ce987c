"""JSON that is JSON: Python writes NaN and Infinity as bare tokens no JSON parser accepts. Every JSON file
sentcl writes goes through :func:`finite`, which writes a non-finite number as ``null``."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dump(value: Any, handle, **options) -> None:
    json.dump(finite(value), handle, allow_nan=False, **options)


def dumps(value: Any, **options) -> str:
    return json.dumps(finite(value), allow_nan=False, **options)
