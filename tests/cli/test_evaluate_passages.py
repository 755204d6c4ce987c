"""`sentcl evaluate --passages`: a retrieval folder's long documents as passages, through the command."""

import json

import pytest

from sentcl.cli.main import main
from tests.test_passages import write_needle_folder


def test_passages_through_the_command_are_recorded(tmp_path, tiny_model_dir, capsys):
    folder = write_needle_folder(tmp_path / "needles")
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(tiny_model_dir), "--tasks", str(folder), "--retrieval", "dense,hybrid"]
    assert main([*argv, "--passages", "max", "--passage-overlap", "4", "--json", str(out)]) == 0
    run = json.loads(out.read_text())
    recorded = run["beir"]["needles"]["retrieval"]
    assert recorded["passages"]["score"] == "max" and recorded["passages"]["overlap"] == 4
    assert recorded["passages"]["passages"] > 3 and recorded["passages"]["documents_split"] >= 2
    printed = capsys.readouterr().out
    assert "[dense] [max of" in printed and "[hybrid] [max of" in printed


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--passages", "max"], "--passages max: for retrieval folders"),
        (["--passage-overlap", "3"], "--passage-overlap: for --passages"),
    ],
)
def test_passage_options_without_a_folder_are_one_line(tmp_path, tiny_model_dir, capsys, extra, message):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tscore\na dog\ta cat\t1\nthe man\ta car\t3\nbig\tsmall\t2\n")
    assert main(["evaluate", str(tiny_model_dir), "--tasks", str(pairs), *extra]) == 2
    assert message in capsys.readouterr().err


def test_an_overlap_past_the_window_is_one_line(tmp_path, tiny_model_dir, capsys):
    folder = write_needle_folder(tmp_path / "needles")
    argv = ["evaluate", str(tiny_model_dir), "--tasks", str(folder), "--passages", "max"]
    assert main([*argv, "--passage-overlap", "500"]) == 2
    assert "--passage-overlap 500: not below the window of" in capsys.readouterr().err
