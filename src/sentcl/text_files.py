"""The one layer that reads users' text files, for data/ and evaluation/ alike: a ``.gz`` decompressed on
the way, the bytes decoded as UTF-8 (a byte-order mark dropped), and each problem one error of the
caller's class naming ``file:line`` (an undecodable byte's line; the line a gzip breaks on).

* ``text_lines`` streams a file line by line (training data: memory stays one bounded line, whatever the
  file's size);
* ``read_text`` reads a file whole (evaluation data, split by the caller the way SentEval splits it).

This module imports nothing from sentcl, so every room may use it.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

UTF8 = "utf-8-sig"  # UTF-8, a byte-order mark dropped

#: the longest line read whole (bytes): a 50 MB single-line file once trained at 7.3 GB of memory; longer
#: lines are cut here, and the log says where and from how long (the tokenizer keeps far fewer characters)
MAX_LINE_BYTES = 1 << 20


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
        raise error(_undecodable(path, line, raw, exc.start, encoding)) from None


def text_lines(path: Path, error: type[Exception], cut_lines: set[int] | None = None) -> Iterator[str]:
    """The file's lines as text, read as a stream. Line ends are \\n, \\r\\n or a lone \\r (a file saved
    with old Mac line ends is many lines, not one); a NUL byte is no text and an error; a line over
    ``MAX_LINE_BYTES`` is cut to it, with a warning naming file:line (and its number is added to
    ``cut_lines`` where given, so that what is counted on it is said to be a lower bound)."""
    if not path.exists():
        raise error(f"{path}: file not found")
    if not path.is_file():
        raise error(f"{path}: not a file")
    opener = gzip.open if path.suffix == ".gz" else open
    number = 0
    try:
        with opener(path, "rb") as handle:
            for raw, length in _bounded_lines(handle):
                if length is not None:
                    logger.warning(
                        "%s:%d: a line of %s bytes, cut to its first %s", path, number + 1, f"{length:,}",
                        f"{MAX_LINE_BYTES:,}",
                    )  # fmt: skip
                pieces = raw.replace(b"\r\n", b"\n").rstrip(b"\n").split(b"\r") if b"\r" in raw else [raw]
                for piece in pieces:
                    number += 1
                    if length is not None and cut_lines is not None:
                        cut_lines.add(number)
                    if b"\x00" in piece:
                        raise error(f"{path}:{number}: a NUL byte (U+0000); the file is not text")
                    yield _decode_line(piece, path, number, error, cut=length is not None)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise error(f"{path}:{number + 1}: not a valid gzip file ({exc})") from None


def _bounded_lines(handle) -> Iterator[tuple[bytes, int | None]]:
    """(line, None) for the handle's lines (split on \\n); (its first ``MAX_LINE_BYTES``, its length) for a
    longer one, whose rest is read in blocks and dropped, never held."""
    while True:
        raw = handle.readline(MAX_LINE_BYTES)
        if not raw:
            return
        if len(raw) < MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw, None
            continue
        length = len(raw)
        while True:
            rest = handle.readline(MAX_LINE_BYTES)
            length += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield raw, length


def _decode_line(raw: bytes, path: Path, number: int, error: type[Exception], cut: bool) -> str:
    try:
        return raw.decode(UTF8 if number == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(raw) - 3:  # a character split where the line was cut
            return raw[: exc.start].decode("utf-8")
        raise error(_undecodable(path, number, raw, exc.start, UTF8)) from None


def _undecodable(path: Path, line: int, raw: bytes, at: int, encoding: str) -> str:
    said = "(the file must be UTF-8)" if encoding == UTF8 else f"for {encoding}"
    return f"{path}:{line}: undecodable byte 0x{raw[at : at + 1].hex()} {said}"
