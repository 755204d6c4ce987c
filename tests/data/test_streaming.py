import gzip
import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from sentcl.config import ConfigError
from sentcl.data import ContrastiveDataset, DataConfig, DataError, read_records
from sentcl.data.readers import iter_records
from sentcl.data.streaming import StreamingDataset
from sentcl.training import recipe_from_dict, train
from tests.conftest import SENTENCES


@pytest.fixture
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "wiki.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("".join(f"{s} {i}\n" for i in range(3) for s in SENTENCES))
    return path


def stream(path, buffer=4, **data):
    tokenizer = AutoTokenizer.from_pretrained(str(data.pop("model")))
    return StreamingDataset(path, DataConfig(train_file=str(path), **data), tokenizer, buffer)


def test_an_epoch_is_every_row_once_shuffled_within_blocks(text_file, tiny_model_dir):
    rows = read_records(text_file)
    dataset = stream(text_file, model=tiny_model_dir)
    assert len(dataset) == len(rows) and dataset.n_views == 2
    first = [line for line, _ in dataset.epoch_rows(seed=1, epoch=0)]
    assert sorted(first) == sorted(rows.lines)
    position = {line: i for i, line in enumerate(rows.lines)}
    for start in range(0, len(first), 4):  # block b holds the file's rows 4b … 4b + 3, in another order
        assert sorted(position[x] // 4 for x in first[start : start + 4]) == [start // 4] * len(
            first[start : start + 4]
        )
    assert first != rows.lines  # shuffled
    assert first == [line for line, _ in dataset.epoch_rows(seed=1, epoch=0)]  # a function of (seed, epoch)
    assert first != [line for line, _ in dataset.epoch_rows(seed=1, epoch=1)]


def test_batches_hold_the_token_ids_of_the_in_memory_dataset(tmp_path, tokenizer, tiny_model_dir):
    path = tmp_path / "triplets.jsonl"
    rows = [
        {"sent0": a, "sent1": b, "hard_neg": c}
        for a, b, c in zip(SENTENCES, SENTENCES[1:], SENTENCES[2:], strict=False)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    memory = ContrastiveDataset(read_records(path), tokenizer, max_length=8)
    dataset = stream(path, buffer=3, model=tiny_model_dir, max_length=8)
    batches = list(dataset.epoch_batches(seed=0, epoch=0, start=0, batch_size=4))
    assert [len(b.indices) for b in batches] == [4] * (len(rows) // 4) + (
        [len(rows) % 4] if len(rows) % 4 else []
    )
    lines = memory.records.lines
    for batch in batches:
        expected = memory.collate([memory[lines.index(int(line))] for line in batch.indices])
        assert torch.equal(batch.input_ids, expected.input_ids) and batch.shape[1] == 3
    resumed = list(dataset.epoch_batches(seed=0, epoch=0, start=1, batch_size=4))
    assert all(torch.equal(a.input_ids, b.input_ids) for a, b in zip(resumed, batches[1:], strict=True))
    halves = [next(dataset.epoch_batches(0, 0, 0, 4, rank=r, world=2)) for r in (0, 1)]
    assert torch.equal(torch.cat([h.indices for h in halves]), batches[0].indices)


def test_label_columns_become_ids_over_the_whole_files_vocabulary(tmp_path, tiny_model_dir):
    path = tmp_path / "ease.tsv"
    path.write_text("".join(f"{s}\tE{i % 3}\tE{(i + 1) % 3}\n" for i, s in enumerate(SENTENCES)))
    dataset = stream(path, model=tiny_model_dir, text_columns=1, n_views=2)
    assert dataset.label_names == ["E0", "E1", "E2"] and dataset.n_views == 2
    batch = next(dataset.epoch_batches(0, 0, 0, 3))
    expected = [[int(line - 1) % 3, int(line) % 3] for line in batch.indices]
    assert batch.labels.tolist() == expected


def test_a_bad_row_anywhere_fails_before_training_with_its_line(tmp_path, tiny_model_dir, stsb_data_dir):
    path = tmp_path / "pairs.csv"
    path.write_text("sent0,sent1\n" + "a dog,a cat\n" * 50 + "a dog,a cat,x,y\n")
    with pytest.raises(DataError, match=r"pairs\.csv:52: 4 field"):
        list(iter_records(path))
    config = recipe_from_dict(
        {
            "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
            "data": {"train_file": str(path), "streaming": True},
            "training": {
                "output_dir": str(tmp_path / "run"),
                "batch_size": 4,
                "max_steps": 2,
                "eval_steps": 0,
            },
        }
    )
    with pytest.raises(DataError, match=r"pairs\.csv:52"):
        train(config)
    assert not (tmp_path / "run").exists()


def test_undecodable_bytes_and_broken_gzip_name_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff here\n")
    with pytest.raises(DataError, match=r"bad\.txt:3: undecodable byte 0xff"):
        list(iter_records(path))
    broken = tmp_path / "broken.txt.gz"
    whole = gzip.compress("".join(f"sentence {i * 7919 % 10007}\n" for i in range(5000)).encode())
    broken.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match="not a valid gzip file"):
        list(iter_records(broken))


@pytest.mark.parametrize(
    ("key", "value"),
    [("data.group_by_length", True), ("data.augment", "wordnet"), ("training.select_by", "loss")],
)
def test_what_streaming_cannot_do_is_refused_by_key(tmp_path, tiny_model_dir, text_file, key, value):
    section, name = key.split(".")
    training = {"output_dir": str(tmp_path / "run")}
    if key == "training.select_by":
        training |= {"max_steps": 2, "eval_steps": 2, "eval_task": "none"}
    config = {
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
        "data": {"train_file": str(text_file), "streaming": True},
        "training": training,
    }
    config[section][name] = value
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        train(recipe_from_dict(config))
    assert not (tmp_path / "run").exists()


def test_a_streamed_run_learns_like_an_in_memory_one(tmp_path, tiny_model_dir, text_file):
    """Same rows, other order: the loss falls in both and the streamed run's schedule knows its epochs."""

    def run(folder, **data):
        config = {
            "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
            "data": {"train_file": str(text_file), "max_length": 16, **data},
            "training": {"output_dir": str(folder), "batch_size": 8, "learning_rate": 1e-3, "epochs": 2,
                         "eval_steps": 0, "logging_steps": 1, "seed": 3},
        }  # fmt: skip
        result = train(recipe_from_dict(config))
        log = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        return result.steps, np.array([r["loss"] for r in log])

    steps, streamed = run(tmp_path / "streamed", streaming=True, shuffle_buffer=10)
    memory_steps, in_memory = run(tmp_path / "memory")
    assert steps == memory_steps == 2 * -(-3 * len(SENTENCES) // 8)
    assert streamed[-3:].mean() < streamed[:3].mean() and in_memory[-3:].mean() < in_memory[:3].mean()
