"""Write a file or a folder so that readers see the old version or the new one, never half of one.

The content goes to a temporary sibling first and is renamed into place (``os.replace`` is atomic
on POSIX for files). A folder that already exists is swapped with the new one in a single
``renameat2(RENAME_EXCHANGE)`` call on Linux, so a reader (or a process killed at any instant)
always finds a complete folder at ``path``. Where that call is missing, the swap takes two renames
and the moment between them leaves the old folder at ``.NAME.old-*``; :func:`recover_folder` puts
it back. If anything fails before the swap the previous folder is untouched and the temporary one
is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def recover_folder(path: str | Path) -> None:
    """Put back the previous folder if a two-rename swap was interrupted between its renames."""
    path = Path(path)
    if path.exists():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds:
        olds[-1].rename(path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: Path, kind: str) -> None:
    """``mkdtemp`` / ``mkstemp`` make private entries (0700 / 0600); what we publish follows the umask,
    as a plain ``open`` or ``mkdir`` would."""
    path.chmod((0o777 if kind == "folder" else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    follow_umask(tmp, "folder")
    try:
        yield tmp
        if path.exists() and _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # it now holds the previous version
        elif path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            old.rmdir()
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator:
    """Yield an open temporary file; on success it replaces ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    follow_umask(Path(tmp), "file")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise
