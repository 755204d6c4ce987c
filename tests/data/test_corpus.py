"""A domain's corpus as training rows: BEIR folders, corpus.jsonl and text files, as sentences or documents;
bad input is one line naming the file and line, and nothing is skipped."""

import json
import os
from pathlib import Path

import pytest

from sentcl.config import ConfigError
from sentcl.data.corpus import read_corpus
from sentcl.data.readers import DataError
from sentcl.training.recipe import recipe_from_dict

DOCUMENTS = [
    {
        "_id": "d1",
        "title": "Dogs in parks",
        "text": "The dog runs in the park. It plays with a ball. Dr. Smith watched.",
    },
    {"_id": "d2", "title": "", "text": "A woman reads a book. She reads it at night."},
    {"_id": "d3", "title": "Cats", "text": "The cat sleeps."},
]


def beir_folder(tmp_path: Path, documents=DOCUMENTS) -> Path:
    folder = tmp_path / "beir"
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents), encoding="utf-8")
    return folder


def test_a_beir_folder_as_sentences_keeps_each_documents_line(tmp_path):
    records = read_corpus(beir_folder(tmp_path), "sentence")
    assert [row[0] for row in records.rows] == [
        "Dogs in parks", "The dog runs in the park.", "It plays with a ball.", "Dr. Smith watched.",
        "A woman reads a book.", "She reads it at night.", "Cats", "The cat sleeps.",
    ]  # fmt: skip
    assert records.lines == [1, 1, 1, 1, 2, 2, 3, 3]  # a sentence names its document's line


def test_documents_and_text_files(tmp_path):
    records = read_corpus(beir_folder(tmp_path) / "corpus.jsonl", "document")
    assert [r[0] for r in records.rows][1] == "A woman reads a book. She reads it at night."
    text = tmp_path / "docs.txt"
    text.write_text("First document. Two sentences.\n\nSecond one.\n", encoding="utf-8")
    records = read_corpus(text, "sentence")
    assert [r[0] for r in records.rows] == ["First document.", "Two sentences.", "Second one."]
    assert records.lines == [1, 1, 3]


@pytest.mark.parametrize(
    "content,message",
    [
        ("", r"corpus\.jsonl:1: the corpus has no documents"),
        ('{"_id": "a", "title": "", "text": "  "}\n', r"corpus\.jsonl:1: the document 'a' has no text"),
        ('{"_id": "a", "text": "fine."}\n{"_id": "b", "text": \n', r"corpus\.jsonl:2: invalid JSON"),
        ('{"_id": "a", "body": "no text key"}\n', r"corpus\.jsonl:1: a document is an object with 'text'"),
    ],
)
def test_bad_corpora_are_one_line_naming_file_and_line(tmp_path, content, message):
    folder = tmp_path / "beir"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message) as error:
        read_corpus(folder, "sentence")
    assert "\n" not in str(error.value)


def test_a_folder_without_a_corpus_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"a folder without corpus\.jsonl"):
        read_corpus(tmp_path, "document")


def test_the_recipe_checks_the_unit(tmp_path):
    base = {"model": {"name_or_path": "m"}, "training": {"output_dir": str(tmp_path / "r")}}
    with pytest.raises(
        ConfigError, match=r"data\.corpus_unit: 'words' is not one of none, sentence, document"
    ):
        recipe_from_dict(base | {"data": {"train_file": "x", "corpus_unit": "words"}})
    with pytest.raises(ConfigError, match="a corpus is read into memory"):
        recipe_from_dict(base | {"data": {"train_file": "x", "corpus_unit": "sentence", "streaming": True}})


@pytest.mark.skipif(
    not (Path(os.environ.get("SENTCL_DATA", "../shared/data")) / "beir" / "scifact").is_dir(),
    reason="needs ../shared/data/beir/scifact",
)
def test_scifact_splits_near_its_sources_sentence_count():
    """SciFact's source lists 45,952 sentences for its 5,183 abstracts (the text joins them with spaces)."""
    folder = Path(os.environ.get("SENTCL_DATA", "../shared/data")) / "beir" / "scifact"
    records = read_corpus(folder, "sentence")
    sentences = len(records) - 5_183  # each abstract's title is a row of its own
    assert 45_952 * 0.98 <= sentences <= 45_952 * 1.03
    assert len(read_corpus(folder, "document")) == 5_183


def test_ict_pairs_each_sentence_with_its_passage(tmp_path):
    records = read_corpus(beir_folder(tmp_path), "ict")
    assert records.n_columns == 2
    first = [row for row, line in zip(records.rows, records.lines, strict=True) if line == 1]
    assert [s for s, _ in first] == ["Dogs in parks", "The dog runs in the park.", "It plays with a ball.",
                                     "Dr. Smith watched."]  # fmt: skip
    for sentence, passage in first:
        others = [s for s, _ in first if s != sentence]
        assert all(o in passage for o in others)  # the passage is the rest of the document
    assert records.rows == read_corpus(beir_folder(tmp_path / "again"), "ict").rows  # the same draw
    kept = sum(s in p for s, p in read_corpus(scifact_like(tmp_path), "ict").rows)
    assert 0 < kept < 60  # about 10 % of 400 pairs keep their sentence


def scifact_like(tmp_path):
    words = ["The dog runs.", "A cat sleeps.", "She reads a book.", "They walk home.", "It rains today.",
             "We eat bread.", "He plays music.", "Birds sing loudly."]  # fmt: skip
    docs = [
        {"_id": str(i), "title": "", "text": " ".join(words[(i + j) % 8] for j in range(8))}
        for i in range(50)
    ]
    return beir_folder(tmp_path / "many", docs)


def test_ict_needs_documents_of_two_sentences(tmp_path):
    folder = beir_folder(tmp_path, [{"_id": "a", "text": "One sentence only."}])
    with pytest.raises(DataError, match=r"corpus\.jsonl:1: no document has two sentences"):
        read_corpus(folder, "ict")


def test_a_document_over_the_line_limit_is_said_as_such(tmp_path):
    """Issue 70 item 7: a document over 1 MiB on its line was reported as "invalid JSON"."""
    from sentcl.data.corpus import documents

    path = tmp_path / "corpus.jsonl"
    big = json.dumps({"_id": "big", "text": "word " * 300_000})  # 1.5 MB
    path.write_text(json.dumps({"_id": "a", "text": "a short one"}) + "\n" + big + "\n")
    with pytest.raises(DataError, match=r"corpus.jsonl:2: a document over 1,048,576 bytes on one line"):
        list(documents(path))
