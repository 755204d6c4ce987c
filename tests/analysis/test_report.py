import json

import numpy as np
import pytest

from sentcl.analysis.report import analyze, read_trajectory, write_report
from sentcl.model import SentenceEncoder


def test_report_has_table_figures_and_bound_statement(tmp_path, tiny_model_dir, stsb_data_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir))
    analysis = analyze("tiny", encoder, stsb_data_dir)
    assert -100 <= analysis.spearman <= 100 and analysis.align >= 0 and analysis.uniform <= 0
    assert analysis.singular_values[0] == pytest.approx(1.0)
    report = write_report([analysis], tmp_path / "out")
    text = report.read_text()
    assert "| tiny |" in text and "Sum(WWᵀ)" in text
    for name in ("alignment_uniformity.png", "singular_values.png", "cosine_density.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["tiny"]["align"] == pytest.approx(analysis.align)


def test_read_trajectory_from_metrics_log(tmp_path):
    lines = [
        {"step": 0, "eval": {}, "geometry": {"align": 0.1, "uniform": -1.0}},
        {"step": 5, "loss": 1.0},
        {"step": 10, "eval": {}, "geometry": {"align": 0.2, "uniform": -2.0}},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    assert read_trajectory(tmp_path) == [(0, 0.1, -1.0), (10, 0.2, -2.0)]
    assert read_trajectory(tmp_path / "absent") == []
    assert np.isfinite(read_trajectory(tmp_path)[0][1])
