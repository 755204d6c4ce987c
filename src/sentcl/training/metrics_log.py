"""The run's metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path


class MetricsLog:
    """Append-only JSONL, flushed at every line so a crashed run keeps its history. On resume the lines
    written after the checkpoint's step are dropped (the resumed run writes them again)."""

    def __init__(self, path: Path, resume_step: int | None = None, enabled: bool = True):
        self.records: list[dict] = []
        if not enabled:  # a rank other than 0 keeps records in memory only
            self.handle = None
            return
        if resume_step is not None and path.is_file():
            lines = path.read_text(encoding="utf-8").splitlines()
            self.records = [r for r in map(json.loads, lines) if r["step"] <= resume_step]
        self.handle = path.open("w", encoding="utf-8")
        for record in self.records:
            self.handle.write(json.dumps(record) + "\n")

    def write(self, record: dict) -> None:
        self.records.append(record)
        if self.handle is not None:
            self.handle.write(json.dumps(record) + "\n")
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
