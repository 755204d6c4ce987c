"""Every saved model/ gets a model card with the recipe, the paper, the results, the geometry and how to
load it; sentcl evaluate --json results merge into it."""

import json

import pytest
from sentence_transformers import SentenceTransformer

from sentcl.cli.main import main
from sentcl.training import train
from sentcl.training.model_card import read_card_data
from tests.training.test_contrastive import recipe, wiki_file  # noqa: F401 - the fixture


def test_a_trained_model_carries_its_card(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):  # noqa: F811
    result = train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir))
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nlibrary_name: sentence-transformers\n")  # the Hub's front matter
    assert "Gao, Yao & Chen, SimCSE" in card and "objective `simcse`, pooler `cls`" in card
    best = result.best_metrics["stsb_dev_spearman"]
    before = result.initial_metrics["stsb_dev_spearman"]
    assert f"| stsb_dev_spearman | {before:.2f} | {best:.2f} |" in card
    assert f"kept model (step {result.best_step})" in card
    assert "## Geometry at the kept step" in card and "| align |" in card
    assert 'SentenceTransformer("PATH")' in card and "learning_rate: 0.001" in card
    data = read_card_data(tmp_path / "run" / "model")
    assert data["summary"]["best_step"] == result.best_step and data["evaluations"] == []
    SentenceTransformer(str(tmp_path / "run" / "model"))  # a README does not disturb loading


def test_evaluate_results_merge_into_the_card(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, capsys):  # noqa: F811
    train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, eval_at_start=False))
    results = tmp_path / "scores.json"
    model = str(tmp_path / "run" / "model")
    assert main(["evaluate", model, "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir),
                 "--json", str(results)]) == 0  # fmt: skip
    assert main(["card", str(tmp_path / "run"), "--add", str(results)]) == 0
    assert main(["card", model, "--add", str(results)]) == 0  # the same file again replaces its entry
    card = (tmp_path / "run" / "model" / "README.md").read_text(encoding="utf-8")
    score = json.loads(results.read_text())["metrics"]["stsb_dev_spearman"]
    assert (
        card.count("`sentcl evaluate` (scores.json") == 1 and f"| stsb_dev_spearman | {score:.2f} |" in card
    )
    assert len(read_card_data(model)["evaluations"]) == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    capsys.readouterr()
    assert main(["card", model, "--add", str(bad)]) == 2
    assert "not the output of sentcl evaluate --json" in capsys.readouterr().err


def test_no_card_no_merge(tmp_path, tiny_model_dir, capsys):
    results = tmp_path / "scores.json"
    results.write_text('{"metrics": {"a": 1}}')
    assert main(["card", str(tiny_model_dir), "--add", str(results)]) == 2
    assert "no sentcl model card" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["card", str(tiny_model_dir)])
