"""Shared fixtures: a tiny random BERT with a small word-piece vocabulary, built on disk once per session,
and writers for small data files in the real formats."""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast


@pytest.fixture(scope="session", autouse=True)
def own_cache(tmp_path_factory):
    """sentcl's cache (auto's timing records, int8 checks, teacher tables, downloads) in a temporary folder
    for the whole session: a test never writes into the user's ~/.cache/sentcl (its processes inherit it)."""
    saved = os.environ.get("SENTCL_CACHE")
    os.environ["SENTCL_CACHE"] = str(tmp_path_factory.mktemp("sentcl-cache"))
    yield
    if saved is None:
        os.environ.pop("SENTCL_CACHE", None)
    else:
        os.environ["SENTCL_CACHE"] = saved


WORDS = """
the a an of to and in is was are on for with as by at from that this it he she they we you
man woman dog cat child car house street park ball food water music game book city people
plays runs eats sits walks rides reads sings drives jumps sleeps cooks talks looks holds
big small red blue green happy sad old young fast slow good bad new two three
not no yes very some many all one
""".split()  # noqa: SIM905 - a word list reads better as text


def build_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + ".,!?'-")
    return specials + WORDS + chars + [f"##{c}" for c in string.ascii_lowercase + string.digits]


def make_tiny_model(folder: Path, layers: int = 2, hidden: int = 32, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    tokenizer.model_max_length = 64
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "bert")


SENTENCES = [
    "a man plays the ball in the park",
    "the dog runs on the street",
    "a woman reads a book",
    "two children eat food",
    "the cat sleeps in the house",
    "a young man drives a red car",
    "people sing music in the city",
    "an old woman cooks food",
    "the small dog jumps",
    "a child rides a blue car",
    "they walk to the park",
    "she holds a green ball",
]


def write_stsb(folder: Path, split: str, rows: list[tuple[float, str, str]]) -> Path:
    """An STS-B split in SentEval's processing: genre, file, year, id, score, s1, s2 (tab-separated)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sts-{split}.csv"
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{s}\t{a}\t{b}" for i, (s, a, b) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def stsb_rows(n: int = 24) -> list[tuple[float, str, str]]:
    rows = []
    for i in range(n):
        a = SENTENCES[i % len(SENTENCES)]
        b = SENTENCES[(i * 5 + 3) % len(SENTENCES)] if i % 3 else a
        rows.append((round((i * 7 % 50) / 10, 1), a, b))
    return rows


@pytest.fixture
def stsb_data_dir(tmp_path) -> Path:
    """A data folder laid out like ../shared/data with small STS-B train and dev splits."""
    root = tmp_path / "data"
    write_stsb(root / "stsb" / "senteval", "dev", stsb_rows())
    write_stsb(root / "stsb" / "senteval", "train", stsb_rows(12))
    return root


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (SENTCL_DATA); integration tests fail loudly without it rather than skip."""
    path = Path(os.environ.get("SENTCL_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    assert path.is_dir(), f"SENTCL_DATA={path} is not a folder: integration tests need ../shared/data"
    return path


@pytest.fixture
def online_hub(tmp_path, monkeypatch) -> Path:
    """sentcl's cache in tmp_path and huggingface_hub online (the suite runs with HF_HUB_OFFLINE=1), for
    tests that point HF_ENDPOINT at tests/hub_server.py's local server; returns the hub cache folder."""
    from huggingface_hub import constants

    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return tmp_path / "cache" / "hub"
