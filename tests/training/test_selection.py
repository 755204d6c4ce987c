import json

import numpy as np
import pytest

from sentcl.config import ConfigError
from sentcl.data import Records
from sentcl.training import recipe_from_dict, train
from sentcl.training.selection import Selection, hold_out, selection
from tests.conftest import SENTENCES
from tests.training.test_contrastive import OBJECTIVES, case_data


def records(n):
    return Records("data.txt", [(f"sentence {i}",) for i in range(n)], list(range(1, n + 1)))


def test_hold_out_is_a_fixed_disjoint_split_that_keeps_source_lines():
    kept, held = hold_out(records(50), 10)
    again_kept, again_held = hold_out(records(50), 10)
    assert held.rows == again_held.rows and kept.rows == again_kept.rows  # independent of any seed
    assert len(held) == 10 and len(kept) == 40
    assert not {r[0] for r in held.rows} & {r[0] for r in kept.rows}
    assert sorted(held.lines + kept.lines) == list(range(1, 51))
    assert all(row[0] == f"sentence {line - 1}" for row, line in zip(held.rows, held.lines, strict=True))


@pytest.mark.parametrize("size", [1, 50, 60])
def test_hold_out_refuses_sizes_that_leave_nothing(size):
    with pytest.raises(ConfigError, match="select_holdout"):
        hold_out(records(50), size)


def test_selection_directions():
    assert selection("stsb-dev", "stsb_dev_spearman") == Selection("stsb_dev_spearman")
    label_free = selection("align_uniform", None)
    assert label_free.key == "heldout_align_uniform" and label_free.lower_is_better
    assert label_free.better({"heldout_align_uniform": -2.0}, {"heldout_align_uniform": -1.5})
    assert not label_free.better({"heldout_align_uniform": -1.0}, {"heldout_align_uniform": -1.5})
    assert Selection("s").better({"s": 80.0}, {"s": 79.0})
    with pytest.raises(ConfigError, match=r"needs training\.eval_task"):
        selection("stsb-dev", None)


@pytest.fixture
def wiki_file(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text("".join(f"{s} number {i}\n" for i in range(3) for s in SENTENCES))
    return path


def config(tiny_model_dir, train_file, folder, objective=None, data=None, pooler="avg", **training):
    return recipe_from_dict(
        {
            "model": {"name_or_path": str(tiny_model_dir), "pooler": pooler},
            "data": {"train_file": str(train_file), "max_length": 16, **(data or {})},
            "objective": objective or {"name": "simcse"},
            "training": {
                "output_dir": str(folder), "batch_size": 4, "learning_rate": 1e-3, "max_steps": 6,
                "eval_steps": 2, "eval_at_start": True, "start_is_candidate": True, "eval_task": "none",
                "select_by": "align_uniform", "select_holdout": 8, "logging_steps": 1, "seed": 5,
            } | training,
        }
    )  # fmt: skip


def test_label_free_run_needs_no_sts_data_and_keeps_the_lowest_align_uniform(
    tmp_path, tiny_model_dir, wiki_file, monkeypatch
):
    import sentcl.training.contrastive as loop_module

    seen = []
    real_build = loop_module.build_dataset
    monkeypatch.setattr(loop_module, "build_dataset", lambda c, r, t: seen.append(r) or real_build(c, r, t))
    monkeypatch.delenv("SENTCL_DATA", raising=False)
    result = train(config(tiny_model_dir, wiki_file, tmp_path / "run"))
    trained, held = seen
    assert len(held) == 8 and len(trained) == 3 * len(SENTENCES) - 8
    assert not {r[0] for r in held.rows} & {r[0] for r in trained.rows}  # never trained on
    log = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval"] for r in log if "eval" in r}
    assert sorted(evals) == [0, 2, 4, 6]
    for metrics in evals.values():
        assert metrics["heldout_align_uniform"] == pytest.approx(
            metrics["heldout_align"] + metrics["heldout_uniform"]
        )
        assert metrics["heldout_align"] > 0 and metrics["heldout_uniform"] < 0 and metrics["heldout_loss"] > 0
    scores = {step: m["heldout_align_uniform"] for step, m in evals.items()}
    assert result.primary_metric == "heldout_align_uniform"
    assert result.best_step == min(scores, key=scores.get)
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert "lowest `heldout_align_uniform` on held-out unlabelled" in card


def test_the_held_out_evaluation_moves_neither_the_training_rng_nor_the_objectives_state(
    tmp_path, tiny_model_dir, wiki_file
):
    """MoCo's queue and key encoder change in every forward pass: the held-out loss pass must leave them,
    and the dropout masks of training, as they were (the losses of a run evaluated at every step equal
    those of a run evaluated at the end only)."""
    moco = {"name": "moco", "queue_size": 8}

    def losses(folder, eval_steps):
        train(config(tiny_model_dir, wiki_file, folder, moco, {"n_views": 1}, select_by="loss",
                     eval_steps=eval_steps, eval_at_start=False, start_is_candidate=False))  # fmt: skip
        log = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in log if "loss" in r], [
            r["eval"]["heldout_loss"] for r in log if "eval" in r
        ]

    every, every_held = losses(tmp_path / "every", 1)
    end, end_held = losses(tmp_path / "end", 6)
    assert every == end
    assert every_held[-1] == end_held[-1]  # the same model, the same held-out measurement
    assert len(set(every_held)) > 1


