"""The sentences a post-processor is fitted on: NLI sentences, the target task's sentences, or a file."""

from __future__ import annotations

import random
from pathlib import Path

from sentcl.data import read_records
from sentcl.errors import MissingDataError
from sentcl.evaluation.sts_data import load_task

NLI_FILE = Path("nli") / "triplets.csv.gz"


def fit_corpus(spec: str, data_dir: str | Path, max_sentences: int = 10_000, seed: int = 0) -> list[str]:
    """``nli`` (every sentence of $SENTCL_DATA/nli/triplets.csv.gz), ``task`` (STS-B dev sentences),
    or a path to a .txt/.csv/.tsv file; a seeded random subset of at most ``max_sentences``."""
    data_dir = Path(data_dir)
    if spec == "task":
        task = load_task(data_dir, "STSBenchmark", ("dev",))
        if task.missing:
            raise MissingDataError(f"--fit-on task: {task.missing}")
        pairs = task.datasets["dev"]
        sentences = sorted(set(pairs.sentences1) | set(pairs.sentences2))
    else:
        path = data_dir / NLI_FILE if spec == "nli" else Path(spec)
        records = read_records(path)
        sentences = sorted({text for row in records.rows for text in row})
    if len(sentences) > max_sentences:
        sentences = sorted(random.Random(seed).sample(sentences, max_sentences))
    return sentences
