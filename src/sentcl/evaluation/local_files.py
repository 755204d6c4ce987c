"""Reading the user's own evaluation data: pair files and BEIR retrieval folders (local.py evaluates them).

**Pair files** (``.csv``, ``.tsv``, ``.jsonl``, each optionally ``.gz``) name their columns (a header row, or
the keys of each JSON object): two texts (``sentence1, sentence2``; or ``sent0, sent1``; or ``text1,
text2``) and ``score`` (graded) or ``label`` (0 or 1).

**Retrieval folders** in BEIR's layout: ``corpus.jsonl`` (``{"_id", "title"?, "text"}``), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id, corpus-id, score``, a header row; test, else the
only split; name ``FOLDER/qrels/dev.tsv`` for another). A document is its title and text joined by a space, as
BEIR encodes it.

Every problem with a file is one :class:`LocalTaskError` naming ``file:line``; nothing is skipped silently.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from sentcl.errors import UserError
from sentcl.text_files import read_text

logger = logging.getLogger(__name__)

#: the text columns of a pair file, tried in this order
TEXT_COLUMNS = (("sentence1", "sentence2"), ("sent0", "sent1"), ("text1", "text2"))
PAIR_SUFFIXES = (".csv", ".tsv", ".jsonl")


class LocalTaskError(UserError, ValueError):
    """A malformed pair file or retrieval folder; the message starts with file:line."""


# ------------------------------------------------------------------------------------------ what a path is
def base_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def is_retrieval(path: Path) -> bool:
    """A BEIR folder, or the qrels file of one."""
    if path.is_dir():
        return (path / "corpus.jsonl").exists() or (path / "qrels").is_dir()
    return path.suffix == ".tsv" and path.parent.name == "qrels"


def is_pair_file(path: Path) -> bool:
    return path.is_file() and not is_retrieval(path)


def task_name(path: Path) -> str:
    if path.is_file() and path.parent.name == "qrels":
        folder = path.parent.parent.name
        return folder if path.stem == "test" else f"{folder}-{path.stem}"
    name = path.name
    for suffix in (".gz", *PAIR_SUFFIXES):
        name = name.removesuffix(suffix)
    return name or str(path)


def unique_names(paths: list[Path]) -> list[str]:
    """One metric prefix per path (its stem; a second path with the same stem gets ``-2``)."""
    names: list[str] = []
    for path in paths:
        name, n = task_name(path), 2
        while name in names:
            name = f"{task_name(path)}-{n}"
            n += 1
        names.append(name)
    return names


# --------------------------------------------------------------------------------------------- reading
def _text(path: Path) -> str:
    """The whole file as text (a gzip decompressed); an undecodable byte is an error naming its line."""
    if not path.is_file():
        raise LocalTaskError(f"{path}: no such file")
    return read_text(path, LocalTaskError)


def _json_lines(path: Path):
    """(line, object) of a JSON Lines file; blank lines are no rows."""
    for number, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise LocalTaskError(f"{path}:{number}: invalid JSON ({str(exc)[:120]})") from None
        if not isinstance(item, dict):
            raise LocalTaskError(f"{path}:{number}: a JSON object was expected")
        yield number, item


def _table_rows(path: Path, delimiter: str):
    """(line, {column: cell}) of a csv/tsv with a header row."""
    reader = csv.reader(io.StringIO(_text(path), newline=""), delimiter=delimiter, strict=True)
    header = None
    start = 1
    try:
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not cells or all(not cell.strip() for cell in cells):
                continue
            if header is None:
                header = [cell.strip().lower() for cell in cells]
                continue
            if len(cells) != len(header):
                raise LocalTaskError(
                    f"{path}:{line}: {len(cells)} field(s), expected {len(header)} like the header"
                )
            yield line, dict(zip(header, cells, strict=True))
    except csv.Error as exc:
        raise LocalTaskError(
            f"{path}:{reader.line_num}: malformed {delimiter!r}-separated row ({exc})"
        ) from None
    if header is None:
        raise LocalTaskError(f"{path}:1: the file is empty")


def _rows(path: Path):
    suffix = base_suffix(path)
    if suffix == ".jsonl":
        return _json_lines(path)
    if suffix in (".csv", ".tsv"):
        return _table_rows(path, "\t" if suffix == ".tsv" else ",")
    raise LocalTaskError(
        f"{path}: a pair file is .csv, .tsv or .jsonl (optionally .gz), not {suffix or 'this'}"
    )


def _nonblank(value, column: str, where: str) -> str:
    if not isinstance(value, str):
        raise LocalTaskError(f"{where}: {column!r} is {type(value).__name__}, not text")
    if not value.strip():
        raise LocalTaskError(f"{where}: {column!r} is empty")
    return value.strip()


def _number(value, column: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise LocalTaskError(f"{where}: {column} {value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise LocalTaskError(f"{where}: {column} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise LocalTaskError(f"{where}: {column} {value!r} is not a finite number")
    return number


@dataclass
class Pairs:
    path: Path
    kind: str  # "score" | "label"
    sentences1: list[str] = field(default_factory=list)
    sentences2: list[str] = field(default_factory=list)
    gold: list[float] = field(default_factory=list)


def read_pairs(path: str | Path) -> Pairs:
    """A pair file; every row is kept or the file is refused."""
    path = Path(path)
    pairs = None
    columns: tuple[str, str] = ("", "")
    for line, row in _rows(path):
        where = f"{path}:{line}"
        if pairs is None:
            found = next((c for c in TEXT_COLUMNS if all(name in row for name in c)), None)
            kinds = [kind for kind in ("score", "label") if kind in row]
            if found is None or len(kinds) != 1:
                names = " or ".join(", ".join(c) for c in TEXT_COLUMNS)
                raise LocalTaskError(
                    f"{where}: columns {sorted(row)}; a pair file names two texts ({names}) and one of "
                    f"score (graded) or label (0/1)"
                )
            columns, pairs = found, Pairs(path, kinds[0])
        missing = [name for name in (*columns, pairs.kind) if name not in row]
        if missing:
            raise LocalTaskError(f"{where}: no {missing[0]!r}, which the rows above have")
        pairs.sentences1.append(_nonblank(row[columns[0]], columns[0], where))
        pairs.sentences2.append(_nonblank(row[columns[1]], columns[1], where))
        gold = _number(row[pairs.kind], pairs.kind, where)
        if pairs.kind == "label" and gold not in (0.0, 1.0):
            raise LocalTaskError(
                f"{where}: label {row[pairs.kind]!r} is not 0 or 1 (a graded similarity goes in a score "
                f"column)"
            )
        pairs.gold.append(gold)
    if pairs is None:
        raise LocalTaskError(f"{path}:1: the file has no rows")
    if len(pairs.gold) < 2:
        raise LocalTaskError(f"{path}: one pair; a correlation or a threshold needs at least two")
    if len(set(pairs.gold)) == 1:
        what = "every score is" if pairs.kind == "score" else "every label is"
        raise LocalTaskError(f"{path}: {what} {pairs.gold[0]:g}; the metrics need both kinds of pairs")
    return pairs


@dataclass
class Retrieval:
    qrels_path: Path
    corpus_ids: list[str]
    corpus: list[str]
    query_ids: list[str]
    queries: list[str]
    #: query row → {corpus row: graded relevance > 0}
    relevant: list[dict[int, float]]
    #: each document's title and body apart (``corpus`` joins them), for passages
    titles: list[str] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)


def qrels_file(path: Path) -> Path:
    """The qrels file a retrieval task names: itself, or its folder's test.tsv (or its one split)."""
    if path.is_file():
        return path
    folder = path / "qrels"
    if not folder.is_dir():
        raise LocalTaskError(f"{path}: no qrels folder (BEIR's layout: corpus.jsonl, queries.jsonl, qrels/)")
    if (folder / "test.tsv").is_file():
        return folder / "test.tsv"
    splits = sorted(folder.glob("*.tsv"))
    if len(splits) != 1:
        named = ", ".join(s.name for s in splits) or "none"
        raise LocalTaskError(f"{folder}: no test.tsv (found: {named}); name the split's file as the task")
    return splits[0]


