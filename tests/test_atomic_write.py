import os
import threading

import pytest

from sentcl import atomic_write
from sentcl.atomic_write import (
    MARKER,
    OutputExistsError,
    atomic_file,
    atomic_folder,
    recover_folder,
    stale_temporaries,
)


def test_folder_swap_never_shows_a_missing_folder(tmp_path):
    target = tmp_path / "checkpoint"
    with atomic_folder(target, "test") as tmp:
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
            with atomic_folder(target, "test") as tmp:
                (tmp / "state.json").write_text(str(step))
    finally:
        stop.set()
        thread.join()
    assert (target / "state.json").read_text() == "199"
    assert misses == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no leftovers


def test_failure_inside_keeps_the_old_folder(tmp_path):
    target = tmp_path / "model"
    with atomic_folder(target, "test") as tmp:
        (tmp / "a").write_text("old")
    with pytest.raises(RuntimeError), atomic_folder(target, "test") as tmp:
        (tmp / "a").write_text("new")
        raise RuntimeError("disk full")
    assert (target / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_two_rename_fallback_is_recovered(tmp_path, monkeypatch):
    target = tmp_path / "checkpoint"
    with atomic_folder(target, "test") as tmp:
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
    with pytest.raises(Killed), atomic_folder(target, "test") as tmp:
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
        with atomic_folder(tmp_path / "model", "test") as tmp:
            (tmp / "weights").write_text("w")
        with atomic_file(tmp_path / "summary.json") as handle:
            handle.write("{}")
    finally:
        os.umask(old)
    assert (tmp_path / "model").stat().st_mode & 0o777 == folder_mode
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == file_mode


# ---------------------------------------------------------------- consent: a user's folder is never replaced
def _write(folder, kind, **kwargs):
    with atomic_folder(folder, kind, **kwargs) as tmp:
        (tmp / "data.bin").write_bytes(b"sentcl")


def test_a_folder_the_user_owns_is_refused_and_untouched(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match=r"out: not empty, and it holds 'notes.txt'.*--overwrite"):
        _write(target, "index")
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary sibling either


def test_free_empty_and_own_folders_are_written_and_rewritten(tmp_path):
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "new" / "deeper", tmp_path / "empty"):
        _write(target, "index")
        _write(target, "index")  # sentcl's own folder: replaced without asking
        assert sorted(p.name for p in target.iterdir()) == [MARKER, "data.bin"]


def test_an_own_folder_someone_added_to_or_of_another_kind_is_refused(tmp_path):
    target = tmp_path / "out"
    _write(target, "index")
    with pytest.raises(OutputExistsError, match=r"a folder sentcl wrote of another kind \(index, not onnx\)"):
        _write(target, "onnx")
    (target / "mine.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match=r"'mine.txt', which sentcl did not write when it made"):
        _write(target, "index")
    assert (target / "mine.txt").read_text() == "mine"


def test_overwrite_replaces_what_sentcl_writes_and_keeps_the_users_files(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    _write(target, "index", overwrite=True)  # replace what sentcl writes; the user's notes stay
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "data.bin", "notes.txt"]
    assert (target / "notes.txt").read_text() == "mine"
    (target / "data.bin").write_text("stale")
    _write(target, "index", overwrite=True)
    assert (target / "data.bin").read_text() != "stale" and (target / "notes.txt").read_text() == "mine"


def test_a_file_or_a_link_where_a_folder_goes_is_refused(tmp_path):
    (tmp_path / "file").write_text("mine")
    with pytest.raises(OutputExistsError, match="a file is there"):
        _write(tmp_path / "file", "index", overwrite=True)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OutputExistsError, match="a symbolic link"):
        _write(tmp_path / "link", "index", overwrite=True)
    assert (tmp_path / "file").read_text() == "mine" and (tmp_path / "link").is_symlink()


def test_a_folder_where_a_file_goes_is_refused(tmp_path):
    (tmp_path / "emb.npy").mkdir()
    with (
        pytest.raises(OutputExistsError, match="a folder is there; name a file"),
        atomic_file(tmp_path / "emb.npy") as handle,
    ):
        handle.write("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.npy"]


def test_stale_temporaries_are_only_the_writers_own_siblings(tmp_path):
    own = [".checkpoint.tmp-ab12_x9z", ".metrics.jsonl.tmp-00000000"]
    alike = [
        ".checkpoint.tmp-mine",
        ".notes.tmp-ab12_x9z",
        ".checkpoint.tmp-AB12_X9Z",
        "checkpoint.tmp-ab12_x9z",
    ]
    for name in own + alike:
        (tmp_path / name).write_text("x")
    (tmp_path / ".model.old-ab12_x9z").mkdir()  # an interrupted swap's previous folder: kept while alone
    found = {p.name for p in stale_temporaries(tmp_path, ["checkpoint", "metrics.jsonl", "model"])}
    assert found == set(own)
    (tmp_path / "model").mkdir()  # the swap completed: the old one is stale now
    assert ".model.old-ab12_x9z" in {p.name for p in stale_temporaries(tmp_path, ["model"])}


@pytest.mark.parametrize(("umask", "file_mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_private_files_a_writer_makes_are_published_under_the_umask(
    tmp_path, umask, file_mode, tiny_model_dir
):
    """safetensors (and tempfile) make 0600 files: every model and checkpoint file was 0600 whatever umask."""
    from sentcl.model import SentenceEncoder

    old = os.umask(umask)
    try:
        with atomic_folder(tmp_path / "folder", "test") as tmp:
            (tmp / "sub").mkdir()
            (tmp / "sub" / "private.bin").write_bytes(b"x")
            (tmp / "sub" / "private.bin").chmod(0o600)
        SentenceEncoder.load(str(tiny_model_dir)).save(tmp_path / "model")
    finally:
        os.umask(old)
    assert (tmp_path / "folder" / "sub" / "private.bin").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o777 == file_mode
