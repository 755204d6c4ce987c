"""Named training sets (``simcse:wiki1m``, ``simcse:nli``): a local full copy first, then the hub (a local
server plays it), then a declared partial copy with a warning, else one error that says what to set."""

from __future__ import annotations

import gzip
import logging

import pytest

from sentcl.config import ConfigError
from sentcl.data import read_records
from sentcl.data.named import NAMED, SIMCSE_REPO, resolve_train_file
from tests.conftest import SENTENCES
from tests.hub_server import FakeHub

WIKI = "".join(f"{s}\n" for s in SENTENCES).encode()
TRIPLES = list(zip(SENTENCES[0::3], SENTENCES[1::3], SENTENCES[2::3], strict=True))
NLI = b"sent0,sent1,hard_neg\n" + b"".join(f"{a},{b},{c}\n".encode() for a, b, c in TRIPLES)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_a_full_local_copy_comes_first(tmp_path, monkeypatch, online_hub):
    (tmp_path / "data" / "wiki").mkdir(parents=True)
    local = tmp_path / "data" / "wiki" / "wiki1m_for_simcse.txt.gz"
    local.write_bytes(gzip.compress(WIKI))
    monkeypatch.setenv("SENTCL_DATA", str(tmp_path / "data"))
    with FakeHub({f"{SIMCSE_REPO}/wiki1m_for_simcse.txt": WIKI}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assert resolve_train_file("simcse:wiki1m", "data.train_file") == str(local)
    assert hub.requests == []


@pytest.mark.parametrize(("name", "content", "columns"), [("simcse:wiki1m", WIKI, 1), ("simcse:nli", NLI, 3)])
def test_downloaded_from_the_hub_when_not_local(monkeypatch, online_hub, name, content, columns):
    monkeypatch.delenv("SENTCL_DATA", raising=False)
    with FakeHub({f"{SIMCSE_REPO}/{NAMED[name].filename}": content}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        path = resolve_train_file(name, "data.train_file")
    records = read_records(path)
    assert records.n_columns == columns and len(records) == len(SENTENCES) // (1 if columns == 1 else 3)


def test_a_partial_copy_is_used_offline_with_a_warning_and_its_cut_line_left_out(
    tmp_path, monkeypatch, offline, caplog
):
    head = tmp_path / "data" / "wiki" / "wiki1m_for_simcse.first1280000bytes.txt.gz"
    head.parent.mkdir(parents=True)
    head.write_bytes(gzip.compress(WIKI + b"a sentence cut in the mid"))
    before = head.read_bytes()
    monkeypatch.setenv("SENTCL_DATA", str(tmp_path / "data"))
    with caplog.at_level(logging.WARNING, logger="sentcl.data.named"):
        path = resolve_train_file("simcse:wiki1m", "data.train_file")
    assert [row[0] for row in read_records(path).rows] == SENTENCES
    assert (
        f"its first {len(SENTENCES)} of 1,000,000 rows (its last line, cut mid-way, is left out)"
        in caplog.text
    )
    assert "partial local copy" in caplog.text and head.read_bytes() == before
    assert resolve_train_file("simcse:wiki1m", "data.train_file") == path  # made once


def test_nothing_to_be_had_is_one_error_naming_the_key(tmp_path, monkeypatch, offline):
    monkeypatch.setenv("SENTCL_DATA", str(tmp_path))
    with pytest.raises(
        ConfigError, match=r"^data.train_file: simcse:nli is not here: \$SENTCL_DATA=.* holds no nli"
    ):
        resolve_train_file("simcse:nli", "data.train_file")
    monkeypatch.delenv("SENTCL_DATA")
    with pytest.raises(ConfigError, match=r"SENTCL_DATA is not set, and .*could not be downloaded"):
        resolve_train_file("simcse:wiki1m", "data.train_files[0]")


def test_names_and_paths(tmp_path, monkeypatch):
    with pytest.raises(
        ConfigError, match="no dataset named 'simcse:wiki'; named sets: simcse:wiki1m, simcse:nli"
    ):
        resolve_train_file("simcse:wiki", "data.train_file")
    monkeypatch.setenv("MY_DATA", str(tmp_path))
    assert (
        resolve_train_file("${MY_DATA}/simcse:x.txt", "k") == f"{tmp_path}/simcse:x.txt"
    )  # a path stays a path


def test_training_on_a_named_set_from_the_hub(tmp_path, tiny_model_dir, monkeypatch, online_hub):
    from sentcl.training import recipe_from_dict, train

    monkeypatch.delenv("SENTCL_DATA", raising=False)
    with FakeHub({f"{SIMCSE_REPO}/wiki1m_for_simcse.txt": WIKI}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        result = train(recipe_from_dict({
            "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
            "data": {"train_file": "simcse:wiki1m", "max_length": 16},
            "training": {"output_dir": str(tmp_path / "run"), "batch_size": 4, "max_steps": 2,
                         "eval_steps": 0},
        }))  # fmt: skip
    assert result.steps == 2 and hub.downloads("wiki1m_for_simcse.txt") == 1


MANY = "".join(f"sentence {i} of {i * i}\n" for i in range(5000)).encode()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("wiki1m_for_simcse.txt.gz", gzip.compress(MANY)[:300]),  # a gzip cut mid-way
        ("wiki1m_for_simcse.txt.gz", bytes(range(256)) * 4),  # not a gzip at all
        ("wiki1m_for_simcse.first1280000bytes.txt.gz", gzip.compress(MANY)[:300]),  # the partial copy
    ],
    ids=["full copy cut", "full copy random bytes", "partial copy cut"],
)
def test_a_local_copy_that_cannot_be_read_is_one_line(tmp_path, monkeypatch, offline, name, content):
    """Issue 55: a cut gzip was an EOFError traceback, random bytes a BadGzipFile one."""
    (tmp_path / "data" / "wiki").mkdir(parents=True)
    (tmp_path / "data" / "wiki" / name).write_bytes(content)
    monkeypatch.setenv("SENTCL_DATA", str(tmp_path / "data"))
    with pytest.raises(ConfigError, match=rf"data.train_file: .*{name}.* cannot be read \(") as refused:
        resolve_train_file("simcse:wiki1m", "data.train_file")
    assert "\n" not in str(refused.value)


def test_a_full_copy_with_fewer_rows_than_the_set_says_so(tmp_path, monkeypatch, offline, caplog):
    """Issue 55: a wiki1m_for_simcse.txt of 5,000 lines was taken as the full set without a word."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wiki1m_for_simcse.txt").write_bytes(WIKI)
    monkeypatch.setenv("SENTCL_DATA", str(tmp_path / "data"))
    with caplog.at_level(logging.WARNING, logger="sentcl.data.named"):
        resolve_train_file("simcse:wiki1m", "data.train_file")
    assert f"holds {len(SENTENCES)} of the set's 1,000,000 rows" in caplog.text
