"""Static students on a tiny domain: the teacher chosen on the choice judgements among the study's finished
methods, a student per seed from it and from the start, the report on the test judgements with intervals and
a speed column; a second run reads every student back."""

import json
from pathlib import Path

import pytest
import yaml

from sentcl_reproduction import domain_student, domain_study

from ..training.test_adapt import domain as domain  # the tiny BEIR folder fixture


@pytest.fixture
def tiny_study(tmp_path, tiny_model_dir, domain, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    plan = {
        "output_dir": str(tmp_path / "study"), "report": str(tmp_path / "domain_study.md"),
        "corpus": str(domain), "choose": str(domain / "qrels" / "train.tsv"),
        "report_qrels": str(domain / "qrels" / "test.tsv"),
        "starts": {"tiny": {"model": str(tiny_model_dir)}},
        "methods": {"contrastive_tension": {}, "simcse": {}},
        "learning_rates": [1e-3], "seeds": [1, 2],
        "settings": {"steps": 2, "eval_steps": 1, "batch_size": 4, "pooler": "avg"},
    }  # fmt: skip
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    assert domain_study.main([str(path), "--method", "simcse"]) == 0  # one method finished, one not
    return path


def test_static_students_of_the_chosen_teacher_and_of_the_start(tmp_path, tiny_study, tiny_model_dir):
    study = yaml.safe_load(tiny_study.read_text())
    recipe = tmp_path / "student.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"name_or_path": "unused", "architecture": "static", "static_dim": 8},
        "data": {"train_file": study["corpus"], "corpus_unit": "sentence",
                 "max_length": 16, "n_views": 1},
        "objective": {"name": "distillation", "teacher": "unused", "contrastive_weight": 0.0,
                      "embedding_loss": "cosine", "listwise": "listnet"},
        "training": {"output_dir": "unused", "batch_size": 4, "learning_rate": 1e-2, "max_steps": 4,
                     "eval_steps": 2, "eval_at_start": True,
                     "eval_task": study["choose"]},
    }))  # fmt: skip
    plan = domain_study.Plan.load(tiny_study)
    assert domain_student.teacher_method(plan, "tiny")[:2] == ("simcse", 1e-3)  # CT has not run
    out = tmp_path / "students.md"
    args = [str(tiny_study), "--start", "tiny", "--recipe", str(recipe), "--out", str(out)]
    assert domain_student.main(args) == 0
    text = out.read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in table[1:]] == [
        "| tiny",
        "| simcse (adapted)",
        "| static student of tiny",
        "| static student of simcse",
    ]
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert "The static student of simcse − the static student of tiny: " in text
    assert (
        "Teacher: `simcse` at lr 0.001 from tiny" in text
        and (tmp_path / "students.png").stat().st_size > 1000
    )
    points = json.loads((tmp_path / "students.json").read_text())
    assert [len(p["ndcg"]) for p in points] == [1, 2, 2, 2] and all(p["per_second"] > 0 for p in points)
    students = sorted((tmp_path / "study" / "tiny" / "static students").rglob("summary.json"))
    assert len(students) == 4
    stamps = [s.stat().st_mtime_ns for s in students]
    assert domain_student.main(args) == 0  # every student read back, none trained again
    assert [s.stat().st_mtime_ns for s in students] == stamps
    with pytest.raises(SystemExit, match="--start other: not in the plan, which has: tiny"):
        domain_student.main([*args[:1], "--start", "other", *args[3:]])
    with pytest.raises(SystemExit, match="--teacher contrastive_tension: not every seed of it is finished"):
        domain_student.main([*args, "--teacher", "contrastive_tension"])
    with pytest.raises(SystemExit, match="--teacher nope: not in the plan"):
        domain_student.main([*args, "--teacher", "nope"])
    assert domain_student.main([*args, "--teacher", "simcse"]) == 0  # named: the same runs, said so
    assert (
        "Teacher: `simcse` at lr 0.001 from tiny, named by --teacher (mean choice nDCG@10 " in out.read_text()
    )
    assert [s.stat().st_mtime_ns for s in students] == stamps


def test_a_teacher_whose_weights_were_not_kept_is_trained_again(tmp_path, tiny_study):
    plan = domain_study.Plan.load(tiny_study)
    kept = domain_study.run_folder(plan, "tiny", "simcse", 1e-3, 1) / "model"
    assert domain_student.teacher_model(plan, "tiny", "simcse", 1e-3, 1, tmp_path / "s") == str(kept)
    for weights in kept.glob("*.safetensors"):  # a study brought back from another machine without weights
        weights.unlink()
    again = Path(domain_student.teacher_model(plan, "tiny", "simcse", 1e-3, 1, tmp_path / "s"))
    assert again == tmp_path / "s" / "teacher simcse lr-0.001 seed-1" / "model"
    assert any(again.glob("*.safetensors"))
    first, second = (
        json.loads((folder / "adapt.json").read_text()) for folder in (kept.parent, again.parent)
    )
    assert second["metrics"] == first["metrics"]  # the same run, the same numbers
