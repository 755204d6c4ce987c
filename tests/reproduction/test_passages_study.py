"""The passages study harness on a tiny model and a small BEIR folder: every setting measured, the report's
tables and verdicts written from the measurements, a finished model read back, a missing run listed."""

import json

import yaml

from sentcl_reproduction import passages_study
from tests.evaluation.test_local import write_beir


def test_the_study_reports_every_setting_and_reads_a_finished_model_back(
    tmp_path, tiny_model_dir, monkeypatch
):
    folder = write_beir(tmp_path / "beir", n_docs=40, n_queries=12)
    corpus = folder / "corpus.jsonl"  # long documents: every text repeated past the tiny model's 64 tokens
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    corpus.write_text("".join(json.dumps(r | {"text": " ".join([r["text"]] * 12)}) + "\n" for r in rows))
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "out"), "report": str(tmp_path / "report.md"),
        "qrels": str(folder / "qrels" / "test.tsv"), "dtype": "fp32", "batch_size": 16,
        "models": {"tiny": str(tiny_model_dir), "later": str(tmp_path / "missing")},
    }))  # fmt: skip
    assert passages_study.main([str(plan)]) == 0
    report = (tmp_path / "report.md").read_text()
    kept = json.loads((tmp_path / "out" / "tiny.json").read_text())
    settings = kept["settings"]
    assert settings["max"]["texts"] > settings["truncated"]["texts"] == 40
    assert settings["max"]["documents_split"] == 40 and settings["first"]["encode_seconds"] is None
    ndcg = settings["max"]["metrics"]["ndcg@10"]
    assert f"| max | {ndcg:.2f} |" in report
    assert report.count("| max passages, dense |") == 1 and "| first passages, dense |" in report
    assert "Not measured: later (" in report
    calls = []
    monkeypatch.setattr(passages_study, "load_encoder", lambda *a, **k: calls.append(a))
    assert passages_study.main([str(plan)]) == 0  # read back, nothing loaded or encoded
    assert calls == [] and (tmp_path / "report.md").read_text() == report
