"""Hub downloads against a local server that plays the hub: the real ``hf_hub_download`` path into
sentcl's cache, the hash check, a corrupt download refused and nothing of it left in the cache."""

from __future__ import annotations

import hashlib
import time

import pytest

from sentcl.hub_files import HubFileError, hub_file
from tests.hub_server import FakeHub

REPO = "someone/data"
CONTENT = b"".join(f"sentence number {i}\n".encode() for i in range(500))


@pytest.fixture
def online(online_hub):
    return online_hub


def cached_files(hub_cache):
    """What the cache holds, less huggingface_hub's empty lock files and its CACHEDIR.TAG."""
    files = (
        p.relative_to(hub_cache).as_posix() for p in hub_cache.rglob("*") if p.is_file() or p.is_symlink()
    )
    return sorted(f for f in files if not f.startswith(".locks/") and f != "CACHEDIR.TAG")


def test_downloads_once_into_sentcls_cache_and_checks_the_sha256(online, monkeypatch):
    with FakeHub({f"{REPO}/a.txt": CONTENT}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        path = hub_file(REPO, "a.txt")
        assert path.read_bytes() == CONTENT and path.is_relative_to(online)
        assert path.resolve().name == hashlib.sha256(CONTENT).hexdigest()  # the blob named by the hub's hash
        assert hub_file(REPO, "a.txt") == path
        assert hub.downloads("a.txt") == 1  # the second call found it in the cache


def test_a_corrupt_download_is_refused_and_nothing_of_it_stays(online, monkeypatch):
    with FakeHub({f"{REPO}/a.txt": CONTENT}, corrupt={f"{REPO}/a.txt"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(HubFileError, match=r"someone/data/a.txt: sha256 .* does not match the hub's"):
            hub_file(REPO, "a.txt")
        assert cached_files(online) == []
        hub.corrupt.clear()  # the next try arrives whole
        assert hub_file(REPO, "a.txt").read_bytes() == CONTENT


def test_a_cached_copy_damaged_later_is_found_and_removed(online, monkeypatch):
    with FakeHub({f"{REPO}/a.txt": CONTENT}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        blob = hub_file(REPO, "a.txt").resolve()
        blob.chmod(0o644)
        blob.write_bytes(CONTENT.replace(b"number 7\n", b"number 8\n"))
        with pytest.raises(HubFileError, match="does not match"):
            hub_file(REPO, "a.txt")
        assert cached_files(online) == []


def test_a_git_file_is_checked_against_its_blob_sha1(online, monkeypatch):
    """Small files kept in git (not LFS) carry git's blob hash as ETag."""
    git_sha = hashlib.sha1(b"blob %d\0" % len(CONTENT) + CONTENT).hexdigest()
    with FakeHub({f"{REPO}/a.txt": CONTENT}, corrupt={f"{REPO}/a.txt"}, git={f"{REPO}/a.txt"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(HubFileError, match=r"git sha1 .* does not match"):
            hub_file(REPO, "a.txt")
        hub.corrupt.clear()
        assert hub_file(REPO, "a.txt").resolve().name == git_sha


@pytest.mark.parametrize("case", ["offline", "missing"])
def test_what_cannot_be_had_is_one_line(online, monkeypatch, case):
    from huggingface_hub import constants

    with FakeHub({}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        if case == "offline":
            monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        with pytest.raises(HubFileError, match=r"^someone/data/a.txt: could not be downloaded \(") as info:
            hub_file(REPO, "a.txt")
    assert "\n" not in str(info.value)
    assert ("HF_HUB_OFFLINE is set and the cache has no copy" in str(info.value)) == (case == "offline")
    assert bool(hub.requests) == (case == "missing")  # offline asks nothing


def test_a_hub_that_never_answers_is_one_line_within_the_timeout(tmp_path, monkeypatch, online_hub, caplog):
    """Issue 55: 424 s of silence, then an error that did not say it timed out."""
    import time

    from sentcl.config import ConfigError
    from sentcl.data.named import resolve_train_file
    from tests.hub_server import SilentHub

    monkeypatch.delenv("SENTCL_DATA", raising=False)
    monkeypatch.setenv("SENTCL_HUB_TIMEOUT", "1")
    with SilentHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        started = time.monotonic()
        with pytest.raises(ConfigError, match=r"did not answer in 1 s \(SENTCL_HUB_TIMEOUT\)") as refused:
            resolve_train_file("simcse:nli", "data.train_file")
        waited = time.monotonic() - started
    assert "\n" not in str(refused.value) and hub.endpoint in str(refused.value)
    assert waited < 30  # bounded by the timeout (1 s), not by huggingface_hub's retries (minutes)


def test_downloading_is_said_online_and_never_offline(tmp_path, monkeypatch, online_hub, caplog):
    from huggingface_hub import constants

    with (
        FakeHub({"owner/set/file.txt": b"hello\n"}) as hub,
        caplog.at_level("INFO", logger="sentcl.hub_files"),
    ):
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        hub_file("owner/set", "file.txt")
        assert f"downloading owner/set/file.txt from {hub.endpoint}" in caplog.text
        caplog.clear()
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        hub_file("owner/set", "file.txt")  # the cached copy
    assert "downloading" not in caplog.text


def test_a_corrupt_static_model_download_says_so(tmp_path, monkeypatch, online_hub, tiny_model_dir):
    """Issue 55: the hash failure was a WARNING and the error blamed a missing model_type."""
    from sentcl.model import StaticEncoder, load_encoder
    from sentcl.model.backbone import ModelLoadError
    from sentcl.model.encoder import ModelConfig
    from tests.hub_server import folder_files

    config = ModelConfig(str(tiny_model_dir), architecture="static", static_dim=8, static_init="random")
    folder = StaticEncoder.from_config(config).save(tmp_path / "static")
    files = {f"owner/static/{name}": content for name, content in folder_files(folder).items()}
    with FakeHub(files, corrupt={"owner/static/modules.json"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(ModelLoadError, match=r"owner/static/modules.json: sha256 .* does not match"):
            load_encoder("owner/static")


def test_the_probes_own_timeout_is_not_an_answer(monkeypatch):
    """The race CI met under load: the HEAD's timeout fired a moment before the wait ended, counted as an
    answer, and the download then waited on the silent server for minutes."""
    import httpx
    import huggingface_hub

    from sentcl import hub_files

    def times_out(*args, **kwargs):
        raise httpx.ReadTimeout("read timed out")

    def refuses(*args, **kwargs):
        raise ValueError("404: an answer, if an unwelcome one")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", times_out)
    assert hub_files._answers("http://x/f", None, 0.2) is False
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", refuses)
    assert hub_files._answers("http://x/f", None, 2.0) is True
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = TimeoutError()
    assert hub_files._timed_out(wrapped) and not hub_files._timed_out(ValueError("no"))


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan"])
def test_a_bad_hub_timeout_is_one_line_before_any_wait(monkeypatch, online_hub, value):
    """Issue 70 item 4: with a hub id, an invalid SENTCL_HUB_TIMEOUT was taken as "not a static model" and
    the transformers loader then waited on the hub."""
    from sentcl.model import load_encoder
    from tests.hub_server import SilentHub

    monkeypatch.setenv("SENTCL_HUB_TIMEOUT", value)
    with SilentHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(HubFileError, match=rf"SENTCL_HUB_TIMEOUT={value!r} is not a") as refused:
            load_encoder("owner/model")
    assert "\n" not in str(refused.value)


def test_a_hub_that_answers_then_hangs_is_one_line_within_the_timeout(tmp_path):
    """Issue 70 item 4: the hub answered sentcl's first requests (404 on modules.json), then stayed silent,
    and transformers' loader waited minutes whatever SENTCL_HUB_TIMEOUT said. A user's command, with
    HF_ENDPOINT set before it starts."""
    import os
    import subprocess
    import sys

    (tmp_path / "in.txt").write_text("a sentence\n")
    code = "import sys; from sentcl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    with FakeHub({}, stall_on="/config.json") as hub:  # modules.json: 404; transformers' config: silence
        env = os.environ | {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
                            "SENTCL_HUB_TIMEOUT": "2", "SENTCL_CACHE": str(tmp_path / "cache"),
                            "HF_HOME": str(tmp_path / "hf")}  # fmt: skip
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", code, "encode", "owner/model", str(tmp_path / "in.txt"),
             "--out", str(tmp_path / "out.npy")],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        waited = time.monotonic() - started
    assert any(path.endswith("/modules.json") for _, path in hub.requests)  # answered: 404
    assert done.returncode != 0 and not (tmp_path / "out.npy").exists()
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "config.json: the server at" in errors[0] and hub.endpoint in errors[0]
    assert "did not answer in 2 s (SENTCL_HUB_TIMEOUT)" in errors[0]
    assert waited < 30, waited  # each silence ends at the timeout; no retries of a silent server
