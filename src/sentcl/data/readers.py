"""Training-data readers.

* one sentence per line (``.txt``, ``.txt.gz``) → unsupervised records, one view each;
* csv / tsv (optionally ``.gz``) with 2 columns ``sent0,sent1`` or 3 columns ``sent0,sent1,hard_neg``
  (SimCSE's layout), header optional → supervised records;
* JSON Lines (``.jsonl``, optionally ``.gz``), Parquet (``.parquet``, read with pyarrow) and a folder
  written by ``datasets``' ``save_to_disk``, with named columns: the first of ``LAYOUTS`` whose columns
  are all there (``sentence``; ``sent0, sent1[, hard_neg]``; ``sentence, entity[, hard_negative_entity]``
  …). They are read whole into memory (no streaming yet).

Every problem is one :class:`DataError` naming ``file:line`` (``file: row N`` for Parquet and datasets):
a missing or empty file, an undecodable byte, a row with the wrong number of fields or an empty field.
Nothing is skipped silently: blank lines of a ``.txt`` are skipped and their count is logged.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from sentcl.errors import UserError
from sentcl.extras import require
from sentcl.text_files import text_lines

logger = logging.getLogger(__name__)

#: Header names accepted (case-insensitive) in the first row of a csv/tsv.
HEADER_NAMES = {"sent0", "sent1", "hard_neg", "anchor", "positive", "negative", "sentence1", "sentence2"}
HEADER_NAMES |= {"sentence", "entity", "hard_negative_entity"}  # EASE's (sentence, entity) pairs


class DataError(UserError, ValueError):
    """Bad input data; the message starts with ``file:line``."""


@dataclass(frozen=True)
class Records:
    """Rows of sentences: ``rows[i]`` holds the V texts of example i; ``lines[i]`` its source line."""

    path: str
    rows: list[tuple[str, ...]]
    lines: list[int]
    #: what ``lines`` count: file lines, or rows of a Parquet file / datasets folder (from 1)
    unit: str = "line"

    @property
    def n_columns(self) -> int:
        return len(self.rows[0])

    def __len__(self) -> int:
        return len(self.rows)


def _base_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def sentence_rows(path: str | Path):
    """(line, (sentence,)) of a one-sentence-per-line file, streamed; blank lines are skipped and counted
    in the log; an empty file is an error."""
    path = Path(path)
    kept = blank = 0
    for number, line in enumerate(text_lines(path, DataError), start=1):
        sentence = line.strip()
        if not sentence:
            blank += 1
            continue
        kept += 1
        yield number, (sentence,)
    if not kept:
        raise DataError(f"{path}:1: the file is empty (no sentences)")
    if blank:
        logger.info("%s: skipped %d blank line(s), kept %d sentences", path, blank, kept)


def _records(path: str | Path, rows, unit: str = "line") -> Records:
    numbered = list(rows)
    return Records(str(path), [r for _, r in numbered], [n for n, _ in numbered], unit)


def read_sentences(path: str | Path) -> Records:
    """One sentence per line; blank lines are skipped and counted in the log."""
    return _records(path, sentence_rows(path))


def table_rows(path: str | Path, header: bool | None = None):
    """(line, cells) of a csv/tsv with 2 or 3 columns, streamed. ``header=None`` detects SimCSE-style
    column names in row 1."""
    path = Path(path)
    delimiter = "\t" if _base_suffix(path) == ".tsv" else ","
    cut: set[int] = set()
    reader = csv.reader(text_lines(path, DataError, cut), delimiter=delimiter, strict=True)

    def fields(record: list[str], line: int) -> str:
        """The record's field count, "at least" where its line was cut at MAX_LINE_BYTES."""
        return f"at least {len(record):,} fields" if line in cut else f"{len(record)} field(s)"

    n_columns = None
    first = True
    start_line = 1
    kept = 0
    try:
        for record in reader:
            line = start_line
            start_line = reader.line_num + 1
            if not record or all(not cell.strip() for cell in record):
                continue  # a blank line is no row
            if first:
                first = False
                is_header = header if header is not None else _looks_like_header(record)
                if is_header:
                    if len(record) not in (2, 3):
                        raise DataError(f"{path}:{line}: header has {fields(record, line)}, expected 2 or 3")
                    n_columns = len(record)
                    continue
            if n_columns is None:
                if len(record) not in (2, 3):
                    raise DataError(
                        f"{path}:{line}: {fields(record, line)}, expected 2 (sent0,sent1) "
                        f"or 3 (sent0,sent1,hard_neg)"
                    )
                n_columns = len(record)
            if len(record) != n_columns:
                raise DataError(
                    f"{path}:{line}: {fields(record, line)}, expected {n_columns} like the rows above"
                )
            cells = tuple(cell.strip() for cell in record)
            empty = [i for i, cell in enumerate(cells) if not cell]
            if empty:
                raise DataError(f"{path}:{line}: field {empty[0] + 1} is empty")
            kept += 1
            yield line, cells
    except csv.Error as exc:
        raise DataError(f"{path}:{reader.line_num}: malformed {delimiter!r}-separated row ({exc})") from None
    if first:
        raise DataError(f"{path}:1: the file is empty")
    if not kept:
        raise DataError(f"{path}:1: the file has no data rows")


