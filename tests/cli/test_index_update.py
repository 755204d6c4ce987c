"""`sentcl index --update`: an index of documents brought up to date with its corpus, encoding only the new
and the changed documents, equal to a clean build of the same corpus; refused in one line, nothing changed,
for another model, pooler, fields or kind; a kill -9 during an update leaves the previous index."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sentcl.cli.main import main
from sentcl.embedder import Batched
from sentcl.search import load_index
from tests.cli.test_main import write_documents
from tests.conftest import SENTENCES, make_tiny_model


def corpus_rows(n: int, changed: frozenset = frozenset(), start: int = 0) -> list[dict]:
    return [
        {"_id": f"d{i}", "title": f"t{i % 7}", "text": SENTENCES[i % len(SENTENCES)] + f" {i}"
         + (" edited" if i in changed else ""), "url": f"u{i}"}
        for i in range(start, start + n)
    ]  # fmt: skip


def folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def counted(monkeypatch):
    """How many texts every Batched encoder encodes in this process."""
    seen = []
    original = Batched.encode

    def encode(self, sentences, **options):
        seen.append(len(sentences))
        return original(self, sentences, **options)

    monkeypatch.setattr(Batched, "encode", encode)
    return seen


@pytest.mark.parametrize("kind", ["flat", "ivf", "binary"])
def test_an_update_encodes_only_what_changed_and_equals_a_clean_build(
    kind, tiny_model_dir, tmp_path, capsys, counted
):
    old = corpus_rows(60)
    # now: d0-d2 removed, d10 and d11 edited, d20's url changed (a kept field), d60-d63 added, order kept
    new = [dict(r) for r in corpus_rows(60, frozenset({10, 11}))[3:]] + corpus_rows(4, start=60)
    next(r for r in new if r["_id"] == "d20")["url"] = "elsewhere"
    options = ["--field", "url", "--kind", kind, "--dtype", "fp32"]
    out, clean = tmp_path / "idx", tmp_path / "clean"
    model = str(tiny_model_dir)
    assert (
        main(["index", model, str(write_documents(tmp_path / "old.jsonl", old)), "--out", str(out), *options])
        == 0
    )
    counted.clear()
    corpus = write_documents(tmp_path / "new.jsonl", new)
    assert main(["index", model, str(corpus), "--out", str(out), "--update", *options]) == 0
    assert sum(counted) == 7  # d10, d11, d20 and the four new ones; the other 54 reuse their vectors
    assert "4 added, 3 changed, 3 removed, 54 unchanged; 7 documents encoded" in capsys.readouterr().out
    assert main(["index", model, str(corpus), "--out", str(clean), *options]) == 0
    updated, built = load_index(out), load_index(clean)
    assert updated.documents.ids == built.documents.ids == [r["_id"] for r in new]
    assert updated.texts == built.texts and updated.documents.kept == built.documents.kept
    assert updated.documents.hashes == built.documents.hashes
    if kind == "binary":  # the bits equal; the int8 codes keep the first build's ranges
        assert np.array_equal(updated.stored_vectors(), built.stored_vectors())
    else:
        np.testing.assert_allclose(updated.stored_vectors(), built.stored_vectors(), atol=1e-5)
    query = np.asarray(Batched(__import__("sentcl.model", fromlist=["load_encoder"]).load_encoder(model), 8)
                       .encode(["a man plays the ball"]))  # fmt: skip
    if kind == "flat":
        assert [h.key for h in updated.search(query, 10)[0]] == [h.key for h in built.search(query, 10)[0]]
    assert [h.key for h in updated.hybrid_search(query, ["the dog runs"], 5)[0]] == [
        h.key for h in built.hybrid_search(query, ["the dog runs"], 5)[0]
    ] or kind != "flat"
    before = folder_bytes(out)
    counted.clear()
    assert main(["index", model, str(corpus), "--out", str(out), "--update", *options]) == 0
    assert sum(counted) == 0 and "0 added, 0 changed, 0 removed, 61 unchanged" in capsys.readouterr().out
    assert {k: v for k, v in folder_bytes(out).items() if k != ".sentcl-folder.json"} == {
        k: v for k, v in before.items() if k != ".sentcl-folder.json"
    }


def test_updates_with_other_settings_are_one_line_and_change_nothing(tiny_model_dir, tmp_path, capsys):
    model = str(tiny_model_dir)
    first = write_documents(tmp_path / "docs.jsonl", corpus_rows(12))
    out = tmp_path / "idx"
    assert main(["index", model, str(first), "--out", str(out), "--field", "url", "--dtype", "fp32"]) == 0
    before = folder_bytes(out)
    capsys.readouterr()
    sentences = tmp_path / "lines.txt"
    sentences.write_text("a dog\n")
    other = make_tiny_model(tmp_path / "other", seed=5)
    update = ["--out", str(out), "--update", "--field", "url"]
    cases = [
        ([model, str(first), *update, "--pooler", "cls_before_pooler"], "was built with weights"),
        ([str(other), str(first), *update], "was built with model"),
        ([model, str(first), "--out", str(out), "--update"], "read its documents with"),
        ([model, str(sentences), *update[:-2]], "is a text file;"),
        ([model, str(first), *update, "--kind", "ivf"], "is a flat index; an update keeps its kind"),
        ([model, str(first), *update, "--backend", "lance"], "is a faiss index; an update keeps its backend"),
        ([model, str(first), "--out", str(tmp_path / "none"), "--update"], "is no index folder"),
    ]
    for argv, message in cases:
        assert main(["index", *argv]) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(err) == 1 and message in err[0], (argv, err)
    assert folder_bytes(out) == before
    lines = tmp_path / "idx-lines"
    assert main(["index", model, str(sentences), "--out", str(lines)]) == 0
    assert main(["index", model, str(first), "--out", str(lines), "--update"]) == 2
    assert "is an index of sentences without content hashes" in capsys.readouterr().err
    duplicate = write_documents(tmp_path / "dup.jsonl", [*corpus_rows(3), corpus_rows(1)[0]])
    assert main(["index", model, str(duplicate), *update]) == 2
    assert "dup.jsonl:4: the id 'd0' again" in capsys.readouterr().err
    assert folder_bytes(out) == before


def test_a_kill_during_an_update_leaves_the_previous_index_and_the_rerun_converges(tiny_model_dir, tmp_path):
    model = str(tiny_model_dir)
    out, clean = tmp_path / "idx", tmp_path / "clean"
    assert (
        main(
            ["index", model, str(write_documents(tmp_path / "old.jsonl", corpus_rows(20))), "--out", str(out)]
        )
        == 0
    )
    before = folder_bytes(out)
    corpus = write_documents(tmp_path / "new.jsonl", corpus_rows(1500, frozenset(range(20))))
    command = [sys.executable, "-m", "sentcl.cli.main", "index", model, str(corpus), "--out", str(out),
               "--update", "--batch-size", "4"]  # fmt: skip
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env=os.environ | {"TQDM_MININTERVAL": "0"}
    )
    deadline = time.monotonic() + 120
    seen = ""
    while time.monotonic() < deadline and "batch" not in seen and process.poll() is None:
        seen += process.stderr.read(1)  # until its progress bar shows: killed while it encodes
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert "batch" in seen, seen[-500:]
    assert folder_bytes(out) == before  # the previous index, whole
    assert len(load_index(out)) == 20
    assert main(["index", model, str(corpus), "--out", str(out), "--update"]) == 0
    assert main(["index", model, str(corpus), "--out", str(clean)]) == 0
    updated, built = load_index(out), load_index(clean)
    assert updated.documents.ids == built.documents.ids and updated.texts == built.texts
    np.testing.assert_allclose(updated.stored_vectors(), built.stored_vectors(), atol=1e-5)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".idx")] == []
    assert json.loads((out / "index.json").read_text())["size"] == 1500


def lance_rows(index) -> dict:
    """A lance index's rows by key: text, kept fields, hash and vector (row numbers aside: an update numbers
    the rows it adds after the last)."""
    table = index.table.to_arrow()
    columns = {
        name: table.column(name).to_pylist() if name in table.column_names else [None] * len(table)
        for name in ("key", "text", "fields", "hash")
    }
    vectors = np.asarray(table.column("vector").to_pylist(), dtype=np.float32)
    return {
        key: (columns["text"][i], columns["fields"][i], columns["hash"][i], vectors[i])
        for i, key in enumerate(columns["key"])
    }


def assert_same_rows(updated, built):
    got, want = lance_rows(updated), lance_rows(built)
    assert sorted(got) == sorted(want)
    for key, (text, fields, digest, vector) in want.items():
        assert got[key][:3] == (text, fields, digest), key
        np.testing.assert_allclose(got[key][3], vector, atol=1e-5)


@pytest.mark.parametrize("kind", ["flat", "ivf_pq"])
def test_a_lance_update_deletes_and_appends_only_what_changed(
    kind, tiny_model_dir, tmp_path, capsys, counted
):
    pytest.importorskip("lancedb")
    old = corpus_rows(300)
    new = [dict(r) for r in corpus_rows(300, frozenset({10, 11}))[3:]] + corpus_rows(4, start=300)
    next(r for r in new if r["_id"] == "d20")["url"] = "it's elsewhere"
    options = ["--field", "url", "--kind", kind, "--dtype", "fp32", "--backend", "lance"]
    options += ["--partitions", "2", "--sub-vectors", "4"] if kind == "ivf_pq" else []
    out, clean = tmp_path / "idx", tmp_path / "clean"
    model = str(tiny_model_dir)
    old_corpus = write_documents(tmp_path / "old.jsonl", old)
    assert main(["index", model, str(old_corpus), "--out", str(out), *options]) == 0
    counted.clear()
    corpus = write_documents(tmp_path / "new.jsonl", new)
    update = ["--field", "url", "--backend", "lance", "--update"]
    assert main(["index", model, str(corpus), "--out", str(out), *update]) == 0
    assert sum(counted) == 7
    assert "4 added, 3 changed, 3 removed, 294 unchanged; 7 documents encoded" in capsys.readouterr().out
    assert main(["index", model, str(corpus), "--out", str(clean), *options]) == 0
    updated, built = load_index(out), load_index(clean)
    assert len(updated) == len(built) == 301 and updated.kind == built.kind == kind
    assert_same_rows(updated, built)
    query = np.asarray(Batched(__import__("sentcl.model", fromlist=["load_encoder"]).load_encoder(model), 8)
                       .encode(["a man plays the ball 5"]))  # fmt: skip
    if kind == "flat":
        assert [(h.key, h.text) for h in updated.search(query, 10)[0]] == [
            (h.key, h.text) for h in built.search(query, 10)[0]
        ]
    assert {h.id for h in updated.search(query, 301)[0]} >= {300, 301, 302}  # added rows numbered after 299
    meta = json.loads((out / "index.json").read_text())
    counted.clear()
    assert main(["index", model, str(corpus), "--out", str(out), *update]) == 0
    assert sum(counted) == 0 and json.loads((out / "index.json").read_text()) == meta


def test_a_lance_update_stopped_before_it_is_named_leaves_the_previous_index(
    tiny_model_dir, tmp_path, monkeypatch
):
    """LanceDB has written the new rows (new table versions) when the update dies before index.json names
    them: the index is the previous one, and the next update starts again from it and converges."""
    pytest.importorskip("lancedb")
    import sentcl.search.lance_index as lance_index

    model = str(tiny_model_dir)
    out, clean = tmp_path / "idx", tmp_path / "clean"
    lance = ["--backend", "lance", "--dtype", "fp32"]
    assert main(["index", model, str(write_documents(tmp_path / "old.jsonl", corpus_rows(20))), "--out",
                 str(out), *lance]) == 0  # fmt: skip
    meta = (out / "index.json").read_bytes()
    corpus = write_documents(tmp_path / "new.jsonl", corpus_rows(30, frozenset(range(5)))[2:])

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the instant before index.json is replaced

    monkeypatch.setattr(lance_index, "atomic_file", killed)
    with pytest.raises(KeyboardInterrupt):
        main(["index", model, str(corpus), "--out", str(out), *lance, "--update"])
    monkeypatch.undo()
    assert (out / "index.json").read_bytes() == meta
    index = load_index(out)
    assert len(index) == 20 and sorted(lance_rows(index)) == sorted(f"d{i}" for i in range(20))
    assert main(["index", model, str(corpus), "--out", str(out), *lance, "--update"]) == 0
    assert main(["index", model, str(corpus), "--out", str(clean), *lance]) == 0
    assert_same_rows(load_index(out), load_index(clean))


def test_lance_updates_refused_in_one_line(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("lancedb")
    model = str(tiny_model_dir)
    docs = write_documents(tmp_path / "docs.jsonl", corpus_rows(12))
    sentences = tmp_path / "lines.txt"
    sentences.write_text("a dog\nthe cat\n")
    lance, built = ["--backend", "lance", "--dtype", "fp32"], tmp_path / "lance"
    assert main(["index", model, str(docs), "--out", str(built), *lance]) == 0
    assert main(["index", model, str(sentences), "--out", str(tmp_path / "lines"), *lance]) == 0
    before = folder_bytes(built)
    capsys.readouterr()
    cases = [
        ([str(docs), "--out", str(built), "--update", "--partitions", "3"], "--partitions: an update keeps"),
        (
            [str(docs), "--out", str(built), "--update", "--kind", "ivf_pq"],
            "is a flat index; an update keeps",
        ),
        (
            [str(docs), "--out", str(built), "--update", "--pooler", "cls_before_pooler"],
            "was built with weights",
        ),
        ([str(docs), "--out", str(tmp_path / "lines"), "--update"], "is an index of sentences without"),
    ]
    for argv, message in cases:
        assert main(["index", model, *argv]) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(err) == 1 and message in err[0], (argv, err)
    assert folder_bytes(built) == before
