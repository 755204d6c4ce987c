"""`make bench`'s harness (benchmarks/bench.py): a part that fails is a row of the table with its error,
the rest is still reported, and --parts picks groups. The measurements are the bench's, not a test's."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module
    spec.loader.exec_module(module)
    return module


def synthetic_runs(bench) -> dict:
    runs = {name: [] for name in bench.PARTS}
    runs["ceiling"] = [{"gflops": 100.0, "dtype": "torch.float32"}]
    runs["flops"] = [{"flops": 2e11, "unpadded_flops": 1.5e11, "real_tokens": 3000, "padded_tokens": 4096}]
    rate = {"encode-sentcl": 50.0, "encode-sentcl-auto": 60.0, "encode-st": 45.0, "encode-st-bf16": 70.0}
    for name, value in rate.items():
        runs[name] = [
            {"sentences_per_s": value, "peak_rss_mb": 800.0, "stsb_dev": 86.7, "dtype": "auto",
             "chosen": "bf16", "gflop": 10.0, "ceiling_gflops": 100.0}
        ]  # fmt: skip
    return runs


def test_a_failed_part_is_a_row_with_its_error_and_the_rest_is_reported(bench):
    table = bench.report(synthetic_runs(bench), "cpu", 60.0, {"encode-st-openvino": "KeyError: 'model_type'"})
    assert "| sentcl fp32 | 50.0 | 1.11× | 800 |" in table
    assert "| `encode-st-openvino` | KeyError: 'model_type' |" in table
    assert "Fastest peer encode at equal quality" in table and "training with defaults" not in table


def test_the_top_help_is_timed_and_judged_against_its_target(bench):
    runs = synthetic_runs(bench) | {"cli-help": [{"seconds": 0.06, "runs": [0.06] * 5}]}
    assert "`sentcl --help`: 0.06 s (median of 5 fresh processes; target < 1 s: met)." in bench.report(
        runs, "cpu", 60.0
    )
    assert "cli-help" in bench.chosen_parts("encode")


def test_parts_pick_groups_and_refuse_unknown_names(bench):
    assert {"encode-st-onnx-int8", "ceiling", "flops"} <= bench.chosen_parts("encode")
    assert "train-st" not in bench.chosen_parts("encode,sts")
    assert "scale" in bench.chosen_parts("scale") and "scale" not in bench.chosen_parts("encode")
    with pytest.raises(SystemExit, match="choose from train, encode, sts, sts7, profile, students"):
        bench.chosen_parts("encod")


def test_the_students_table_gives_each_point_its_ratio_to_the_teacher(bench):
    spec = importlib.util.spec_from_file_location("students", ROOT / "benchmarks" / "students.py")
    students = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(students)
    row = {
        "stsb_dev": 80.0,
        "stsb_train": 75.0,
        "retrieval_ndcg10": 90.0,
        "bytes": 31_300_000,
        "train_seconds": 80,
        "seeds": 1,
    }
    seeds = {"seeds": 3, "stsb_dev_std": 0.25, "stsb_train_std": 0.5, "retrieval_ndcg10_std": 0.125}
    rows = {
        "teacher fp32": row | {"sentences_per_s": 300.0, "train_seconds": None},
        "static": row | seeds | {"sentences_per_s": 30_000.0},
    }
    text = students.table(rows, "a machine")
    assert (
        "| static | 3 | 80.00 ± 0.25 | 75.00 ± 0.50 | 90.00 ± 0.12 | 30,000.0 | 100.00× | 31.3 MB | 80 s |"
        in text
    )
    assert "| teacher fp32 | 1 | 80.00 | 75.00 | 90.00 | 300.0 | 1.00× | 31.3 MB |  |" in text


def test_the_students_group_is_a_section_or_one_line_with_its_error(bench, tmp_path, monkeypatch):
    import subprocess
    from types import SimpleNamespace

    def fails(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "Traceback …\nValueError: no teacher\n")

    monkeypatch.setattr(bench.subprocess, "run", fails)
    args = SimpleNamespace(out=str(tmp_path / "table.md"))
    assert bench.students_section(args) == "students: FAILED: ValueError: no teacher\n"

    def writes(command, **kwargs):
        (tmp_path / "students.md").write_text("| point |\n", encoding="utf-8")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(bench.subprocess, "run", writes)
    assert bench.students_section(args).startswith("| point |\n")