def _documents(path: Path, with_title: bool) -> tuple[list[str], list[str], list[str], list[str]]:
    """Ids, texts (title and text joined by a space), titles and texts of a BEIR corpus or queries file."""
    ids: list[str] = []
    texts: list[str] = []
    titles: list[str] = []
    bodies: list[str] = []
    seen: dict[str, int] = {}
    for line, item in _json_lines(path):
        where = f"{path}:{line}"
        raw_id = item.get("_id")
        if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool) or str(raw_id) == "":
            raise LocalTaskError(f"{where}: no '_id' (a string)")
        key = str(raw_id)
        if key in seen:
            raise LocalTaskError(f"{where}: _id {key!r} again (first on line {seen[key]})")
        seen[key] = line
        text = item.get("text", "")
        title = item.get("title", "") if with_title else ""
        for column, value in (("text", text), ("title", title)):
            if not isinstance(value, str):
                raise LocalTaskError(f"{where}: {column!r} is {type(value).__name__}, not text")
        joined = f"{title.strip()} {text.strip()}".strip()
        if not joined:
            raise LocalTaskError(f"{where}: _id {key!r} has no text")
        ids.append(key)
        texts.append(joined)
        titles.append(title.strip())
        bodies.append(text.strip())
    if not ids:
        raise LocalTaskError(f"{path}:1: the file has no rows")
    return ids, texts, titles, bodies


