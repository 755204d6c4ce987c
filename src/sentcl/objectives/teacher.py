"""A teacher's embeddings of the training sentences, computed once and kept on disk.

Distillation (objectives/distillation.py) needs the teacher's vector of every training sentence at every
step of every epoch, seed and run. They are computed once, with a progress bar, into
``$SENTCL_CACHE/teachers/<key>.npy`` (float32 [N, D], memory-mapped when read), the key a hash of what
decides them: the teacher (its name, and for a local folder the size and time of each file), its pooler,
the maximum length, the precision and every sentence. A cache file whose shape or meta does not match its
key is one TeacherError, never used.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from sentcl.atomic_write import atomic_file
from sentcl.errors import UserError
from sentcl.hub_files import cache_dir
from sentcl.model import SentenceEncoder, for_inference

#: the precision a teacher encodes in: fp32, so that a table does not depend on the machine
TEACHER_DTYPE = "fp32"


class TeacherError(UserError, ValueError):
    """A teacher that cannot serve: it does not load, or its cached table does not match it."""


def _model_identity(name: str) -> list:
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
    return for_inference(encoder.eval(), TEACHER_DTYPE)


def teacher_table(
    teacher: str,
    texts: list[str],
    pooler: str | None = None,
    max_length: int | None = None,
    where: str = "objective.teacher",
) -> np.ndarray:
    """The teacher's embeddings of ``texts`` [N, D]: read from the cache, or computed once and cached."""
    key = table_key(teacher, texts, pooler, max_length)
    folder = cache_dir() / "teachers"
    path, meta_path = folder / f"{key}.npy", folder / f"{key}.json"
    if path.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            table = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise TeacherError(f"{path}: a teacher cache that cannot be read ({exc}); remove it") from None
        if meta.get("key") != key or table.shape != (len(texts), meta.get("dimension")):
            raise TeacherError(
                f"{path}: the cached table does not match its teacher and data (shape {table.shape}, "
                f"{len(texts)} sentences expected); remove it"
            )
        return table
    encoder = load_teacher(teacher, pooler, where)
    if max_length is not None:
        encoder.max_length = max_length
    vectors = np.asarray(encoder.encode(texts, batch_size=128, show_progress_bar=True), dtype=np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, mode="wb") as handle:
        np.save(handle, vectors)
    meta = {"key": key, "teacher": teacher, "pooler": encoder.pooler, "dimension": int(vectors.shape[1]),
            "sentences": len(texts), "dtype": TEACHER_DTYPE}  # fmt: skip
    with atomic_file(meta_path) as handle:
        json.dump(meta, handle, indent=2)
    return np.load(path, mmap_mode="r")