def read_table(path: str | Path, header: bool | None = None) -> Records:
    """csv/tsv with 2 or 3 columns. ``header=None`` detects SimCSE-style column names in row 1."""
    return _records(path, table_rows(path, header))


def _looks_like_header(record: list[str]) -> bool:
    return all(cell.strip().lower() in HEADER_NAMES for cell in record)


#: Named-column layouts of JSON Lines, Parquet and datasets folders, tried in this order: the first whose
#: columns are all present is read (other columns are ignored and logged).
LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("sent0", "sent1", "hard_neg"),
    ("sent0", "sent1"),
    ("anchor", "positive", "negative"),
    ("anchor", "positive"),
    ("sentence1", "sentence2"),
    ("sentence", "entity", "hard_negative_entity"),
    ("sentence", "entity"),
    ("sentence",),
    ("text",),
)


def choose_layout(columns, where: str) -> tuple[str, ...]:
    for layout in LAYOUTS:
        if all(name in columns for name in layout):
            unused = sorted(set(columns) - set(layout))
            if unused:
                logger.info(
                    "%s: reading columns %s; ignoring %s", where, ", ".join(layout), ", ".join(unused)
                )
            return layout
    known = "; ".join(", ".join(layout) for layout in LAYOUTS)
    raise DataError(f"{where}: columns {sorted(columns)} match no layout (one of: {known})")


def _cells(values, layout: tuple[str, ...], where: str) -> tuple[str, ...]:
    cells = []
    for name, value in zip(layout, values, strict=True):
        if not isinstance(value, str):
            raise DataError(f"{where}: {name!r} is {type(value).__name__}, not text")
        if not value.strip():
            raise DataError(f"{where}: {name!r} is empty")
        cells.append(value.strip())
    return tuple(cells)


def jsonl_rows(path: str | Path):
    """(line, cells) of JSON Lines with named columns (``LAYOUTS``), streamed; blank lines are skipped."""
    path = Path(path)
    layout = None
    for number, line in enumerate(text_lines(path, DataError), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: invalid JSON ({exc.msg}, column {exc.colno})") from None
        except RecursionError:
            raise DataError(f"{path}:{number}: JSON nested too deeply to be a row") from None
        except ValueError as exc:  # e.g. an integer of more than 4,300 digits
            raise DataError(f"{path}:{number}: unreadable JSON ({str(exc)[:120]})") from None
        if not isinstance(item, dict):
            raise DataError(f"{path}:{number}: a JSON object with named columns was expected")
        if layout is None:
            layout = choose_layout(item, f"{path}:{number}")
        missing = [name for name in layout if name not in item]
        if missing:
            raise DataError(f"{path}:{number}: no {missing[0]!r}, which the rows above have")
        yield number, _cells([item[name] for name in layout], layout, f"{path}:{number}")
    if layout is None:
        raise DataError(f"{path}:1: the file has no rows")


def read_jsonl(path: str | Path) -> Records:
    """JSON Lines: one object per line with named columns (``LAYOUTS``); blank lines are skipped."""
    return _records(path, jsonl_rows(path))


def _batch_rows(batches, layout: tuple[str, ...], path: Path):
    """(row, cells) of Arrow record batches (Parquet, datasets), numbered from 1; errors name the row."""
    number = 0
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in layout]
        for values in zip(*columns, strict=True):
            number += 1
            yield number, _cells(values, layout, f"{path}: row {number}")
    if not number:
        raise DataError(f"{path}: no rows")