@pytest.mark.parametrize("method", [m for m in OBJECTIVES if not OBJECTIVES[m][1].get("streaming")])
def test_every_objective_has_a_held_out_loss(tmp_path, tiny_model_dir, wiki_file, method):
    objective, data, *extra = OBJECTIVES[method]
    wiki_file, pooler = case_data(tmp_path, wiki_file, extra[1:], wiki_file.read_text().splitlines())
    training = {k: v for k, v in (extra[0] if extra else {}).items() if k != "gradcache_chunk"}
    run = lambda: train(  # noqa: E731
        config(tiny_model_dir, wiki_file, tmp_path / "run", objective, data, pooler, select_by="loss",
               max_steps=2, eval_steps=2, eval_at_start=False, start_is_candidate=False, **training)
    )  # fmt: skip
    if objective.get("teacher") == "TEACHER":  # distillation's table covers the training rows only
        with pytest.raises(ConfigError, match="select_by: loss measures the objective on held-out rows"):
            run()
        assert not (tmp_path / "run").exists()
        return
    result = run()
    assert result.best_step == 2 and np.isfinite(result.best_metrics["heldout_loss"])


@pytest.mark.parametrize(
    ("training", "message"),
    [
        ({"select_by": "stsb-dev"}, "eval_task: none leaves nothing to select by"),
        (
            {"eval_steps": 0, "eval_at_start": False, "start_is_candidate": False},
            "select_by: align_uniform sel",
        ),
        ({"select_by": "median"}, "select_by"),
    ],
)
def test_bad_selection_settings_name_the_key(tmp_path, tiny_model_dir, wiki_file, training, message):
    with pytest.raises(ConfigError, match=message):
        config(tiny_model_dir, wiki_file, tmp_path / "run", **training)
    assert not (tmp_path / "run").exists()


def test_a_recipe_passes_the_tasks_options(stsb_data_dir):
    """training.eval_options: sentcl evaluate's options for training.eval_task (issue 56 item 4)."""
    from sentcl.config import ConfigError
    from sentcl.training.recipe import recipe_from_dict
    from sentcl.training.run import task_evaluator

    def loop(options):
        training = {
            "eval_task": "STS12,stsb-dev",
            "eval_data_dir": str(stsb_data_dir),
            "eval_options": options,
        }
        return recipe_from_dict(
            {"model": {"name_or_path": "m"}, "data": {"train_file": "t"}, "training": training}
        ).training

    assert loop({"aggregation": "wmean"}).eval_options.aggregation == "wmean"
    with pytest.raises(
        ConfigError, match=r"training.eval_options.aggregation: 'median' is not one of all, mean"
    ):
        loop({"aggregation": "median"})
    with pytest.raises(ConfigError, match=r"unknown config key 'training.eval_options.k'"):
        loop({"k": 10})
    chosen = loop({"aggregation": "mean"})
    chosen.eval_task = "stsb-dev"
    evaluator, _ = task_evaluator(chosen)
    assert evaluator.aggregation == "mean"
