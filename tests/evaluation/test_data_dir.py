"""The SentEval bundle when no data folder is given: downloaded from the hub (a local server plays it),
checked, unpacked once into the cache; a corrupt download leaves neither the archive nor a folder."""

from __future__ import annotations

import io
import tarfile

import pytest

from sentcl.evaluation.data_dir import SENTEVAL_FILE, SENTEVAL_REPO, DataDirError, resolve_data_dir
from sentcl.evaluation.sts_data import load_task
from tests.conftest import stsb_rows
from tests.hub_server import FakeHub


def senteval_tar() -> bytes:
    """A bundle laid out like SimCSE's senteval.tar (STS/STSBenchmark/sts-dev.csv …)."""
    rows = "".join(f"g\tf\ty\t{i}\t{s}\t{a}\t{b}\n" for i, (s, a, b) in enumerate(stsb_rows()))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = rows.encode()
        info = tarfile.TarInfo("STS/STSBenchmark/sts-dev.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("corrupt", [False, True])
def test_the_bundle_is_downloaded_checked_and_unpacked_once(monkeypatch, online_hub, corrupt):
    monkeypatch.delenv("SENTCL_DATA", raising=False)
    key = f"{SENTEVAL_REPO}/{SENTEVAL_FILE}"
    with FakeHub({key: senteval_tar()}, corrupt={key} if corrupt else set()) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        if corrupt:
            with pytest.raises(DataDirError, match=r"no evaluation data: .*sha256 .* does not match"):
                resolve_data_dir()
            assert not (online_hub.parent / "senteval").exists()
            assert not list(online_hub.glob("datasets--*"))
            return
        root = resolve_data_dir()
        assert root == online_hub.parent / "senteval"
        assert len(load_task(root, "STSBenchmark", ("dev",)).datasets["dev"].scores) == len(stsb_rows())
        assert resolve_data_dir() == root and hub.downloads(SENTEVAL_FILE) == 1
