"""Write a file or a folder so that readers see the old version or the new one, never half of one.

The content goes to a temporary sibling first and is renamed into place (``os.replace`` is atomic
on POSIX for files). A folder that already exists is swapped with the new one in a single
``renameat2(RENAME_EXCHANGE)`` call on Linux, so a reader (or a process killed at any instant)
always finds a complete folder at ``path``. Where that call is missing, the swap takes two renames
and the moment between them leaves the old folder at ``.NAME.old-*``; :func:`recover_folder` puts
it back. If anything fails before the swap the previous folder is untouched and the temporary one
is removed.

Consent: a folder is replaced only when it is absent or empty, when sentcl wrote it (its marker file,
``.sentcl-folder.json``, names the kind of folder and every entry sentcl put there, and nothing else is
there now), or when the caller says ``overwrite``: a user's own folder (their notes, their home) is never
replaced because it was named as an output. The same goes for a file where a folder is expected, a folder
where a file is expected, and a symbolic link in either place.

``overwrite`` has one meaning in every command: replace what sentcl wrote, keep the rest. In a folder that
also holds entries sentcl did not write (a user's ``notes.txt``), the new entries replace sentcl's earlier
ones and those of the same names, one entry at a time, and the user's entries stay where they are (never
moved, so no crash can lose them); the marker then lists sentcl's entries only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from sentcl import __version__
from sentcl.config import ConfigError

logger = logging.getLogger(__name__)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2

#: written into every folder sentcl writes: which kind of folder, and what sentcl put there
MARKER = ".sentcl-folder.json"
#: the random part tempfile.mkdtemp / mkstemp give the temporary siblings this module makes
_TEMP_SUFFIX = r"[a-z0-9_]{8}"


class OutputExistsError(ConfigError):
    """An output path holds something sentcl did not write, and replacing it was not asked for."""


def _marker(folder: Path) -> dict:
    """The marker sentcl left in ``folder`` ({} where there is none, or it is not one of sentcl's)."""
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    valid = isinstance(record, dict) and isinstance(record.get("entries"), list)
    return record if valid else {}


def check_replaceable(path: str | Path, kind: str, overwrite: bool = False, what: str = "") -> None:
    """Raise :class:`OutputExistsError` unless writing a ``kind`` folder at ``path`` loses nothing of the
    user's: the path is free, an empty folder, a ``kind`` folder sentcl wrote and nobody added to since, or
    ``overwrite`` is set. ``what`` names the option in the message (``--out``). Writes nothing."""
    path = Path(path)
    label = f"{what} {path}" if what else str(path)
    if path.is_symlink():
        raise OutputExistsError(
            f"{label}: a symbolic link; sentcl writes a folder of its own, not through a link"
        )
    if not path.exists():
        return
    if not path.is_dir():
        raise OutputExistsError(
            f"{label}: a file is there; sentcl writes a {kind} folder here, so name a folder"
        )
    entries = sorted(entry.name for entry in path.iterdir())
    if not entries or overwrite:
        return
    advice = (
        "pass --overwrite (overwrite=True from Python) to replace what sentcl writes there (your own files "
        "stay), or name a new one"
    )
    record = _marker(path)
    if record and record.get("kind") != kind:
        raise OutputExistsError(
            f"{label}: a folder sentcl wrote of another kind ({record.get('kind')}, not {kind}); {advice}"
        )
    owned = set(record.get("entries", ())) | {MARKER} if record else set()
    foreign = [name for name in entries if name not in owned]
    if not foreign:
        return
    holds = repr(foreign[0]) + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
    whose = "sentcl did not write" if not record else f"sentcl did not write when it made this {kind} folder"
    raise OutputExistsError(f"{label}: not empty, and it holds {holds}, which {whose}; {advice}")


def check_file_target(path: str | Path, what: str = "", overwrite: bool = False) -> None:
    """A file is about to be written at ``path``: refuse a folder there, and a file or link already there
    unless ``overwrite`` (a user's notes.txt named as ``--out`` stays); one line, nothing written."""
    path = Path(path)
    label = f"{what} {path}" if what else str(path)
    if path.is_dir() and not path.is_symlink():
        raise OutputExistsError(f"{label}: a folder is there; name a file")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise OutputExistsError(
            f"{label}: a file is already there; pass --overwrite (overwrite=True from Python) to replace "
            f"it, or name another file"
        )


def stale_temporaries(folder: Path, names: Iterable[str]) -> list[Path]:
    """The temporary siblings a killed writer of ``names`` left in ``folder`` (``.NAME.tmp-XXXXXXXX``, and
    ``.NAME.old-XXXXXXXX`` of an interrupted two-rename swap once the folder itself is back): only entries
    of this module's own pattern, never a user's file that merely looks alike."""
    escaped = "|".join(re.escape(name) for name in names)
    pattern = re.compile(rf"\.({escaped})\.(tmp|old)-{_TEMP_SUFFIX}")
    found = []
    for entry in folder.iterdir():
        match = pattern.fullmatch(entry.name)
        if match and (match.group(2) == "tmp" or (folder / match.group(1)).exists()):
            found.append(entry)
    return found


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


def publish(folder: Path) -> None:
    """Every file and folder under ``folder`` as a plain ``open`` / ``mkdir`` would have made it under the
    umask: some writers (safetensors, tempfile) make private 0600 files, which nobody else could read."""
    mask = _umask()
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            Path(root, name).chmod(0o777 & ~mask)
        for name in files:
            path = Path(root, name)
            if not path.is_symlink():
                path.chmod(0o666 & ~mask)


def owned_by_sentcl(folder: Path, kind: str) -> bool:
    """Whether ``folder`` carries sentcl's marker of a ``kind`` folder."""
    return _marker(folder).get("kind") == kind


def add_to_marker(folder: Path, name: str) -> None:
    """``name`` (just written into ``folder`` by sentcl, e.g. a model card) joins the entries sentcl's marker
    lists, so ``--overwrite`` may replace it later; a folder without sentcl's marker is left unmarked."""
    record = _marker(folder)
    if record and name not in record["entries"]:
        record["entries"] = sorted([*record["entries"], name])
        with atomic_file(folder / MARKER) as handle:
            json.dump(record, handle, indent=2)
            handle.write("\n")


def mark_folder(folder: Path, kind: str) -> None:
    """Write ``folder``'s marker: sentcl's ``kind`` folder, holding what is in it now."""
    entries = sorted(entry.name for entry in folder.iterdir() if entry.name != MARKER)
    with atomic_file(folder / MARKER) as handle:
        json.dump({"kind": kind, "entries": entries, "sentcl": __version__}, handle, indent=2)
        handle.write("\n")


def remove_sentcls(folder: Path) -> list[str]:
    """Remove what sentcl wrote in ``folder`` — the entries its marker lists, and the marker — and the folder
    itself once nothing else is in it. Returns the entries left (the user's own, or all of a folder with no
    marker of sentcl's): ``--overwrite`` replaces what sentcl wrote and nothing else."""
    record = _marker(folder)
    for name in record.get("entries", ()):
        entry = folder / str(name)
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            continue  # a marker names entries of this folder only; anything else is not followed
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()
    if record:
        (folder / MARKER).unlink(missing_ok=True)
    left = sorted(entry.name for entry in folder.iterdir())
    if not left:
        folder.rmdir()
    return left


def _not_sentcls(path: Path, kind: str, new: Path) -> list[str]:
    """The entries of ``path`` that sentcl did not write as a ``kind`` folder and that the ``new`` content
    does not replace by name: what ``overwrite`` keeps."""
    if not path.is_dir() or path.is_symlink():
        return []
    record = _marker(path)
    owned = set(record.get("entries", ())) if record.get("kind") == kind else set()
    replaced = {entry.name for entry in new.iterdir()} | owned | {MARKER}
    return sorted(entry.name for entry in path.iterdir() if entry.name not in replaced)


def _update_entries(new: Path, path: Path, kind: str) -> None:
    """Put ``new``'s entries into ``path`` one by one (each displacing the entry of its name), remove what
    sentcl wrote there before and no longer writes, and leave every other entry where it is."""
    record = _marker(path)
    before = set(record.get("entries", ())) if record.get("kind") == kind else set()
    trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    try:
        names = [entry.name for entry in new.iterdir() if entry.name != MARKER]
        for name in (*sorted(before - set(names)), *names):
            old = path / name
            if old.exists() or old.is_symlink():
                old.rename(trash / name)
        for name in names:
            (new / name).rename(path / name)
        (new / MARKER).replace(path / MARKER)  # last: the marker lists what is there now
    finally:
        shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)


@contextlib.contextmanager
def atomic_folder(path: str | Path, kind: str, overwrite: bool = False, what: str = "") -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces ``path``, marked as sentcl's ``kind`` folder.
    Refused (before anything is written) where :func:`check_replaceable` refuses."""
    path = Path(path)
    check_replaceable(path, kind, overwrite, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    follow_umask(tmp, "folder")
    try:
        yield tmp
        publish(tmp)
        mark_folder(tmp, kind)
        check_replaceable(path, kind, overwrite, what)  # nothing of the user's appeared meanwhile
        kept = _not_sentcls(path, kind, tmp) if overwrite else []
        if kept:  # --overwrite in a folder with the user's entries: sentcl's are replaced, theirs stay
            _update_entries(tmp, path, kind)
            logger.info("%s: replaced what sentcl writes there; kept %s", path, ", ".join(kept[:3]))
        elif path.exists() and _exchange(tmp, path):
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
    """Yield an open temporary file; on success it replaces ``path`` (a folder there is refused)."""
    path = Path(path)
    check_file_target(path, overwrite=True)  # whether a file may be replaced is the caller's question
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
