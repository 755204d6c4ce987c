"""A teacher's embeddings of the training sentences, computed once and kept on disk.

Distillation (objectives/distillation.py) needs the teacher's vector of every training sentence at every
step of every epoch, seed and run. They are computed once, with a progress bar, into
``$SENTCL_CACHE/teachers/<key>.npy`` (float32 [N, D], memory-mapped when read), the key a hash of what
decides them: the teacher (its name, and for a local folder the size and time of each file), its pooler,
the maximum length, the precision and every sentence. Its record (``<key>.json``) holds a sha256 of the
table's rows: a table that cannot be read, is of another shape, or whose content is not what its record
describes (two tables swapped, rows reordered) is never used — one WARNING line names it, and it is
computed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from sentcl.atomic_write import atomic_file
from sentcl.errors import UserError
from sentcl.hub_files import cache_dir
from sentcl.model import SentenceEncoder, for_inference

logger = logging.getLogger(__name__)

#: the precision a teacher encodes in: fp32, so that a table does not depend on the machine
TEACHER_DTYPE = "fp32"


class TeacherError(UserError, ValueError):
    """A teacher that cannot serve: it does not load, or its cached table does not match it."""


def _model_identity(name: str) -> list[object]:
    folder = Path(name)
    if not folder.is_dir():
        return [name]
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [
        str(folder.resolve()),
        [(str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files],
    ]


def table_key(teacher: str, texts: list[str], pooler: str | None, max_length: int | None) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([_model_identity(teacher), pooler, max_length, TEACHER_DTYPE]).encode())
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def load_teacher(
    teacher: str, pooler: str | None = None, where: str = "objective.teacher"
) -> SentenceEncoder:
    try:
        encoder = SentenceEncoder.load(teacher, pooler=pooler)
    except UserError as exc:
        raise TeacherError(f"{where}: the teacher does not load: {exc}") from None
    loaded: SentenceEncoder = for_inference(encoder.eval(), TEACHER_DTYPE)
    return loaded


def table_digest(table: np.ndarray) -> str:
    """sha256 of a table's float32 rows in order (what a swapped, reordered or edited table changes)."""
    digest = hashlib.sha256()
    rows = max(1, (1 << 24) // max(1, table.shape[1] * 4))  # ~16 MB at a time: a memory-mapped table
    for start in range(0, len(table), rows):
        digest.update(np.ascontiguousarray(table[start : start + rows], dtype=np.float32).tobytes())
    return digest.hexdigest()


def _cached(path: Path, meta_path: Path, key: str, count: int) -> tuple[np.ndarray | None, str]:
    """(the cached table, "") when its record and content hold what ``key`` names, else (None, why not)."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        table = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as exc:
        return None, f"it cannot be read ({str(exc).strip() or type(exc).__name__})"
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None, f"{meta_path.name} records another key"
    if table.ndim != 2 or table.shape != (count, meta.get("dimension")):
        recorded = f"{count} sentences × {meta.get('dimension')}"
        return None, f"shape {list(table.shape)}, where {recorded} are recorded"
    if "sha256" not in meta:
        return None, "its record has no hash of the table (written by an older sentcl)"
    if table_digest(table) != meta["sha256"]:
        return None, "its content is not the table its record describes (swapped, reordered or edited)"
    return table, ""


def teacher_table(
    teacher: str,
    texts: list[str],
    pooler: str | None = None,
    max_length: int | None = None,
    where: str = "objective.teacher",
) -> np.ndarray:
    """The teacher's embeddings of ``texts`` [N, D]: read from the cache when its record (the key, the shape,
    a sha256 of the table written with it) matches, else computed and cached anew; a cache that does not
    match is said in one WARNING line naming the file, and rebuilt (the cache is sentcl's own)."""
    key = table_key(teacher, texts, pooler, max_length)
    folder = cache_dir() / "teachers"
    path, meta_path = folder / f"{key}.npy", folder / f"{key}.json"
    for target in (path, meta_path):  # said before the teacher encodes anything, not after
        if target.exists() and not target.is_file():
            raise TeacherError(
                f"{target}: not a file, where sentcl caches the teacher's table; move it away (the cache is "
                f"sentcl's own: {folder})"
            )
    if path.is_file() or meta_path.is_file():
        table, why = _cached(path, meta_path, key, len(texts))
        if table is not None:
            return table
        logger.warning("%s: the cached teacher table is not used and is rebuilt: %s", path, why)
    encoder = load_teacher(teacher, pooler, where)
    if max_length is not None:
        encoder.max_length = max_length
    vectors = np.asarray(encoder.encode(texts, batch_size=128, show_progress_bar=True), dtype=np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, mode="wb") as handle:
        np.save(handle, vectors)
    meta = {"key": key, "teacher": teacher, "pooler": encoder.pooler, "dimension": int(vectors.shape[1]),
            "sentences": len(texts), "dtype": TEACHER_DTYPE, "sha256": table_digest(vectors)}  # fmt: skip
    with atomic_file(meta_path) as handle:
        json.dump(meta, handle, indent=2)
    kept: np.ndarray = np.load(path, mmap_mode="r")
    return kept
