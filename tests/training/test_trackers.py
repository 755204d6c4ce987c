"""training.report_to: TensorBoard, MLflow and W&B (offline) receive every logged record, read back from
their own files; a tracker that is not installed is one error naming the pip install, before anything is
written."""

import json
import struct
import zlib
from pathlib import Path

import pytest

from sentcl.config import ConfigError
from sentcl.training import train
from sentcl.training.trackers import check_trackers, flatten
from tests.training.test_contrastive import recipe, wiki_file  # noqa: F401 - the fixture


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


def test_mlflow_store_holds_every_logged_scalar_and_the_recipe(
    tmp_path,
    tiny_model_dir,
    wiki_file,  # noqa: F811 - the fixture
    stsb_data_dir,
    monkeypatch,
):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, report_to=["mlflow"]))
    client = MlflowClient(tracking_uri=(tmp_path / "run" / "mlruns").resolve().as_uri())
    [run] = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert {"loss", "info_nce", "lr", "eval/stsb_dev_spearman", "geometry/align"} <= set(run.data.metrics)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [2, 4, 6]
    spearman = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "eval/stsb_dev_spearman")}
    assert set(spearman) == {0, 3, 6}
    assert spearman[result.best_step] == pytest.approx(result.best_metrics["stsb_dev_spearman"], abs=1e-4)
    assert run.data.params["training.batch_size"] == "4"  # the recipe, as parameters


def wandb_records(path: Path) -> list:
    """The protobuf records of an offline W&B run file: a ``:W&B`` header, then LevelDB's log format
    (32 KiB blocks of chunks, each ``<crc32, length, type>``; a record is one FULL chunk or FIRST, MIDDLE…,
    LAST). wandb ≥ 0.19 reads it in its Go core only, so the test reads it here."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:7]
    position, payload, records = 7, b"", []
    while position + 7 <= len(data):
        room = block - position % block
        crc, length, kind = struct.unpack("<IHB", data[position : position + 7]) if room >= 7 else (0, 0, 0)
        if kind == 0:  # a block's zero-filled tail
            position += room
            continue
        payload += data[position + 7 : position + 7 + length]
        assert zlib.crc32(data[position + 6 : position + 7 + length]) == crc  # over the type and the chunk
        position += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            records.append(record)
            payload = b""
    return records


def test_wandb_offline_run_holds_every_logged_scalar_and_the_recipe(
    tmp_path,
    tiny_model_dir,
    wiki_file,  # noqa: F811 - the fixture
    stsb_data_dir,
    monkeypatch,
):
    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    result = train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, report_to=["wandb"]))
    [path] = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")  # offline: no key, no network
    records = wandb_records(path)
    history = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            history[record.history.step.num] = items
    assert {"loss", "info_nce", "lr"} <= set(history[2]) and "eval/stsb_dev_spearman" in history[0]
    assert [step for step, items in sorted(history.items()) if "loss" in items] == [2, 4, 6]
    spearman = {
        step: items["eval/stsb_dev_spearman"]
        for step, items in history.items()
        if "eval/stsb_dev_spearman" in items
    }
    assert set(spearman) == {0, 3, 6} and "geometry/align" in history[3]
    assert spearman[result.best_step] == pytest.approx(result.best_metrics["stsb_dev_spearman"], abs=1e-4)
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["training"]["batch_size"] == 4 and config["objective"]["name"] == "simcse"  # the recipe
