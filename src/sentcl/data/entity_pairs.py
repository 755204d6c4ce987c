"""(sentence, entity, hard-negative entity) rows for EASE from an entity-annotated corpus.

Re-DocRED (``wiki/redocred/*_revised.json.gz`` in the shared data) annotates the Wikipedia entities
mentioned in every sentence of a document. Each sentence becomes one row per named entity in it (types
PER, ORG, LOC, MISC; dates and numbers are no entities to learn), the entity named by its longest
mention; the hard negative is a seeded random entity of the same type from another document.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from pathlib import Path

from sentcl.data.readers import DataError
from sentcl.text_files import read_text

ENTITY_TYPES = ("PER", "ORG", "LOC", "MISC")


def detokenize(tokens: list[str]) -> str:
    text = " ".join(tokens)
    text = re.sub(r" ([.,;:!?%)\]}])", r"\1", text)
    text = re.sub(r"([(\[{$]) ", r"\1", text)
    return re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", text)


def redocred_entity_pairs(paths: list[str | Path], seed: int = 0) -> list[tuple[str, str, str]]:
    mentions: list[tuple[str, str, str, tuple]] = []  # sentence, entity, type, document
    for path in paths:
        if not Path(path).is_file():
            raise DataError(f"{path}: file not found")
        try:
            documents = json.loads(read_text(Path(path), DataError))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: not a Re-DocRED JSON file ({exc.msg})") from None
        for number, document in enumerate(documents):
            doc_id = (str(path), number)
            sentences = [detokenize(tokens) for tokens in document["sents"]]
            for vertex in document["vertexSet"]:
                kind = vertex[0]["type"]
                if kind not in ENTITY_TYPES:
                    continue
                name = max((m["name"] for m in vertex), key=len)
                for sent_id in sorted({m["sent_id"] for m in vertex}):
                    mentions.append((sentences[sent_id], name, kind, doc_id))
    by_type: dict[str, list[tuple[str, tuple]]] = defaultdict(list)
    for _, name, kind, doc_id in mentions:
        by_type[kind].append((name, doc_id))
    rng = random.Random(seed)
    rows = []
    for sentence, name, kind, doc_id in mentions:
        pool = by_type[kind]
        for _ in range(100):  # an entity of the same type from another document
            negative, other = pool[rng.randrange(len(pool))]
            if other != doc_id and negative != name:
                rows.append((sentence, name, negative))
                break
    return rows
