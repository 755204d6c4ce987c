"""Data: readers (txt, csv/tsv), tokenise-once datasets and ``[B, V, L]`` collation."""

from sentcl.data.collate import (
    DEFAULT_MAX_LENGTH,
    Batch,
    ContrastiveDataset,
    DataConfig,
    build_dataset,
    collate_views,
)
from sentcl.data.readers import DataError, Records, read_records, read_sentences, read_table

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "Batch",
    "ContrastiveDataset",
    "DataConfig",
    "DataError",
    "Records",
    "build_dataset",
    "collate_views",
    "read_records",
    "read_sentences",
    "read_table",
]
