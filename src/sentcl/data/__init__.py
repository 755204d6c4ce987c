"""Data: readers (txt, csv/tsv), tokenise-once datasets and ``[B, V, L]`` collation."""

from sentcl.data.collate import DEFAULT_MAX_LENGTH, Batch, ContrastiveDataset, collate_views
from sentcl.data.readers import DataError, Records, read_records, read_sentences, read_table
from sentcl.data.recipe import DataConfig, build_dataset

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
