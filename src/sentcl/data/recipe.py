"""The recipe's ``data:`` section, and the training dataset it asks for: token ids of the rows as they are
(``ContrastiveDataset``) or with WordNet views made for CLINE (``WordNetViewsDataset``). It sits above both
so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

from sentcl.config import ConfigError
from sentcl.data.collate import DEFAULT_MAX_LENGTH, ContrastiveDataset
from sentcl.data.readers import Records
from sentcl.data.wordnet_views import WordNetViewsDataset


@dataclass
class DataConfig:
    """``data:`` section of a recipe."""

    train_file: str = ""
    max_length: int = DEFAULT_MAX_LENGTH
    #: csv/tsv header: null = detect SimCSE-style names in row 1, true/false = force.
    header: bool | None = None
    #: views per example; null = 2 for one-sentence-per-line data, else the number of columns.
    n_views: int | None = None
    #: how many leading columns are texts to encode; the others are labels an objective reads (EASE's
    #: entity and hard-negative entity). null = every column is a text.
    text_columns: int | None = None
    #: batches of similar token length (less padding, fewer FLOPs); in-batch negatives then share a
    #: length range. Off by default (SimCSE draws batches uniformly).
    group_by_length: bool = False
    #: views made from the rows: "none" (the rows' own columns; dropout copies of one-column rows), or
    #: "wordnet": CLINE's synonym and antonym views of one-sentence rows (data/wordnet_views.py)
    augment: str = "none"
    #: wordnet views: share of the candidate words replaced by a synonym (CLINE: 0.4) and by an antonym
    #: or a random word (0.2); the seed of each row's views; the WordNet 3.0 dict folder ("" =
    #: $SENTCL_WORDNET or Debian's /usr/share/wordnet)
    synonym_share: float = 0.4
    antonym_share: float = 0.2
    augment_seed: int = 0
    wordnet_dir: str = ""
    #: train_file as a domain's corpus (data/corpus.py): "none" (rows as they are), "sentence" (a BEIR
    #: folder, a corpus.jsonl or a one-document-per-line file, split into sentences by Punkt trained on
    #: it), "document" (each document one row) or "ict" (each sentence and its passage, two columns)
    corpus_unit: str = "none"
    #: read train_file as a stream every epoch instead of into memory (files larger than memory;
    #: data/streaming.py): .txt, .csv, .tsv, .jsonl (optionally .gz) and .parquet
    streaming: bool = False
    #: streaming: rows are shuffled within blocks of this many (the memory it holds)
    shuffle_buffer: int = 100_000

    def validate(self) -> None:
        if self.corpus_unit not in ("none", "sentence", "document", "ict"):
            raise ConfigError(
                f"corpus_unit: {self.corpus_unit!r} is not one of none, sentence, document, ict"
            )
        if self.corpus_unit != "none" and self.streaming:
            raise ConfigError(
                "corpus_unit: a corpus is read into memory (its sentences are split on reading); set "
                "streaming: false"
            )
        if self.augment not in ("none", "wordnet"):
            raise ConfigError(f"augment: {self.augment!r} is not one of none, wordnet")
        for key in ("synonym_share", "antonym_share"):
            if not 0 < getattr(self, key) <= 1:
                raise ConfigError(f"{key}: must be in (0, 1], got {getattr(self, key)}")
        if not self.train_file:
            raise ConfigError("train_file: a training file is required")
        if self.shuffle_buffer < 1:
            raise ConfigError(f"shuffle_buffer: must be positive, got {self.shuffle_buffer}")
        if self.max_length < 2:
            raise ConfigError(f"max_length: must be at least 2, got {self.max_length}")
        if self.n_views is not None and self.n_views < 1:
            raise ConfigError(f"n_views: must be positive, got {self.n_views}")
        if self.text_columns is not None and self.text_columns < 1:
            raise ConfigError(f"text_columns: must be positive, got {self.text_columns}")


def build_dataset(config: DataConfig, records: Records, tokenizer) -> ContrastiveDataset:
    """The training dataset a recipe's ``data:`` section asks for."""
    if config.augment == "wordnet":
        return WordNetViewsDataset(records, tokenizer, config, config.max_length)
    return ContrastiveDataset(records, tokenizer, config.max_length, config.n_views, config.text_columns)
