"""Whole text files read for evaluation: a ``.gz`` decompressed on the way, the bytes decoded, and each
problem one error of the caller's class naming ``file:line`` (an undecodable byte's line, line 1 for a gzip
that is not one). The training readers (data/readers.py) stream instead, line by line, with the same
messages. This module imports nothing from sentcl, so both data/ and evaluation/ can use it."""

from __future__ import annotations

import gzip
from pathlib import Path

UTF8 = "utf-8-sig"  # UTF-8, a byte-order mark dropped


def read_text(path: Path, error: type[Exception], encoding: str = UTF8) -> str:
    """``path``'s text, a ``.gz`` decompressed."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise error(f"{path}:1: not a valid gzip file ({exc})") from None
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        said = "(the file must be UTF-8)" if encoding == UTF8 else f"for {encoding}"
        raise error(f"{path}:{line}: undecodable byte {said}") from None
