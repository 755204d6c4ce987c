import json

from sentcl.training.metrics_log import MetricsLog


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_resume_keeps_the_history_on_disk_before_the_first_new_line(tmp_path):
    """A kill right after a resume must not leave an empty or shortened log."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 11)))
    log = MetricsLog(path, resume_step=6)
    assert [r["step"] for r in lines(path)] == [1, 2, 3, 4, 5, 6]  # on disk now, not in a buffer
    log.write({"step": 7, "loss": 0.5})
    assert [r["step"] for r in lines(path)] == [1, 2, 3, 4, 5, 6, 7]
    log.close()


def test_a_torn_last_line_is_dropped_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}) + "\n" + '{"step": 3, "lo')
    MetricsLog(path, resume_step=5).close()
    assert [r["step"] for r in lines(path)] == [1, 2]


def test_non_finite_numbers_are_written_as_null_so_every_line_is_json(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    log.write({"step": 1, "eval": {"stsb_dev_spearman": float("nan"), "x": [float("inf"), 1.0]}})
    log.close()
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert lines(path) == [{"step": 1, "eval": {"stsb_dev_spearman": None, "x": [None, 1.0]}}]
