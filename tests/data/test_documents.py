"""A search corpus read as documents (sentcl/data/documents.py): ids, texts and kept fields from a BEIR
folder, JSON lines (gzipped too) and Parquet; every bad row one DataError naming its place."""

from __future__ import annotations

import gzip
import json

import pytest

from sentcl.data.documents import DocumentFields, is_document_corpus, read_documents
from sentcl.data.readers import DataError
from sentcl.text_files import MAX_LINE_BYTES


def lines(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def test_a_beir_folder_reads_as_beirs_evaluation_joins_it(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(
        lines([{"_id": "d1", "title": "T", "text": " body "}, {"_id": "d2", "title": "", "text": "b"}])
    )
    documents = read_documents(tmp_path)
    assert documents.ids == ["d1", "d2"] and documents.texts == ["T body", "b"]
    assert documents.fields == {"id": "_id", "text": ["title", "text"], "keep": []}
    assert is_document_corpus(tmp_path) and not is_document_corpus(tmp_path / "corpus.txt")


def test_without_an__id_the_id_field_is_id_and_kept_fields_travel_as_they_are(tmp_path):
    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(lines([{"id": 1, "text": "x", "tags": ["a", "b"]}, {"id": 2, "text": "y"}]))
    documents = read_documents(path, DocumentFields(keep=("tags",)))
    assert documents.ids == ["1", "2"] and documents.kept == [{"tags": ["a", "b"]}, {"tags": None}]


def test_parquet_rows_are_named_by_their_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "body": ["x", None]}), path)
    with pytest.raises(DataError, match=r"docs.parquet:row 2: document 'b': field 'body' is missing"):
        read_documents(path, DocumentFields(text=("body",)))


def test_a_document_over_the_line_limit_is_said_as_such(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(
        lines([{"_id": "a", "text": "x"}]) + json.dumps({"_id": "b", "text": "y" * MAX_LINE_BYTES})
    )
    with pytest.raises(DataError, match=r"docs.jsonl:2: a document over 1,048,576 bytes on one line"):
        read_documents(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"docs.jsonl:1: the corpus has no documents"),
        ("[1, 2]\n", r"docs.jsonl:1: a document is a JSON object"),
        ("{not json\n", r"docs.jsonl:1: invalid JSON"),
        ('{"_id": true, "text": "x"}\n', r"docs.jsonl:1: no id in field '_id' \(bool True\)"),
    ],
)
def test_bad_rows_are_one_error_naming_the_line(tmp_path, text, message):
    path = tmp_path / "docs.jsonl"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        read_documents(path)
