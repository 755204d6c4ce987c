import io
import json

import numpy as np

from sentcl import finite_json


def test_non_finite_numbers_become_null_and_the_output_parses_as_strict_json():
    value = {"spearman": float("nan"), "scores": [1.0, float("inf"), np.float64("-inf")], "n": 3, "ok": "x"}
    handle = io.StringIO()
    finite_json.dump(value, handle)
    text = handle.getvalue()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name))) == {
        "spearman": None, "scores": [1.0, None, None], "n": 3, "ok": "x",
    }  # fmt: skip
