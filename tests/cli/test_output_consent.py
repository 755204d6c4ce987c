"""Commands that write a folder never replace one the user owns: a folder with a user's
file in it is refused with one line and left as it was; an empty folder, or one the same command wrote, is
(re)written; ``--overwrite`` replaces what sentcl writes there and keeps the user's own files, in every
command (train's --overwrite always did)."""

from __future__ import annotations

import json

import pytest

from sentcl.atomic_write import MARKER
from sentcl.cli.main import main
from tests.conftest import SENTENCES


@pytest.fixture
def commands(tiny_model_dir, stsb_data_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    data = ["--data-dir", str(stsb_data_dir)]
    fit = ["--postprocess", "whitening", "--fit-on", "task"]
    return {
        "index": lambda out: ["index", str(tiny_model_dir), str(corpus), "--out", str(out)],
        "export": lambda out: ["export", str(tiny_model_dir), "--onnx", str(out)],
        "evaluate": lambda out: ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev", *data, *fit,
                                 "--save-postprocess", str(out)],
        "analyze": lambda out: ["analyze", str(tiny_model_dir), *data, "--out", str(out)],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["index", "export", "evaluate", "analyze"])
def test_a_users_folder_is_refused_and_an_own_one_rewritten(command, commands, tmp_path, capsys):
    argv = commands[command]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    assert main(argv(mine)) == 2
    err = capsys.readouterr().err
    assert "holds 'notes.txt', which sentcl did not write" in err and "--overwrite" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (
        mine / "notes.txt"
    ).read_text() == "my notes"

    own = tmp_path / "own"
    assert main(argv(own)) == 0 and (own / MARKER).is_file()
    assert main(argv(own)) == 0  # what this command wrote is replaced without asking
    (own / "added.txt").write_text("later")
    assert main(argv(own)) == 2
    assert (own / "added.txt").read_text() == "later"

    assert main([*argv(mine), "--overwrite"]) == 0  # asked for: what sentcl writes is written, notes stay
    assert (mine / "notes.txt").read_text() == "my notes" and (mine / MARKER).is_file()
    written = json.loads((mine / MARKER).read_text())["entries"]
    assert "notes.txt" not in written and all((mine / name).exists() for name in written)
    assert main([*argv(mine), "--overwrite"]) == 0  # again: sentcl's entries replaced, the notes still kept
    assert (mine / "notes.txt").read_text() == "my notes"
    assert sorted(p.name for p in mine.iterdir()) == sorted([*written, MARKER, "notes.txt"])
    assert not list(tmp_path.glob(".mine.*"))  # no temporary sibling left behind


def test_export_refuses_a_home_like_folder(commands, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret")
    (home / ".bashrc").write_text("alias")
    monkeypatch.setenv("HOME", str(home))
    assert main(commands["export"](home)) == 2
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", ".ssh"]
    assert (home / ".ssh" / "id_ed25519").read_text() == "secret"


@pytest.mark.parametrize("command", ["index", "export", "analyze"])
def test_a_file_where_the_folder_goes_is_refused(command, commands, tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("mine")
    assert main([*commands[command](target), "--overwrite"]) == 2
    assert "a file is there" in capsys.readouterr().err and target.read_text() == "mine"


def test_save_postprocess_without_fitting_is_refused(tiny_model_dir, stsb_data_dir, tmp_path, capsys):
    argv = ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
    assert main([*argv, "--save-postprocess", str(tmp_path / "pp")]) == 2  # once silently ignored
    assert "--save-postprocess saves a post-processor fitted now" in capsys.readouterr().err
    assert not (tmp_path / "pp").exists()


@pytest.mark.parametrize("option", ["--out", "--json"])
def test_a_folder_where_a_file_goes_is_refused(option, tiny_model_dir, stsb_data_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    (tmp_path / "folder").mkdir()
    if option == "--out":
        argv = ["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "folder")]
    else:
        argv = ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
        argv += ["--json", str(tmp_path / "folder")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option} {tmp_path / 'folder'}: a folder is there; name a file" in err and "Traceback" not in err
    assert list((tmp_path / "folder").iterdir()) == []


@pytest.mark.parametrize("option", ["--out", "--json"])
def test_a_users_file_where_a_file_goes_is_replaced_only_with_overwrite(
    option, tiny_model_dir, stsb_data_dir, tmp_path, capsys
):
    corpus, notes = tmp_path / "corpus.txt", tmp_path / "notes.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    notes.write_text("a user's notes")
    if option == "--out":
        argv = ["encode", str(tiny_model_dir), str(corpus), "--out", str(notes)]
    else:
        argv = ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
        argv += ["--json", str(notes)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option} {notes}: a file is already there; pass --overwrite" in err and "Traceback" not in err
    assert notes.read_text() == "a user's notes"
    assert main([*argv, "--overwrite"]) == 0
    assert notes.read_bytes() != b"a user's notes"
