"""A corpus too large for one process, cut into shards: the unit of work of a distributed encode
(``sentcl encode --engine ray``, sentcl/integrations/ray_data.py) and of its resume.

Inputs are a file, a folder of files or a glob, each file one of:

* text (``.txt``, ``.txt.gz``, any other suffix): one sentence per line, blank lines skipped as
  ``sentcl encode`` skips them; a row's id is ``FILE:LINE`` (the file's name and its 1-based line);
* JSON lines (``.jsonl``, ``.jsonl.gz``): one object per line with an id and a text field (``id`` and
  ``text`` unless named);
* Parquet (``.parquet``): an id and a text column (the same names).

:func:`plan_shards` counts each file's rows (a stream through text, Parquet's footer) and cuts them into
shards of at most ``rows_per_shard`` rows, never across files; :func:`read_shard` reads one shard's rows
back. A bad row (no id, no text, invalid JSON) is a :class:`~sentcl.data.readers.DataError` naming
``file:line`` (Parquet: ``file:row N``) when its shard is read: that shard fails, the others go on.
Depends on nothing above data/.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

from sentcl.data.readers import DataError, sentence_rows
from sentcl.extras import require
from sentcl.text_files import text_lines

FORMATS = ("text", "jsonl", "parquet")


@dataclass(frozen=True)
class Shard:
    name: str  # the output's stem: part-00000
    source: str  # the input file
    format: str  # text, jsonl or parquet
    start: int  # its first row (blank lines not counted)
    stop: int  # one past its last row

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Fields:
    """The names of a JSON line's or a Parquet row's id and text."""

    id: str = "id"
    text: str = "text"


def file_format(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".parquet"):
        return "parquet"
    return "jsonl" if name.endswith((".jsonl", ".ndjson")) else "text"


def input_files(source: str) -> list[Path]:
    """A file, the files of a folder (sorted; hidden ones and subfolders left out), or a glob's matches."""
    path = Path(source)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
        if not files:
            raise DataError(f"{source}: a folder with no input files")
        return files
    matches = sorted(Path(p) for p in glob.glob(source) if Path(p).is_file())  # noqa: PTH207 (absolute patterns)
    if not matches:
        what = "no file matches this pattern" if glob.has_magic(source) else "no such file or folder"
        raise DataError(f"{source}: {what}")
    return matches


def count_rows(path: Path, fields: Fields) -> int:
    """The rows a file holds: its non-blank lines, or a Parquet file's rows (its footer; the columns
    checked)."""
    if file_format(path) == "parquet":
        parquet = require("pyarrow.parquet", "parquet", "Parquet inputs")
        try:
            meta = parquet.ParquetFile(path)
        except Exception as exc:  # pyarrow's errors: ArrowInvalid, OSError
            raise DataError(f"{path}: not a Parquet file ({exc})") from None
        missing = [c for c in (fields.id, fields.text) if c not in meta.schema_arrow.names]
        if missing:
            raise DataError(
                f"{path}: no column {missing[0]!r} (it has {', '.join(meta.schema_arrow.names)}); name the "
                f"id and text columns with --id-field / --text-field"
            )
        return meta.metadata.num_rows
    return sum(1 for line in text_lines(path, DataError) if line.strip())


def plan_shards(sources: list[str], rows_per_shard: int, fields: Fields = Fields()) -> list[Shard]:
    """Every input file's rows, cut into shards of at most ``rows_per_shard`` (numbered in input order)."""
    if rows_per_shard < 1:
        raise DataError(f"rows per shard must be positive, got {rows_per_shard}")
    files = [f for source in sources for f in input_files(source)]
    shards: list[Shard] = []
    for path in files:
        rows = count_rows(path, fields)
        for start in range(0, rows, rows_per_shard):
            stop = min(rows, start + rows_per_shard)
            shards.append(Shard(f"part-{len(shards):05d}", str(path), file_format(path), start, stop))
    if not shards:
        raise DataError(f"{', '.join(sources)}: no rows to encode (every input file is empty)")
    return shards


def read_shard(shard: Shard, fields: Fields = Fields()) -> tuple[list[str], list[str]]:
    """The shard's (ids, texts), in file order."""
    ids: list[str] = []
    texts: list[str] = []
    rows = _rows(Path(shard.source), shard.format, fields, shard.start)
    for row_id, text in islice(rows, shard.stop - shard.start):
        ids.append(row_id)
        texts.append(text)
    if len(ids) != shard.rows:
        raise DataError(
            f"{shard.source}: {shard.start + len(ids)} rows now, {shard.stop} when the job was planned; the "
            f"file changed: start the job again (--overwrite)"
        )
    return ids, texts


def _rows(path: Path, format: str, fields: Fields, start: int) -> Iterator[tuple[str, str]]:
    """The file's rows from row ``start`` on; the rows before it are counted, not read (a bad one belongs
    to another shard)."""
    if format == "text":
        for line, (sentence,) in islice(sentence_rows(path), start, None):
            yield f"{path.name}:{line}", sentence
    elif format == "jsonl":
        yield from _json_rows(path, fields, start)
    else:
        yield from _parquet_rows(path, fields, start)


def _json_rows(path: Path, fields: Fields, start: int) -> Iterator[tuple[str, str]]:
    index = -1
    for line, raw in enumerate(text_lines(path, DataError), start=1):
        if not raw.strip():
            continue
        index += 1
        if index < start:
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{line}: not a JSON object ({exc.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{line}: not a JSON object")
        yield _checked(record.get(fields.id), record.get(fields.text), fields, f"{path}:{line}")


def _parquet_rows(path: Path, fields: Fields, start: int) -> Iterator[tuple[str, str]]:
    parquet = require("pyarrow.parquet", "parquet", "Parquet inputs")
    row = 0
    for batch in parquet.ParquetFile(path).iter_batches(columns=[fields.id, fields.text], batch_size=8192):
        if row + batch.num_rows <= start:
            row += batch.num_rows
            continue
        for row_id, text in zip(*(batch.column(i).to_pylist() for i in range(2)), strict=True):
            row += 1
            if row > start:
                yield _checked(row_id, text, fields, f"{path}:row {row}")


def _checked(row_id, text, fields: Fields, where: str) -> tuple[str, str]:
    if row_id is None or isinstance(row_id, (dict, list)):
        raise DataError(f"{where}: no id (the {fields.id!r} field)")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: no text (the {fields.text!r} field must be a non-empty string)")
    return str(row_id), text.strip()
