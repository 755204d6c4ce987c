"""`sentcl evaluate --seeds` and `--against`: the intervals of the reproduction's leaderboard on the user's
own comparisons (evaluation/significance.py computes them; these tests check what the command passes on)."""

import json

import pytest
import torch

from sentcl.cli.main import main
from sentcl.model import SentenceEncoder


def seeds_folder(root, tiny_model_dir, scale, seeds=(1, 2, 3)):
    """A folder laid out as `sentcl train --seeds` writes it: seed-N/ holding a model, here the tiny model
    with noise of the given scale (seeded) added to every weight."""
    for seed in seeds:
        encoder = SentenceEncoder.load(str(tiny_model_dir))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in encoder.parameters():
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
        encoder.save(root / f"seed-{seed}")
    return root


def test_seeds_give_every_metric_its_interval_and_against_compares_on_the_pairs(
    tmp_path, tiny_model_dir, stsb_data_dir, capsys
):
    ours = seeds_folder(tmp_path / "ours", tiny_model_dir, 0.001)
    theirs = seeds_folder(tmp_path / "theirs", tiny_model_dir, 0.5, seeds=(4, 5, 6))
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(ours), "--seeds", "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
    assert main([*argv, "--against", str(theirs), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 models, mean ± std [95 % interval" in printed and "(n=3)" in printed
    payload = json.loads(out.read_text())
    per_model = [m["metrics"]["stsb_dev_spearman"] for m in payload["models"]]
    summary = payload["summary"]["stsb_dev_spearman"]
    assert summary["mean"] == pytest.approx(sum(per_model) / 3) and summary["low"] < summary["high"]
    comparison = payload["comparison"]["stsb_dev_spearman"]
    assert set(comparison) == {"difference", "told_apart", "models", "pairs"}  # stsb-dev kept its pairs
    theirs_mean = sum(m["metrics"]["stsb_dev_spearman"] for m in payload["against_models"]) / 3
    assert comparison["difference"] == pytest.approx(summary["mean"] - theirs_mean)
    assert comparison["pairs"][0] <= comparison["pairs"][1]
    assert f"{ours} minus {theirs}" in printed


def test_a_model_against_itself_is_not_told_apart(tmp_path, tiny_model_dir, stsb_data_dir, capsys):
    argv = ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
    assert main([*argv, "--against", str(tiny_model_dir)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("stsb_dev_spearman"))
    assert "+0.00" in line and "pairs +0.00 [+0.00, +0.00]" in line and line.endswith("not distinguishable")


def test_seeds_of_a_folder_without_seed_folders_is_one_clear_error(tmp_path, tiny_model_dir, capsys):
    assert main(["evaluate", str(tiny_model_dir), "--seeds", "--tasks", "stsb-dev"]) == 2
    assert "holds no seed-N folders (sentcl train --seeds writes them)" in capsys.readouterr().err


def test_seeds_that_name_no_model_or_models_of_other_kinds_are_one_line(
    tmp_path, tiny_model_dir, stsb_data_dir, capsys
):
    """Issue 55: ``",,,"`` printed "0 models" and exited 0; a transformer and a static model of other
    dimensions were averaged (49.91 ± 64.07)."""
    from sentcl.model import StaticEncoder
    from sentcl.model.encoder import ModelConfig

    argv = ["--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
    assert main(["evaluate", ",,,", "--seeds", *argv]) == 2
    assert "--seeds: ',,,' names no model" in capsys.readouterr().err
    static = StaticEncoder.from_config(
        ModelConfig(str(tiny_model_dir), architecture="static", static_dim=8, static_init="random")
    ).save(tmp_path / "static")
    assert main(["evaluate", f"{tiny_model_dir},{static}", "--seeds", *argv]) == 2
    err = capsys.readouterr().err
    assert "the runs of one set are one kind of model" in err and "Traceback" not in err


def test_the_seed_layout_is_read_where_it_is_written(tmp_path):
    """One library function reads what train_seeds writes, in the seeds' order (2 before 10)."""
    from sentcl.training.seeds import seed_folder, seed_folders

    for seed in (10, 2, 1):
        seed_folder(tmp_path, seed).mkdir()
    (tmp_path / "seed-x").mkdir()  # not a seed's folder
    assert seed_folders(tmp_path) == [tmp_path / "seed-1", tmp_path / "seed-2", tmp_path / "seed-10"]


def test_against_on_a_retrieval_folder_resamples_its_queries(tmp_path, tiny_model_dir, capsys):
    """--against on a BEIR folder: the per-query nDCG@10 of both models, resampled by query (issue 56)."""
    from tests.evaluation.test_local import write_beir

    folder = write_beir(tmp_path / "mybeir", n_docs=60, n_queries=20)
    noisy = seeds_folder(tmp_path / "noisy", tiny_model_dir, 0.5, seeds=(1,))
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(tiny_model_dir), "--tasks", str(folder), "--against", str(noisy / "seed-1")]
    assert main([*argv, "--json", str(out)]) == 0
    comparison = json.loads(out.read_text())["comparison"]["mybeir_ndcg@10"]
    assert "queries" in comparison and comparison["queries"][0] <= comparison["queries"][1]
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("mybeir_ndcg@10"))
    assert "queries " in line
