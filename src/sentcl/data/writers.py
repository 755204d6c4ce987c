"""Training files sentcl writes: supervised triplets ``sent0, sent1, hard_neg`` in a layout its readers
take back (``.tsv``/``.csv`` with that header, or JSON Lines), written whole or not at all."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path

from sentcl.atomic_write import atomic_file
from sentcl.config import ConfigError

TRIPLET_SUFFIXES = (".tsv", ".csv", ".jsonl")
TRIPLET_COLUMNS = ("sent0", "sent1", "hard_neg")


def check_triplet_target(path: str | Path, option: str) -> None:
    if Path(path).suffix.lower() not in TRIPLET_SUFFIXES:
        raise ConfigError(f"{option} {path}: write .tsv, .csv or .jsonl")


def write_triplets(path: str | Path, rows: Iterable[tuple[str, str, str]]) -> None:
    suffix = Path(path).suffix.lower()
    with atomic_file(Path(path)) as handle:
        if suffix == ".jsonl":
            handle.writelines(
                json.dumps(dict(zip(TRIPLET_COLUMNS, row, strict=True)), ensure_ascii=False) + "\n"
                for row in rows
            )
        else:
            writer = csv.writer(handle, delimiter="\t" if suffix == ".tsv" else ",", lineterminator="\n")
            writer.writerow(TRIPLET_COLUMNS)
            writer.writerows(rows)