def read_retrieval(path: str | Path) -> Retrieval:
    """A BEIR folder (or its qrels file): corpus, the judged queries and their relevant documents."""
    path = Path(path)
    qrels = qrels_file(path)
    folder = qrels.parent.parent
    corpus_ids, corpus, titles, bodies = _documents(folder / "corpus.jsonl", with_title=True)
    all_query_ids, all_queries, _, _ = _documents(folder / "queries.jsonl", with_title=False)
    corpus_row = {doc: i for i, doc in enumerate(corpus_ids)}
    query_row = {query: i for i, query in enumerate(all_query_ids)}
    judged: dict[int, dict[int, float]] = {}
    for line, row in _table_rows(qrels, "\t"):
        where = f"{qrels}:{line}"
        for column in ("query-id", "corpus-id", "score"):
            if column not in row:
                raise LocalTaskError(
                    f"{qrels}:1: no {column!r} column (BEIR's header: query-id, corpus-id, score)"
                )
        query, doc = row["query-id"].strip(), row["corpus-id"].strip()
        if query not in query_row:
            raise LocalTaskError(f"{where}: query-id {query!r} is not in {folder / 'queries.jsonl'}")
        if doc not in corpus_row:
            raise LocalTaskError(f"{where}: corpus-id {doc!r} is not in {folder / 'corpus.jsonl'}")
        grade = _number(row["score"], "score", where)
        if grade < 0:
            raise LocalTaskError(f"{where}: score {row['score']!r} is negative")
        judged.setdefault(query_row[query], {})[corpus_row[doc]] = grade
    queries = [q for q in sorted(judged) if any(g > 0 for g in judged[q].values())]
    if not queries:
        raise LocalTaskError(f"{qrels}: no query has a relevant document (score > 0)")
    unjudged = len(all_query_ids) - len(queries)
    if unjudged:
        logger.info("%s: %d of %d queries have no relevant document in %s and are not evaluated", folder,
                    unjudged, len(all_query_ids), qrels.name)  # fmt: skip
    return Retrieval(
        qrels,
        corpus_ids,
        corpus,
        [all_query_ids[q] for q in queries],
        [all_queries[q] for q in queries],
        [{doc: g for doc, g in judged[q].items() if g > 0} for q in queries],
        titles,
        bodies,
    )
