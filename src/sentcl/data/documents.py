"""A search corpus as the user keeps it: documents with ids and fields, for ``sentcl index`` and ``search``.

The corpus is a BEIR folder (its ``corpus.jsonl``), a JSON-lines file (``.jsonl``, ``.ndjson``, gzipped too)
or a Parquet file, one document a row:

* its **id**: the ``id`` field named (``--id-field``), else ``_id`` (BEIR) where the first row has one, else
  ``id``; a string or an integer, never empty, never twice in one corpus;
* its **text**: the text fields named (``--text-field``, in order) joined by a space; by default BEIR's
  ``title`` and ``text``, joined as BEIR's evaluation joins them (a missing or empty title is no part);
  every field named must be a string, and a document whose joined text is empty is an error, not a
  skipped row;
* the **fields kept** (``--field``): values carried into every search result as they are (JSON values),
  e.g. a title or a URL; a field a document lacks is ``null`` in its results.

Every problem is one DataError naming ``file:line`` (Parquet: ``file:row N``) or the field. Depends on
nothing above data/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sentcl.data.corpus import corpus_file
from sentcl.data.readers import DataError
from sentcl.extras import require
from sentcl.text_files import MAX_LINE_BYTES, text_lines

#: the text of a BEIR document: its title and text, joined by a space
BEIR_TEXT = ("title", "text")
#: inputs read as documents rather than as one text a line
DOCUMENT_SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".jsonl.gz", ".ndjson.gz")


@dataclass(frozen=True)
class DocumentFields:
    """Which fields of a row are its id, its text and the values kept for its search results."""

    id: str | None = None  # None: "_id" where the first row has one, else "id"
    text: tuple[str, ...] = ()  # (): BEIR's title and text
    keep: tuple[str, ...] = ()

    @property
    def text_fields(self) -> tuple[str, ...]:
        return self.text or BEIR_TEXT


@dataclass
class Documents:
    """A corpus's ids, the texts its model encodes and the fields kept for its results, in file order."""

    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    #: the fields that made them (the id field as resolved), recorded with an index
    fields: dict[str, Any] = field(default_factory=dict)
    #: each text's first text field where there are more (BEIR's title; "" where none): the part a
    #: document's passages repeat (sentcl/passages.py); the text is the title, a space and the body
    titles: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def body(self, row: int) -> str:
        """Document ``row``'s text after its title."""
        title = self.titles[row]
        return self.texts[row][len(title) + 1 :] if title else self.texts[row]


def is_document_corpus(path: str | Path) -> bool:
    """A BEIR folder, JSON lines or Parquet: a corpus of documents, not a text with one entry a line."""
    return Path(path).is_dir() or str(path).lower().endswith(DOCUMENT_SUFFIXES)


def read_documents(path: str | Path, fields: DocumentFields = DocumentFields()) -> Documents:
    """Every document of ``path`` (module docstring), checked whole before anything is encoded."""
    source = corpus_file(path)  # a BEIR folder's corpus.jsonl, or the file itself
    rows = _parquet_rows(source) if source.name.lower().endswith(".parquet") else _json_rows(source)
    documents = Documents()
    seen: dict[str, str] = {}
    id_field = fields.id
    for where, row in rows:
        if id_field is None:  # BEIR's _id where the corpus has it, else id
            id_field = "_id" if "_id" in row else "id"
        key = _document_id(row.get(id_field), id_field, where)
        if key in seen:
            raise DataError(f"{where}: the id {key!r} again (first at {seen[key]})")
        seen[key] = where
        documents.ids.append(key)
        title, text = _document_text(row, fields, where, key)
        documents.titles.append(title)
        documents.texts.append(text)
        documents.kept.append({name: row.get(name) for name in fields.keep})
    if not documents.ids:
        raise DataError(f"{source}:1: the corpus has no documents")
    documents.fields = {"id": id_field, "text": list(fields.text_fields), "keep": list(fields.keep)}
    return documents


def _document_id(value: Any, id_field: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        shown = "missing" if value is None else f"{type(value).__name__} {value!r}"[:80]
        raise DataError(
            f"{where}: no id in field {id_field!r} ({shown}); name the id's field with --id-field"
        )
    return str(value)


def _document_text(row: dict[str, Any], fields: DocumentFields, where: str, key: str) -> tuple[str, str]:
    """The document's title (its first text field, where there are more and it has one) and its text."""
    parts, title = [], ""
    for name in fields.text_fields:
        value = row.get(name)
        if value is None and name == "title" and not fields.text:  # BEIR's title is optional
            continue
        if not isinstance(value, str):
            shown = "missing" if value is None else f"a {type(value).__name__}, not text"
            raise DataError(
                f"{where}: document {key!r}: field {name!r} is {shown} (the text fields: --text-field)"
            )
        if value.strip():
            parts.append(value.strip())
            if name == fields.text_fields[0] and len(fields.text_fields) > 1:
                title = value.strip()
    if not parts:
        raise DataError(f"{where}: document {key!r} has no text (fields {', '.join(fields.text_fields)})")
    return title, " ".join(parts)


def _json_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    cut: set[int] = set()
    for number, line in enumerate(text_lines(path, DataError, cut), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if number in cut:
            raise DataError(
                f"{where}: a document over {MAX_LINE_BYTES:,} bytes on one line; sentcl reads JSON lines of "
                f"at most that size"
            )
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise DataError(f"{where}: invalid JSON") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: a document is a JSON object")
        yield where, row


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    parquet = require("pyarrow.parquet", "parquet", "Parquet inputs")
    try:
        reader = parquet.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors: ArrowInvalid, OSError
        raise DataError(f"{path}: not a Parquet file ({exc})") from None
    number = 0
    for batch in reader.iter_batches(batch_size=8192):
        for row in batch.to_pylist():
            number += 1
            yield f"{path}:row {number}", row
