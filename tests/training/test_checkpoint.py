import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from sentcl.training import CheckpointError, recipe_from_dict, train
from sentcl.training.checkpoint import sha256_of, verify_checkpoint
from sentcl.training.seeds import aggregate_metrics, train_seeds
from tests.conftest import SENTENCES


def recipe_dict(tiny_model_dir, corpus, output_dir, **training):
    return {
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "cls", "mlp_only_train": True},
        "data": {"train_file": str(corpus), "max_length": 16},
        "training": {
            "output_dir": str(output_dir),
            "batch_size": 4,
            "learning_rate": 1e-3,
            "max_steps": 300,
            "warmup_steps": 10,
            "eval_steps": 0,
            "checkpoint_steps": 5,
            "logging_steps": 5,
            "seed": 11,
        }
        | training,
    }


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"{s} {i}" for i in range(5) for s in SENTENCES) + "\n")  # 60 lines, 15 batches
    return path


def weights(folder):
    return load_file(str(folder / "model" / "model.safetensors")) | load_file(
        str(folder / "model" / "sentcl_head.safetensors")
    )


def test_sigkill_then_resume_is_bit_identical(tmp_path, tiny_model_dir, corpus):
    import yaml

    killed = tmp_path / "killed"
    config = recipe_dict(tiny_model_dir, corpus, killed)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(config))
    code = "import sys; from sentcl.cli.main import main; sys.exit(main(['-q', 'train', sys.argv[1]]))"
    process = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "r.yaml")], env=os.environ.copy())
    state_file = killed / "checkpoint" / "state.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if state_file.is_file() and json.loads(state_file.read_text())["step"] >= 20:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    assert process.wait() == -signal.SIGKILL, "the run must be killed in the middle"
    stopped_at = json.loads(state_file.read_text())["step"]
    assert 20 <= stopped_at < 300

    train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, killed, resume=True)))
    train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, tmp_path / "straight")))
    resumed, straight = weights(killed), weights(tmp_path / "straight")
    assert resumed.keys() == straight.keys()
    for name in straight:
        assert torch.equal(resumed[name], straight[name]), name
    logged = [json.loads(x)["step"] for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(5, 301, 5))  # history kept, nothing logged twice


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest"])
def test_damaged_checkpoint_is_named_and_nothing_is_loaded(tmp_path, tiny_model_dir, corpus, damage):
    train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, tmp_path / "run", max_steps=10)))
    checkpoint = tmp_path / "run" / "checkpoint"
    target = checkpoint / "optimizer.safetensors"
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
        message = r"optimizer\.safetensors: truncated"
    elif damage == "flip":
        target.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        message = r"optimizer\.safetensors: corrupt"
    else:
        (checkpoint / "manifest.json").unlink()
        message = r"manifest\.json: missing"
    with pytest.raises(CheckpointError, match=message):
        verify_checkpoint(checkpoint)
    with pytest.raises(CheckpointError, match=message):
        train(
            recipe_from_dict(recipe_dict(tiny_model_dir, corpus, tmp_path / "run", max_steps=20, resume=True))
        )


def test_disk_full_during_save_keeps_the_previous_checkpoint(tmp_path, tiny_model_dir, corpus, monkeypatch):
    run = tmp_path / "run"
    train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, run, max_steps=5)))
    before = json.loads((run / "checkpoint" / "state.json").read_text())["step"]
    import sentcl.training.checkpoint as checkpoint_module

    real_save = checkpoint_module.save_file

    def full_disk(tensors, path, *args, **kwargs):
        if "rng.safetensors" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "save_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, run, max_steps=10, resume=True)))
    verify_checkpoint(run / "checkpoint")
    assert json.loads((run / "checkpoint" / "state.json").read_text())["step"] == before
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []  # no temp folder left


def test_multi_seed_reports_mean_and_std(tmp_path, tiny_model_dir, corpus, stsb_data_dir):
    config = recipe_from_dict(
        recipe_dict(
            tiny_model_dir, corpus, tmp_path / "seeds", max_steps=4, eval_steps=2,
            checkpoint_steps=0, eval_data_dir=str(stsb_data_dir),
        )
    )  # fmt: skip
    results, aggregate = train_seeds(config, [1, 2, 3])
    assert [r.output_dir.name for r in results] == ["seed-1", "seed-2", "seed-3"]
    values = [r.best_metrics["stsb_dev_spearman"] for r in results]
    assert aggregate["stsb_dev_spearman"]["mean"] == pytest.approx(sum(values) / 3)
    assert aggregate["stsb_dev_spearman"]["n"] == 3
    assert json.loads((tmp_path / "seeds" / "seeds.json").read_text())["seeds"] == [1, 2, 3]


def test_aggregate_metrics_sample_std():
    aggregate = aggregate_metrics([{"a": 1.0}, {"a": 3.0}])
    assert aggregate["a"] == {"mean": 2.0, "std": pytest.approx(2**0.5), "min": 1.0, "max": 3.0, "n": 2}


class Payload:
    """Unpickling this runs code: it must never happen when a run folder is read."""

    def __reduce__(self):
        return (os.system, (f"touch {os.environ['SENTCL_PAYLOAD_MARK']}",))


@pytest.mark.parametrize("where", ["rng.safetensors", "optimizer.safetensors", "legacy rng.pt"])
def test_a_pickled_payload_in_a_checkpoint_is_refused_and_never_run(
    tmp_path, tiny_model_dir, corpus, where, monkeypatch
):
    import pickle

    mark = tmp_path / "payload-ran"
    monkeypatch.setenv("SENTCL_PAYLOAD_MARK", str(mark))
    run = tmp_path / "run"
    train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, run, max_steps=5)))
    checkpoint = run / "checkpoint"
    name = where.split()[-1]
    (checkpoint / name).write_bytes(pickle.dumps(Payload()))
    manifest = json.loads((checkpoint / "manifest.json").read_text())  # an attacker rewrites the manifest too
    manifest[name] = {"bytes": (checkpoint / name).stat().st_size, "sha256": sha256_of(checkpoint / name)}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as error:
        train(recipe_from_dict(recipe_dict(tiny_model_dir, corpus, run, max_steps=10, resume=True)))
    assert "\n" not in str(error.value) and str(checkpoint) in str(error.value)
    assert not mark.exists()


def test_a_resume_in_another_number_of_processes_is_one_line():
    from pathlib import Path

    from sentcl.config import ConfigError
    from sentcl.training.checkpoint import LoopState
    from sentcl.training.steps import check_world_size

    state = LoopState()
    check_world_size(state, 2, Path("run/checkpoint"))
    assert state.world_size == 2  # a new run records its world
    check_world_size(state, 2, Path("run/checkpoint"))  # the same world resumes
    said = r"^--resume: run/checkpoint was written by a run of 2 process\(es\), this one has 4; resume with"
    with pytest.raises(ConfigError, match=said) as error:
        check_world_size(state, 4, Path("run/checkpoint"))
    assert "\n" not in str(error.value)
    old = LoopState(world_size=None)  # a checkpoint of an earlier version: accepted, then recorded
    check_world_size(old, 3, Path("x"))
    assert old.world_size == 3
