"""The judgements' learning curve on a tiny domain: nested sizes × negatives × seeds and the label-free row,
reported against the start, BM25 and the start's hybrid; a second run reads every run back."""

import yaml

from sentcl_reproduction import judgement_curve

from ..training.test_adapt import domain as domain  # the tiny BEIR folder fixture


def test_a_tiny_curve_reports_its_verdicts_and_resumes(tmp_path, tiny_model_dir, domain, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    student = tmp_path / "student.yaml"
    student.write_text(yaml.safe_dump({
        "model": {"name_or_path": "unused", "architecture": "static", "static_dim": 8},
        "data": {"train_file": str(domain), "corpus_unit": "sentence", "max_length": 16, "n_views": 1},
        "objective": {"name": "distillation", "teacher": "unused", "contrastive_weight": 0.0,
                      "embedding_loss": "cosine", "listwise": "listnet"},
        "training": {"output_dir": "unused", "batch_size": 4, "learning_rate": 1e-2, "max_steps": 2,
                     "eval_steps": 0},
    }))  # fmt: skip
    plan = {
        "output_dir": str(tmp_path / "curve"), "report": str(tmp_path / "curve.md"),
        "start": str(tiny_model_dir),
        "corpus": str(domain), "train": str(domain / "qrels" / "train.tsv"),
        "report_qrels": str(domain / "qrels" / "test.tsv"), "sizes": [4, "all"], "negatives": [0, 1],
        "seeds": [1, 2], "label_free_first": {"method": "cropping", "steps": 1},
        "settings": {"steps": 2, "eval_steps": 2, "batch_size": 4, "learning_rate": 1e-3, "pooler": "avg"},
        "student": str(student),
        "recipe_checks": [{"name": "longer", "label": "4 steps", "steps": 4, "eval_steps": 2, "seeds": [2]}],
    }  # fmt: skip
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    assert judgement_curve.main([str(path), "--seeds", "1"]) == 0  # a part: said so
    report = (tmp_path / "curve.md").read_text()
    assert "**Partial**: not reported yet:" in report and "seed 2" in report
    assert "static student of all, hard negatives seed 2" in report  # its teacher's seed 2 not run yet
    assert "all, hard negatives, 4 steps seed 2" in report
    assert judgement_curve.main([str(path)]) == 0
    report = (tmp_path / "curve.md").read_text()
    assert "Partial" not in report and (tmp_path / "images" / "curve.png").is_file()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "row" not in line]
    assert len(rows) == 7 and rows[-3].startswith("| cropping then supervised, all, hard negatives | 5 |")
    assert rows[-2].startswith("| all, hard negatives, 4 steps | 5 |")  # a recipe check, on its seed
    checked = yaml.safe_load((tmp_path / "curve" / "all-hard-longer" / "seed-2" / "config.yaml").read_text())
    assert (
        checked["training"]["max_steps"] == 4
        and not (tmp_path / "curve" / "all-hard-longer" / "seed-1").exists()
    )
    assert rows[-1].startswith("| static student of all, hard negatives | 5 |")
    assert all(row.count("|") == rows[0].count("|") for row in rows)
    for words in (
        "- 4, in-batch beats the start:",
        "- hard negatives help at 4:",
        "- label-free first helps",
        "- recipe check, all, hard negatives, 4 steps − all, hard negatives:",
        "- the hybrid of BM25 and the static student of all, hard negatives reaches the start",
        "Documents/s encoding 30 of the domain's documents on",
    ):
        assert words in report
    trained = []
    monkeypatch.setattr(judgement_curve, "adapt", lambda request: trained.append(request))
    monkeypatch.setattr(judgement_curve, "student", lambda *args: trained.append(args))
    assert judgement_curve.main([str(path)]) == 0 and not trained  # every run read back
    assert (tmp_path / "curve.md").read_text() == report  # the speeds too: measured once, kept