def parquet_rows(path: str | Path):
    """(row, cells) of a Parquet file with named columns (``LAYOUTS``), streamed batch by batch."""
    pq = require("pyarrow.parquet", "parquet", f"{path} (a Parquet file)")

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        source = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types
        raise DataError(f"{path}: not a Parquet file ({exc})") from None
    layout = choose_layout(source.schema_arrow.names, str(path))
    yield from _batch_rows(_checked_batches(source, layout, path), layout, path)


def _checked_batches(source, layout: tuple[str, ...], path: Path):
    """The file's record batches, streamed; a page that fails to decode is a DataError naming the rows."""
    pa = require("pyarrow", "parquet", "a Parquet file")

    batches = source.iter_batches(columns=list(layout), batch_size=65536)
    rows = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{path}: corrupt data after row {rows} ({str(exc)[:200]})") from None
        rows += batch.num_rows
        yield batch


def read_parquet(path: str | Path) -> Records:
    """A Parquet file with named columns (``LAYOUTS``), read batch by batch with pyarrow."""
    return _records(path, parquet_rows(path), unit="row")


def read_datasets_folder(path: str | Path) -> Records:
    """A folder written by ``datasets``' ``save_to_disk`` (its ``train`` split if it holds several)."""
    datasets = require("datasets", "datasets", f"{path} (a datasets folder)")
    DatasetDict, load_from_disk = datasets.DatasetDict, datasets.load_from_disk  # noqa: N806
    path = Path(path)
    try:
        dataset = load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise DataError(f"{path}: not a datasets folder ({exc})") from None
    if isinstance(dataset, DatasetDict):
        if "train" not in dataset:
            raise DataError(f"{path}: splits {sorted(dataset)} and no 'train' split to read")
        dataset = dataset["train"]
    layout = choose_layout(dataset.column_names, str(path))
    table = dataset.select_columns(list(layout)).data.table
    return _records(path, _batch_rows(table.to_batches(max_chunksize=65536), layout, path), unit="row")


STREAMED = (".txt", "", ".csv", ".tsv", ".jsonl", ".ndjson", ".parquet")


def iter_records(path: str | Path, header: bool | None = None):
    """(line or row number, cells) of a training file, read as a stream in constant memory: what
    ``data.streaming`` trains from. A ``datasets`` folder is memory-mapped by ``datasets`` and read whole."""
    path = Path(path)
    kind = _base_suffix(path)
    if path.is_dir() or kind not in STREAMED:
        raise DataError(f"{path}: streaming reads .txt, .csv, .tsv, .jsonl (optionally .gz) and .parquet")
    if kind in (".csv", ".tsv"):
        return table_rows(path, header)
    if kind in (".jsonl", ".ndjson"):
        return jsonl_rows(path)
    if kind == ".parquet":
        return parquet_rows(path)
    return sentence_rows(path)


def read_records(path: str | Path, header: bool | None = None) -> Records:
    """Dispatch on the extension: .txt → sentences; .csv/.tsv → pairs or triplets; .jsonl and .parquet,
    and a ``datasets`` folder, by their named columns (``LAYOUTS``)."""
    path = Path(path)
    if path.is_dir():
        return read_datasets_folder(path)
    kind = _base_suffix(path)
    if kind in (".csv", ".tsv"):
        return read_table(path, header=header)
    if kind in (".jsonl", ".ndjson"):
        return read_jsonl(path)
    if kind == ".parquet":
        return read_parquet(path)
    if kind in (".txt", ""):
        return read_sentences(path)
    raise DataError(
        f"{path}: unsupported file type {kind!r} (use .txt, .csv, .tsv or .jsonl, optionally .gz; .parquet; "
        f"or a datasets folder)"
    )
