import os
import threading

import pytest

from sentcl import atomic_write
from sentcl.atomic_write import atomic_file, atomic_folder, recover_folder


def test_folder_swap_never_shows_a_missing_folder(tmp_path):
    target = tmp_path / "checkpoint"
    with atomic_folder(target) as tmp:
        (tmp / "state.json").write_text("0")
    stop, misses = threading.Event(), []

    def reader():
        while not stop.is_set():
            try:
                (target / "state.json").read_text()
            except FileNotFoundError:
                misses.append(1)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for step in range(1, 200):
            with atomic_folder(target) as tmp:
                (tmp / "state.json").write_text(str(step))
    finally:
        stop.set()
        thread.join()
    assert (target / "state.json").read_text() == "199"
    assert misses == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no leftovers


def test_failure_inside_keeps_the_old_folder(tmp_path):
    target = tmp_path / "model"
    with atomic_folder(target) as tmp:
        (tmp / "a").write_text("old")
    with pytest.raises(RuntimeError), atomic_folder(target) as tmp:
        (tmp / "a").write_text("new")
        raise RuntimeError("disk full")
    assert (target / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_two_rename_fallback_is_recovered(tmp_path, monkeypatch):
    target = tmp_path / "checkpoint"
    with atomic_folder(target) as tmp:
        (tmp / "a").write_text("old")
    monkeypatch.setattr(atomic_write, "_exchange", lambda a, b: False)
    real_rename = os.rename

    class Killed(BaseException):
        pass

    def rename_then_die(self, dest):  # killed between the two renames of the fallback
        real_rename(self, dest)
        if ".old-" in str(dest):
            raise Killed

    monkeypatch.setattr(type(target), "rename", rename_then_die)
    with pytest.raises(Killed), atomic_folder(target) as tmp:
        (tmp / "a").write_text("new")
    monkeypatch.undo()
    assert not target.exists()
    recover_folder(target)
    assert (target / "a").read_text() == "old"


def test_atomic_file_replaces_or_keeps(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_file(target) as handle:
        handle.write("one")
    with pytest.raises(ValueError), atomic_file(target) as handle:
        handle.write("two")
        raise ValueError
    assert target.read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


@pytest.mark.parametrize(
    ("umask", "folder_mode", "file_mode"), [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)]
)
def test_what_is_published_follows_the_umask(tmp_path, umask, folder_mode, file_mode):
    old = os.umask(umask)
    try:
        with atomic_folder(tmp_path / "model") as tmp:
            (tmp / "weights").write_text("w")
        with atomic_file(tmp_path / "summary.json") as handle:
            handle.write("{}")
    finally:
        os.umask(old)
    assert (tmp_path / "model").stat().st_mode & 0o777 == folder_mode
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == file_mode
