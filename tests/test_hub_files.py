"""Hub downloads against a local server that plays the hub: the real ``hf_hub_download`` path into
sentcl's cache, the hash check, a corrupt download refused and nothing of it left in the cache."""

from __future__ import annotations

import hashlib

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
