"""A static model's token ids: the tokenizer's own, from tokie wherever tokie is checked to give the same.

A static encoder runs at the speed of its tokenizer. `tokie <https://pypi.org/project/tokie/>`_ loads a
Hugging Face ``tokenizer.json`` and returns a whole batch's ids as one flat array, many times faster than
``tokenizers`` (2 cores, 10k wiki sentences: docs/students.md). It is not the same code, and it does not agree
on everything: measured with tokie 0.1.4 against tokenizers 0.22 on all-MiniLM-L6-v2's BERT tokenizer, it
agreed on all 97,852 wiki and NLI sentences of the students' data and on 100,000 random strings of Latin,
Greek, Cyrillic and punctuation, but not on DEL (U+007F), on code points one library knows and the other
does not (Unicode versions), or on some scripts. So:

* only a BERT WordPiece tokenizer (``BertNormalizer`` → ``BertPreTokenizer`` → ``WordPiece``: nothing
  crosses a word, the normaliser works character by character) goes to tokie;
* before its first use, each character of ``CANDIDATES`` is put in context (``a{c}b x{c} {c}``) through
  both, with ``PROBES`` (special tokens in text, long words, empty text); a character on which they differ
  is left out, and a differing probe leaves tokie out altogether;
* a sentence with a character outside the agreed set goes through ``tokenizers``, whole.

Without tokie installed, or when it cannot read the tokenizer, every sentence goes through ``tokenizers``
(``TokenizerIds``), as sentence-transformers' ``StaticEmbedding`` and model2vec do.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from itertools import chain
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

#: the code points checked for tokie (Basic Latin to Cyrillic Supplement: Latin, IPA, combining marks,
#: Greek, Cyrillic; General Punctuation; Currency Symbols): 1,473 characters, 35 ms once per model (2 cores)
CANDIDATES = (range(0x0000, 0x0530), range(0x2000, 0x2070), range(0x20A0, 0x20C1))
#: texts tokie must agree on as a whole, or it is not used for the tokenizer at all
PROBES = (
    "",
    " ",
    "\t\n\r",
    "[CLS] hello [SEP]",
    "x[MASK]y [mask] [UNK]",
    "a" * 99,
    "a" * 100,
    "b" * 101,
    "super" + "calif" * 30,
    "Hello, World!! co-operate's ##ing ##",
    "naïve café Ångström Σοφός ΣΟΦΟΣ İstanbul e\u0301",
    "a\u200bb a\xa0b a\u2009b\ufeffc",
    "tab\tsep\rline\nend  double  spaces ",
)


class TokenizerIds:
    """``(texts) → (order, flat ids, lengths)`` by ``tokenizers``: the ids
    ``tokenizer.encode_batch(texts, add_special_tokens=False)`` gives, sentence ``order[k]``'s the ``k``-th
    run of ``lengths[k]`` ids in ``flat``."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.arange(len(texts), dtype=np.int64), *self.flat(texts)

    def flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [encoding.ids for encoding in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        return np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths


class TokieIds(TokenizerIds):
    """As ``TokenizerIds`` (the same ids), tokie's sentences first in ``order``, then the others."""

    def __init__(self, tokenizer: Tokenizer, fast):
        super().__init__(tokenizer)
        self.fast = fast
        self._outside: re.Pattern | None = None  # what tokie is not trusted with; set on first use

    def __reduce__(self):  # pickled (a DataLoader worker, a saved object) as the tokenizer, read again
        return TokieIds.for_tokenizer, (self.tokenizer,)

    def __deepcopy__(self, memo) -> TokieIds:  # a model's copy shares it: nothing in it changes
        return self

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer) -> TokenizerIds:
        """tokie for a BERT WordPiece tokenizer when tokie is installed and reads it; else ``tokenizers``."""
        spec = json.loads(tokenizer.to_str())
        kinds = tuple((spec.get(key) or {}).get("type") for key in ("normalizer", "pre_tokenizer", "model"))
        if kinds != ("BertNormalizer", "BertPreTokenizer", "WordPiece"):
            return TokenizerIds(tokenizer)
        try:
            import tokie
        except ImportError:
            return TokenizerIds(tokenizer)
        with tempfile.TemporaryDirectory(prefix="sentcl-tokie-") as folder:
            path = Path(folder) / "tokenizer.json"
            tokenizer.save(str(path))
            try:
                fast = tokie.Tokenizer.from_json(str(path))
            except Exception as exc:  # any failure: the tokenizer's own path, said once
                logger.info("tokie cannot read this tokenizer (%s): static encoding uses tokenizers", exc)
                return TokenizerIds(tokenizer)
        return cls(tokenizer, fast)

    def tokie_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids, lengths = self.fast.encode_batch_flat(texts, add_special_tokens=False)
        return np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.int64)

    def outside(self) -> re.Pattern:
        """A pattern found in a text that tokie must not tokenise (checked once, see the module's note)."""
        if self._outside is None:
            self._outside = self._check()
        return self._outside

    def _check(self) -> re.Pattern:
        everything = re.compile(r"[\s\S]")
        if not self._agree(list(PROBES)).all():
            logger.info("tokie disagrees with tokenizers on this tokenizer: static encoding uses tokenizers")
            return everything
        points = [point for block in CANDIDATES for point in block]
        agree = self._agree([f"a{chr(p)}b x{chr(p)} {chr(p)}" for p in points])
        kept = [point for point, same in zip(points, agree, strict=True) if same]
        left_out = len(points) - len(kept)
        if left_out:
            logger.debug(
                "tokie disagrees with tokenizers on %d of %d characters checked", left_out, len(points)
            )
        return re.compile(f"[^{ranges(kept)}]") if kept else everything

    def _agree(self, texts: list[str]) -> np.ndarray:
        """Per text, whether tokie's ids are tokenizers' ids."""
        ids, lengths = self.tokie_flat(texts)
        ours, their_lengths = self.flat(texts)
        same = lengths == their_lengths
        ends, their_ends = np.cumsum(lengths), np.cumsum(their_lengths)
        for index in np.flatnonzero(same):
            mine = ids[ends[index] - lengths[index] : ends[index]]
            same[index] = np.array_equal(mine, ours[their_ends[index] - lengths[index] : their_ends[index]])
        return same

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        outside = self.outside()
        if outside.search(" ".join(texts)) is None:  # the usual case: one test for the chunk
            return np.arange(len(texts), dtype=np.int64), *self.tokie_flat(texts)
        trusted = [outside.search(text) is None for text in texts]
        inside = [index for index, ok in enumerate(trusted) if ok]
        rest = [index for index, ok in enumerate(trusted) if not ok]
        flat, lengths = self.tokie_flat([texts[index] for index in inside])
        rest_flat, rest_lengths = self.flat([texts[index] for index in rest])
        return (
            np.asarray(inside + rest, dtype=np.int64),
            np.concatenate([flat, rest_flat]),
            np.concatenate([lengths, rest_lengths]),
        )


def ranges(points: list[int]) -> str:
    """Sorted code points → a regular-expression character-class body (``\\UXXXXXXXX-\\UYYYYYYYY`` runs)."""
    runs: list[tuple[int, int]] = []
    for point in points:
        if runs and point == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], point)
        else:
            runs.append((point, point))
    return "".join(
        f"\\U{first:08x}" if first == last else f"\\U{first:08x}-\\U{last:08x}" for first, last in runs
    )
