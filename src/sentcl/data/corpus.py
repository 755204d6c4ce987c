"""A domain's own text as training data (``data.corpus_unit``): a corpus of documents read as the unit an
objective trains on.

The corpus is a BEIR folder (its ``corpus.jsonl``), a BEIR-style ``corpus.jsonl`` (``_id``, ``title``,
``text``; title and text joined as BEIR's evaluation joins them), or a text file with one document per line
(``.txt``, ``.gz`` too). The unit:

* ``document``: each document one row (an objective that takes documents: cropping, ICT; or the encoder's
  first ``max_length`` tokens of it);
* ``sentence``: each document split into its sentences, every sentence one row (TSDAE, CT, SimCSE …);
* ``ict``: the Inverse Cloze Task's pairs, each sentence with its document's other sentences as its passage
  (``ict_pairs``), two columns for a pair objective (``simcse``: the passages of the batch are the
  negatives).

**Sentence splitting.** nltk's Punkt (Kiss & Strunk, Computational Linguistics 2006), *trained on the corpus
itself*: Punkt learns a domain's abbreviations, initials and ordinal markers without labels, which is what a
user's own corpus needs ("ng./ml.", "e.g.", "Fig. 3", "et al."). It needs no download (the pre-trained English
model does), and its training reads at most ``PUNKT_SAMPLE`` characters (the first documents), so it costs
seconds. A BEIR title is a row of its own. Measured on SciFact's 5,183 abstracts (7.3 M characters of text),
whose source lists 45,952 sentences: Punkt trained on the corpus 47,014 (+2.3 %; reading and splitting the
corpus took 12 s on a 2-core Zen 5), Punkt untrained 47,381, sentencex 1.0.32 44,793 (it joins enumerations
"(1) …, (2) …" into one sentence and splits "ng./ml.").

Every problem is one DataError naming ``file:line``; a document with no text is an error, not a skipped row.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path

from sentcl.data.readers import DataError, Records
from sentcl.extras import require
from sentcl.text_files import MAX_LINE_BYTES, text_lines

logger = logging.getLogger(__name__)

UNITS = ("none", "sentence", "document", "ict")
#: ICT: the share of pairs whose passage still holds the sentence (the paper's 10 %, so that lexical overlap
#: stays a useful signal)
ICT_KEEP = 0.1
#: the characters of the corpus Punkt learns from (its first documents)
PUNKT_SAMPLE = 20_000_000


def corpus_file(path: str | Path) -> Path:
    """The documents' file: a BEIR folder's ``corpus.jsonl``, or the file itself."""
    path = Path(path)
    if path.is_dir():
        if not (path / "corpus.jsonl").is_file():
            raise DataError(
                f"{path}: a folder without corpus.jsonl (BEIR's layout: corpus.jsonl, queries.jsonl, qrels/)"
            )
        return path / "corpus.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: no such file or folder")
    return path


def documents(path: str | Path) -> Iterator[tuple[int, tuple[str, ...]]]:
    """(line, its parts) of each document, streamed: a ``.jsonl``'s non-empty ``title`` and ``text``, or a
    text file's line (blank lines are not documents)."""
    path = corpus_file(path)
    is_json = ".jsonl" in [s.lower() for s in path.suffixes]
    count, cut = 0, set[int]()
    for number, line in enumerate(text_lines(path, DataError, cut), start=1):
        if not line.strip():
            continue
        count += 1
        if is_json and number in cut:  # its JSON ends past the cut: say what it is, not "invalid JSON"
            raise DataError(
                f"{path}:{number}: a document over {MAX_LINE_BYTES:,} bytes on one line; sentcl reads JSON "
                f"lines of at most that size (split the document, or keep its first part)"
            )
        yield number, _json_document(line, f"{path}:{number}") if is_json else (line.strip(),)
    if not count:
        raise DataError(f"{path}:1: the corpus has no documents")


def _json_document(line: str, where: str) -> tuple[str, ...]:
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise DataError(f"{where}: invalid JSON") from None
    if not isinstance(item, dict) or "text" not in item:
        raise DataError(f"{where}: a document is an object with 'text' (and optionally '_id', 'title')")
    title, text = item.get("title") or "", item["text"]
    if not isinstance(title, str) or not isinstance(text, str):
        raise DataError(f"{where}: 'title' and 'text' must be strings")
    parts = tuple(part.strip() for part in (title, text) if part.strip())
    if not parts:
        raise DataError(f"{where}: the document {item.get('_id', '')!r} has no text")
    return parts


def punkt_splitter(texts: list[str]):
    """nltk's Punkt trained on ``texts`` (at most ``PUNKT_SAMPLE`` characters of them): a tokenizer whose
    ``tokenize(text)`` is the text's sentences."""
    punkt = require("nltk.tokenize.punkt", "domain", "data.corpus_unit: sentence")
    sample, size = [], 0
    for text in texts:
        if size >= PUNKT_SAMPLE:
            break
        sample.append(text)
        size += len(text)
    trainer = punkt.PunktTrainer()
    trainer.INCLUDE_ALL_COLLOCS = True  # learn "Fig. 3", "ng./ml. of": any word pair across a period
    trainer.train("\n\n".join(sample), finalize=True)
    return punkt.PunktSentenceTokenizer(trainer.get_params())


def read_corpus(path: str | Path, unit: str) -> Records:
    """The corpus as records of ``unit``: one column of ``sentence`` or ``document`` rows, or ``ict``'s
    two-column (sentence, its passage) rows; each row's line is its document's line in the file."""
    if unit not in UNITS[1:]:
        raise ValueError(f"unit: {unit!r} is not one of {', '.join(UNITS[1:])}")
    source = corpus_file(path)
    lines: list[int] = []
    parts: list[tuple[str, ...]] = []
    for number, document in documents(source):
        lines.append(number)
        parts.append(document)
    if unit == "document":  # title and text joined, as BEIR's evaluation joins them
        return Records(str(source), [(" ".join(document),) for document in parts], lines)
    splitter = punkt_splitter([document[-1] for document in parts])
    rows: list[tuple[str, ...]] = []
    row_lines: list[int] = []
    for number, document in zip(lines, parts, strict=True):
        *title, text = document  # a title is a row of its own; the text is split into its sentences
        sentences = [s.strip() for s in [*title, *splitter.tokenize(text)] if s.strip()]
        made = ict_pairs(sentences, number) if unit == "ict" else [(s,) for s in sentences]
        rows.extend(made)
        row_lines.extend([number] * len(made))
    if not rows:  # only ICT can make none: it pairs a sentence with the rest of its document
        raise DataError(f"{source}:1: no document has two sentences, which ICT pairs")
    logger.info(
        "%s: %d documents → %d %s rows (Punkt trained on the corpus)", source, len(parts), len(rows), unit
    )
    return Records(str(source), rows, row_lines)


def ict_pairs(sentences: list[str], seed: int) -> list[tuple[str, str]]:
    """ICT's (Lee, Chang & Toutanova, ACL 2019) pairs of one document: each sentence against the document's
    other sentences, the sentence itself left in its passage for ``ICT_KEEP`` of the pairs (drawn with a
    generator seeded by the document's line, so a corpus always gives the same pairs)."""
    if len(sentences) < 2:
        return []
    rng = random.Random(seed)
    pairs = []
    for i, sentence in enumerate(sentences):
        kept = rng.random() < ICT_KEEP
        passage = " ".join(s for j, s in enumerate(sentences) if j != i or kept)
        pairs.append((sentence, passage))
    return pairs
