"""The run's metrics.jsonl."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from sentcl.atomic_write import atomic_file
from sentcl.config import ConfigError
from sentcl.finite_json import dumps, finite

if TYPE_CHECKING:
    from sentcl.training.trackers import Trackers


class MetricsLog:
    """Append-only JSONL, flushed at every line so a crashed run keeps its history. On resume the lines
    written after the checkpoint's step are dropped (the resumed run writes them again): the kept lines
    replace the file atomically, so a kill at any moment leaves either the old history or the kept one,
    never an empty or truncated file. A torn last line (a kill in the middle of a write) is dropped."""

    def __init__(
        self,
        path: Path,
        resume_step: int | None = None,
        enabled: bool = True,
        trackers: Trackers | None = None,
    ):
        self.records: list[dict[str, Any]] = []
        self.trackers = trackers if enabled else None  # training.report_to: every record goes there too
        if not enabled:  # a rank other than 0 keeps records in memory only
            self.handle = None
            return
        if resume_step is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # only the last line can be torn
                if record["step"] <= resume_step:
                    self.records.append(record)
            with atomic_file(path) as handle:
                handle.writelines(json.dumps(record) + "\n" for record in self.records)
            self.handle = _open_no_follow(path, os.O_APPEND)
        else:
            self.handle = _open_no_follow(path, os.O_TRUNC)

    def write(self, record: dict[str, Any]) -> None:
        record = finite(record)
        self.records.append(record)
        if self.handle is not None:
            self.handle.write(dumps(record) + "\n")
            self.handle.flush()
        if self.trackers is not None:
            self.trackers.log(record)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        if self.trackers is not None:
            self.trackers.close()


def _open_no_follow(path: Path, flag: int) -> TextIO:
    """Open for writing without following a symbolic link (a link put there would make the run write a file
    outside its folder): ELOOP becomes one clear error."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | flag | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        if path.is_symlink():
            raise ConfigError(
                f"{path}: a symbolic link; sentcl never writes its metrics through one"
            ) from None
        raise
    return os.fdopen(fd, "a" if flag == os.O_APPEND else "w", encoding="utf-8")
