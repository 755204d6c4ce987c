"""training.report_to: the trackers receive every logged record; a tracker that is not installed is one
error naming the pip install, before anything is written."""

import pytest

from sentcl.config import ConfigError
from sentcl.training import train
from sentcl.training.trackers import check_trackers, flatten
from tests.training.test_loop import recipe, wiki_file  # noqa: F401 - the fixture


def test_tensorboard_holds_every_logged_scalar(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):  # noqa: F811
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = train(
        recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, report_to=["tensorboard"])
    )
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loss", "info_nce", "lr", "eval/stsb_dev_spearman", "geometry/align"} <= tags
    assert [e.step for e in events.Scalars("loss")] == [2, 4, 6]  # every logging step of metrics.jsonl
    spearman = {e.step: e.value for e in events.Scalars("eval/stsb_dev_spearman")}
    assert set(spearman) == {0, 3, 6}
    assert spearman[result.best_step] == pytest.approx(result.best_metrics["stsb_dev_spearman"], abs=1e-4)
    assert "recipe/text_summary" in events.Tags()["tensors"]  # the recipe, as text


def test_unknown_or_missing_trackers_fail_before_anything_is_written(
    tmp_path,
    tiny_model_dir,
    wiki_file,  # noqa: F811 - the fixture
    stsb_data_dir,
    monkeypatch,
):
    with pytest.raises(ConfigError, match="report_to: 'comet' is not one of"):
        recipe(tiny_model_dir, wiki_file, tmp_path / "a", stsb_data_dir, report_to=["comet"])
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match="wandb is not installed: pip install wandb"):
        train(recipe(tiny_model_dir, wiki_file, tmp_path / "b", stsb_data_dir, report_to=["wandb"]))
    assert not (tmp_path / "b").exists()
    with pytest.raises(ConfigError, match="mlflow is not installed"):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        check_trackers(["mlflow"])


def test_records_flatten_to_named_numbers():
    record = {"step": 3, "loss": 0.5, "eval": {"stsb": 80.0}, "geometry": {"align": 0.2}, "note": "x"}
    assert flatten(record) == {"loss": 0.5, "eval/stsb": 80.0, "geometry/align": 0.2}
