import json
from pathlib import Path

import numpy as np
import pytest

from sentcl.cli.main import main
from tests.conftest import SENTENCES


def test_evaluate_prints_stsb_dev_and_writes_json(tiny_model_dir, stsb_data_dir, tmp_path, capsys):
    out = tmp_path / "scores.json"
    code = main(
        [
            "evaluate",
            str(tiny_model_dir),
            "--tasks",
            "stsb-dev",
            "--data-dir",
            str(stsb_data_dir),
            "--json",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "pooler avg" in printed and "STS-B dev  Spearman" in printed
    payload = json.loads(out.read_text())
    assert (
        payload["metrics"]["stsb_dev_spearman"]
        == payload["sts"]["tasks"]["stsb-dev"]["datasets"]["dev"]["spearman"]
    )


def test_evaluate_seven_task_table_reports_missing(tiny_model_dir, stsb_data_dir, capsys):
    assert main(["evaluate", str(tiny_model_dir), "--data-dir", str(stsb_data_dir)]) == 0
    printed = capsys.readouterr().out
    for name in ("STS12", "STS16", "STS-B", "SICK-R"):
        assert name in printed
    assert "no partial average" in printed


def test_train_then_evaluate(tiny_model_dir, stsb_data_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"model: {{name_or_path: {tiny_model_dir}, pooler: avg}}\n"
        f"data: {{train_file: {corpus}, max_length: 16}}\n"
        "training: {batch_size: 4, max_steps: 2, eval_steps: 2, eval_at_start: true, "
        f"eval_data_dir: {stsb_data_dir}}}\n"
    )
    assert main(["train", str(recipe), "training.learning_rate=1e-4", "--output", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert "before training: stsb_dev_spearman" in printed and "after training:" in printed
    assert (
        main(["evaluate", str(tmp_path / "run"), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)])
        == 0
    )


@pytest.mark.parametrize(
    "argv,message",
    [
        (["evaluate", "/nonexistent/model", "--tasks", "stsb-dev"], "no such folder"),
        (["evaluate", "{model}", "--tasks", "nope"], "unknown evaluation task 'nope'"),
        (["train", "{recipe}", "training.lr=1"], "unknown config key 'training.lr'"),
        (["reproduce", "{recipe}"], "r.yaml: model: unknown key"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(
    argv, message, tiny_model_dir, stsb_data_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("SENTCL_DATA", str(stsb_data_dir))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {name_or_path: m}\ndata: {train_file: t.txt}\n")
    argv = [a.format(model=tiny_model_dir, recipe=recipe) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_analyze_with_postprocess_writes_report(tiny_model_dir, stsb_data_dir, tmp_path, capsys):
    corpus = tmp_path / "fit.txt"
    corpus.write_text("\n".join(SENTENCES * 3) + "\n")
    out = tmp_path / "report"
    argv = ["analyze", str(tiny_model_dir), "--postprocess", "abtt", "--fit-on", str(corpus)]
    assert main([*argv, "--data-dir", str(stsb_data_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| bert |" in printed and "| bert + abtt |" in printed
    assert (out / "report.md").is_file() and (
        out / "postprocess" / "bert-abtt" / "postprocess.json"
    ).is_file()


def test_evaluate_with_fitted_then_saved_postprocess(tiny_model_dir, stsb_data_dir, tmp_path, capsys):
    saved = tmp_path / "whitening"
    common = ["--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
    assert main(["evaluate", str(tiny_model_dir), *common, "--postprocess", "whitening", "--fit-on", "task",
                 "--save-postprocess", str(saved)]) == 0  # fmt: skip
    first = capsys.readouterr().out
    assert "+ whitening" in first
    assert main(["evaluate", str(tiny_model_dir), *common, "--postprocess", str(saved)]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1] == first.splitlines()[-1]
    )  # same scores from the saved one


def test_encode_index_search_commands(tiny_model_dir, tmp_path, capsys):
    import numpy as np

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n\n")
    assert (
        main(["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "e.npy"), "--normalize"])
        == 0
    )
    vectors = np.load(tmp_path / "e.npy")
    assert vectors.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "idx")]) == 0
    capsys.readouterr()
    assert main(["search", str(tmp_path / "idx"), SENTENCES[4], "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query: {SENTENCES[4]}" and len(lines) == 4
    assert any(line.strip().endswith(SENTENCES[4]) for line in lines[1:])
    assert main(["search", str(tmp_path / "idx"), SENTENCES[4], "-k", "3", "--hybrid"]) == 0
    hybrid = capsys.readouterr().out.splitlines()
    assert len(hybrid) == 4 and hybrid[1].strip().endswith(SENTENCES[4])  # first by its words and its vector
    assert main(["search", str(tmp_path / "idx"), SENTENCES[4], "--hybrid", "--threshold", "0.5"]) == 2
    assert "fused ranks" in capsys.readouterr().err
    for threshold in ("nan", "inf", "1.5"):  # refused with one line, not "no hits"
        with pytest.raises(SystemExit) as refused:
            main(["search", str(tmp_path / "idx"), SENTENCES[4], "--threshold", threshold])
        assert refused.value.code == 2
        assert "--threshold" in capsys.readouterr().err
    assert (
        main(["encode", str(tiny_model_dir), str(tmp_path / "absent.txt"), "--out", str(tmp_path / "x.npy")])
        == 2
    )
    assert not (tmp_path / "x.npy").exists()


def _pickled_copy(tiny_model_dir, folder):
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(tiny_model_dir))
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(str(folder))
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("command", ["evaluate", "encode"])
def test_pickled_weights_are_refused_everywhere_unless_asked_for(
    tiny_model_dir, stsb_data_dir, tmp_path, capsys, command
):
    model = _pickled_copy(tiny_model_dir, tmp_path / "pickled")
    sentences = tmp_path / "s.txt"
    sentences.write_text("a dog runs\n")
    args = {
        "evaluate": ["evaluate", str(model), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)],
        "encode": ["encode", str(model), str(sentences), "--out", str(tmp_path / "e.npy")],
    }[command]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "--allow-pickle" in errors[0] and "Traceback" not in err
    assert main([*args, "--allow-pickle"]) == 0


def test_a_model_that_needs_remote_code_is_one_line_exit_2(tiny_model_dir, tmp_path, capsys):
    import shutil

    model = tmp_path / "custom"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config |= {"model_type": "sentcl-custom-xyz", "auto_map": {"AutoModel": "modeling_xyz.XyzModel"}}
    (model / "config.json").write_text(json.dumps(config))
    sentences = tmp_path / "s.txt"
    sentences.write_text("a dog runs\n")
    assert main(["encode", str(model), str(sentences), "--out", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in err and str(model) in errors[0]
    assert not (tmp_path / "e.npy").exists()


def test_dim_keeps_a_prefix_and_is_checked(tmp_path, tiny_model_dir, capsys):
    import numpy as np

    corpus = tmp_path / "c.txt"
    corpus.write_text("a dog runs\na cat sleeps\n")
    out = tmp_path / "v.npy"
    assert (
        main(["encode", str(tiny_model_dir), str(corpus), "--out", str(out), "--dim", "8", "--normalize"])
        == 0
    )
    vectors = np.load(out)
    assert vectors.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # normalised after the cut
    assert (
        main(["encode", str(tiny_model_dir), str(corpus), "--out", str(out), "--dim", "99", "--overwrite"])
        == 2
    )
    assert "--dim 99: the model gives 32 dimensions" in capsys.readouterr().err


@pytest.mark.parametrize(("native", "chosen"), [(True, "bf16"), (False, "fp32")])
def test_encode_index_and_serve_default_to_auto_the_fastest_path_measured_here(
    tiny_model_dir, tmp_path, caplog, monkeypatch, native, chosen
):
    from sentcl.cli.main import build_parser
    from sentcl.hardware import Hardware
    from sentcl.model import auto_precision
    from sentcl.model import inference as inference_module

    flags = frozenset({"avx512f", "avx512_bf16"} if native else {"avx2"})
    forced = Hardware("cpu", "AVX512" if native else "AVX2", flags, mkldnn_bf16=native)
    monkeypatch.setattr(inference_module, "detect", lambda device="cpu": forced)
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    speeds = {"fp32": 100.0, "bf16": 300.0, "int8": 50.0}  # bf16 the fastest where it is a candidate
    monkeypatch.setattr(
        auto_precision, "time_candidates", lambda candidates, texts: {n: speeds[n] for n in candidates}
    )
    auto_precision._say.cache_clear()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    argv = ["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "e.npy"), "--overwrite"]
    with caplog.at_level("INFO", logger="sentcl.model.auto_precision"):
        assert main(argv) == 0  # a small input, no record: fp32 without measuring
        assert "precision auto: fp32 for 12 texts, not measured" in caplog.text
        caplog.clear()
        assert main([*argv, "--measure-precision"]) == 0  # measured now, whatever the size
        assert f"precision auto: {chosen}, the" in caplog.text
        caplog.clear()
        auto_precision._say.cache_clear()
        assert main(argv) == 0  # then the record, even for a small input
    assert f"precision auto: {chosen}" in caplog.text
    parser = build_parser()
    for command in (["index", "m", "c", "--out", "o"], ["serve", "m"]):
        assert parser.parse_args(command).dtype == "auto"
    assert parser.parse_args(["evaluate", "m"]).dtype == "fp32"  # a reported score: not machine-dependent


@pytest.mark.parametrize("value", ["-1", "0", "two"])
@pytest.mark.parametrize("command", ["encode", "evaluate", "index", "serve"])
def test_a_batch_size_below_one_is_one_line_and_writes_nothing(
    command, value, tiny_model_dir, tmp_path, capsys
):
    """``encode --batch-size -1`` once wrote uninitialised memory as embeddings (values like -6e31)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    argv = {
        "encode": ["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "e.npy")],
        "evaluate": ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev"],
        "index": ["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "idx")],
        "serve": ["serve", str(tiny_model_dir)],
    }[command]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--batch-size", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(f"sentcl {command}: error: argument --batch-size: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


DOCUMENTS = [
    {"_id": "doc-a", "title": "Guitars", "text": "a man plays guitar", "url": "http://a"},
    {"_id": "doc-b", "title": "Markets", "text": "stocks fell sharply", "url": "http://b"},
    {"_id": 7, "text": "a woman slices an onion"},  # an integer id, no title, no url
]


def write_documents(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a BEIR folder (``beir``), JSON lines or Parquet, by the name of ``path``."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = sorted({k for row in rows for k in row})
        pq.write_table(pa.table({c: [str(r[c]) if c in r else None for r in rows] for c in columns}), path)
        return path
    if path.suffix == "":
        path.mkdir()
        path = path / "corpus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("backend", ["faiss", "lance"])
@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.parquet", "beir"])
def test_index_reads_documents_and_search_answers_with_their_ids(
    backend, name, tiny_model_dir, tmp_path, capsys
):
    """A corpus.jsonl was indexed line by line: a hit's text was the raw JSON, braces and keys included. Now a
    document is read as one (its id, its title and text, the fields asked for), and results carry them."""
    if backend == "lance":
        pytest.importorskip("lancedb")
    corpus = tmp_path / name
    write_documents(corpus, DOCUMENTS)
    out = tmp_path / "idx"
    argv = ["index", str(tiny_model_dir), str(corpus), "--out", str(out), "--backend", backend]
    assert main([*argv, "--field", "title", "--field", "url"]) == 0
    assert "3 documents" in capsys.readouterr().out
    from sentcl.search import load_index

    index = load_index(out)
    assert index.has_ids
    hits = index.search(np.eye(1, 32, dtype=np.float32), top_k=3)[0]
    by_key = {hit.key: hit for hit in hits}
    assert set(by_key) == {"doc-a", "doc-b", "7"}
    assert by_key["doc-a"].text == "Guitars a man plays guitar"  # BEIR's title + text, no JSON
    assert by_key["doc-a"].fields == {"title": "Guitars", "url": "http://a"}
    assert by_key["7"].text == "a woman slices an onion" and by_key["7"].fields == {
        "title": None,
        "url": None,
    }
    capsys.readouterr()
    assert main(["search", str(out), "someone plays music", "-k", "3"]) == 0
    printed = capsys.readouterr().out
    assert "doc-a  Guitars a man plays guitar" in printed and "url: http://a" in printed
    assert "{" not in printed.replace("{}", "")


def test_index_of_documents_with_chosen_fields(tiny_model_dir, tmp_path):
    corpus = write_documents(tmp_path / "docs.jsonl", [{"pid": "p1", "body": "guitar", "head": "music"}])
    out = tmp_path / "idx"
    argv = ["index", str(tiny_model_dir), str(corpus), "--out", str(out)]
    assert main([*argv, "--id-field", "pid", "--text-field", "head,body"]) == 0
    from sentcl.search import load_index

    index = load_index(out)
    assert index.texts == ["music guitar"] and index.documents.ids == ["p1"]
    assert json.loads((out / "index.json").read_text())["documents"] == {
        "id": "pid", "text": ["head", "body"], "keep": []
    }  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}], "docs.jsonl:2: the id 'a' again (first at"),
        ([{"_id": "a", "text": "x"}, {"text": "y"}], "docs.jsonl:2: no id in field '_id' (missing)"),
        ([{"_id": "a", "title": "", "text": " "}], "docs.jsonl:1: document 'a' has no text"),
        ([{"_id": "a", "text": 3}], "docs.jsonl:1: document 'a': field 'text' is a int, not text"),
        ([{"_id": "a", "title": "only a title"}], "docs.jsonl:1: document 'a': field 'text' is missing"),
    ],
)  # fmt: skip
def test_bad_documents_are_one_line_and_nothing_is_written(rows, message, tiny_model_dir, tmp_path, capsys):
    corpus = write_documents(tmp_path / "docs.jsonl", rows)
    out = tmp_path / "idx"
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_index_refuses_a_json_file_and_document_options_with_sentences(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.json"
    corpus.write_text('[{"_id": "d1", "text": "a man plays guitar"}]\n')
    out = tmp_path / "idx"
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(out)]) == 2
    assert "a JSON file; sentcl index reads documents as JSON lines" in capsys.readouterr().err
    sentences = tmp_path / "corpus.txt"
    sentences.write_text("a man plays guitar\n")
    assert main(["index", str(tiny_model_dir), str(sentences), "--out", str(out), "--field", "title"]) == 2
    assert "--field: for a corpus of documents" in capsys.readouterr().err
    assert not out.exists()


def test_search_with_a_model_of_another_dimension_is_one_line(tmp_path, tiny_model_dir, capsys):
    from tests.conftest import make_tiny_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "idx")]) == 0
    wide = make_tiny_model(tmp_path / "wide", hidden=64)
    capsys.readouterr()
    assert main(["search", str(tmp_path / "idx"), "a dog", "--model", str(wide)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the loading bar
    assert err.startswith("sentcl search: error: ") and "holds 32-dim vectors" in err
    assert "gives 64-dim ones" in err


@pytest.mark.parametrize(
    "failure",
    [
        OSError(28, "No space left on device"),
        OSError("160000 requested and 76768 written"),  # numpy's short write
        RuntimeError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        ),  # safetensors
        RuntimeError(
            "Error in faiss::write_index: write error in x/index.faiss: 3 != 64 (No space left on device)"
        ),
    ],
)
def test_a_full_disk_is_one_line_and_the_previous_file_is_kept(
    failure, tmp_path, tiny_model_dir, capsys, monkeypatch
):

    corpus, out = tmp_path / "corpus.txt", tmp_path / "e.npy"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    out.write_bytes(b"the previous embeddings")

    def full_disk(handle, array):
        handle.write(b"\x93NUMPY partial")
        raise failure

    monkeypatch.setattr(np, "save", full_disk)
    assert main(["encode", str(tiny_model_dir), str(corpus), "--out", str(out), "--overwrite"]) == 1
    printed = capsys.readouterr().err
    err = printed.strip().splitlines()[-1]
    assert err.startswith("sentcl encode: error: the disk is full (") and "Traceback" not in printed
    assert "what was there before is unchanged" in err
    assert out.read_bytes() == b"the previous embeddings"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "e.npy"]


def test_a_bug_still_shows_its_traceback(tmp_path, tiny_model_dir, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    monkeypatch.setattr(np, "save", lambda handle, array: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "e.npy")])


def test_a_recipes_prompts_are_saved_and_encode_applies_them(tiny_model_dir, tmp_path, capsys):
    import numpy as np

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"model: {{name_or_path: {tiny_model_dir}, pooler: avg,\n"
        "        prompts: {query: 'q: ', document: 'd: '}}\n"
        f"data: {{train_file: {corpus}, max_length: 16}}\n"
        "training: {batch_size: 4, max_steps: 1, eval_steps: 0}\n"
    )
    assert main(["train", str(recipe), "--output", str(tmp_path / "run")]) == 0
    model = str(tmp_path / "run" / "model")
    named, given = tmp_path / "named.npy", tmp_path / "given.npy"
    assert (
        main(["encode", model, str(corpus), "--out", str(named), "--prompt-name", "query", "--dtype", "fp32"])
        == 0
    )
    assert (
        main(["encode", model, str(corpus), "--out", str(given), "--prompt", "q: ", "--dtype", "fp32"]) == 0
    )
    np.testing.assert_array_equal(np.load(named), np.load(given))
    capsys.readouterr()
    assert (
        main(["encode", model, str(corpus), "--out", str(tmp_path / "x.npy"), "--prompt-name", "passage"])
        == 2
    )
    err = capsys.readouterr().err
    assert "no prompt 'passage' (its prompts: document, query)" in err and not (tmp_path / "x.npy").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "{model}", "--tasks", "stsb-dev", "--data-dir", "{empty}"],
        ["analyze", "{model}", "--data-dir", "{empty}", "--out", "{out}"],
    ],
    ids=["evaluate", "analyze"],
)
def test_a_data_dir_without_stsb_dev_is_one_line(argv, tiny_model_dir, tmp_path, capsys):
    """Issue 55: a 27-line FileNotFoundError traceback once."""
    (tmp_path / "empty").mkdir()
    argv = [a.format(model=tiny_model_dir, empty=tmp_path / "empty", out=tmp_path / "out") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "no sts-dev.csv under" in err.splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_the_top_help_imports_no_command_and_says_what_each_module_says():
    """Issue 55: ``sentcl --help`` imported the whole package (5 s; 17–33 s on a loaded machine)."""
    import argparse
    import subprocess
    import sys

    from sentcl.cli.main import COMMANDS, build_parser

    probe = (
        "import sys\nfrom sentcl.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy', 'sentcl.model', 'sentcl.cli.train') "
        "if m in sys.modules)\nprint('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out and "evaluate a model: STS, SentEval transfer" in out
    (full,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    own = {choice.dest: choice.help for choice in full._choices_actions}
    assert {name: summary for name, (_, summary) in COMMANDS.items()} == {
        name: own[name] for name in COMMANDS
    }


def test_every_option_of_every_command_has_help():
    import argparse

    from sentcl.cli.main import build_parser

    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    bare = [
        f"{name} {action.option_strings or action.dest}"
        for name, parser in subparsers.choices.items()
        for action in parser._actions
        if action.help is None and not isinstance(action, argparse._HelpAction)
    ]
    assert bare == []


def test_retrieval_modes_without_a_retrieval_folder_are_one_line(tiny_model_dir, stsb_data_dir, capsys):
    """Issue 70 item 7: --retrieval bm25 with STS tasks only was ignored without a word."""
    argv = ["evaluate", str(tiny_model_dir), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)]
    assert main([*argv, "--retrieval", "bm25"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert err == [
        "sentcl evaluate: error: --retrieval bm25: for retrieval folders; --tasks stsb-dev names none"
    ]
    assert main(argv) == 0
