"""CLINE's views of a sentence by WordNet replacement: synonyms (a positive view) and antonyms (a negative).

WordNet 3.0 is read with nltk's reader from Debian's ``wordnet-base`` (``/usr/share/wordnet``, or
``$SENTCL_WORDNET``); nothing is downloaded. Debian ships the database without the ``lexnames`` file nltk
opens, so a copy of the database with that file is prepared once under ``$SENTCL_CACHE/wordnet``.

Words are the tokenizer's pre-tokens (BERT: split on spaces and punctuation), so a replaced word's
pieces are exactly the tokens whose ``word_ids`` point at it. A word is a candidate when it is
alphabetic, at least 3 letters and not a function word. Part of speech: the word's dominant WordNet
part of speech (the one whose senses are most frequent in SemCor's counts, ``cntlist.rev``) — the
filter keeps replacements within nouns, verbs, adjectives and adverbs and within the same part of
speech; there is no contextual tagger on this machine (our reading of CLINE's POS filter).

* synonym view: ``synonym_share`` (CLINE: 40 %) of the candidates that have a one-word synonym get one
  (a random lemma of the word's synsets in its part of speech);
* antonym view: ``antonym_share`` (CLINE: 20 %) of the candidates are replaced — by a WordNet antonym
  where the word has one, else by a random candidate word of the corpus (CLINE: "antonyms and random
  words").

Replacements keep a leading capital. Everything is seeded per sentence, so views are reproducible.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sentcl.data.collate import Batch, ContrastiveDataset, collate_views
from sentcl.data.readers import DataError, Records
from sentcl.extras import require
from sentcl.hub_files import cache_dir

DEFAULT_WORDNET = "/usr/share/wordnet"
POS = ("n", "v", "a", "r")
FUNCTION_WORDS = frozenset(
    """
    about above after again against all also and any are aren't around as at be been before being below
    between both but by can cannot could did does doing down during each either else ever few for from
    further had has have having he her here hers herself him himself his how however into its itself just
    more most much must neither nor not now off once only other ought our ours ourselves out over own
    same she should since some such than that the their theirs them themselves then there these they this
    those though through thus too under until upon very was were what when where whether which while who
    whom whose why will with within without would yet you your yours yourself yourselves one two three
    four five six seven eight nine ten first second third many may might shall get got gets made make
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def prepare_wordnet(root: str | Path | None = None) -> Path:
    """A folder nltk's reader accepts (the database + ``lexnames``); errors say how to install it."""
    source = Path(root or os.environ.get("SENTCL_WORDNET") or DEFAULT_WORDNET)
    if not (source / "data.noun").is_file():
        raise DataError(
            f"{source}: no WordNet database here (data.noun missing). Install Debian's wordnet-base "
            f"(apt-get install wordnet-base; `make test` does) or set SENTCL_WORDNET to a WordNet 3.0 dict "
            f"folder"
        )
    folder = cache_dir() / "wordnet" / hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]
    if not (folder / "lexnames").is_file():
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for path in source.iterdir():  # a copy (28 MB): nltk refuses symbolic and hard links
            if path.is_file():
                shutil.copyfile(path, tmp / path.name)
        (tmp / "lexnames").write_text(_lexnames(source), encoding="utf-8")
        if folder.exists():  # another process was first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(folder)
    return folder


def _lexnames(source: Path) -> str:
    """nltk needs one line per lexicographer file number; the names only label ``Synset.lexname()``."""
    numbers: dict[int, str] = {}
    for pos, kind, category in (
        ("noun", "noun", 1),
        ("verb", "verb", 2),
        ("adj", "adj", 3),
        ("adv", "adv", 4),
    ):
        with (source / f"data.{pos}").open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("  "):
                    continue  # the licence header
                number = int(line.split(" ", 2)[1])
                numbers.setdefault(number, f"{kind}.{number:02d}\t{category}")
    return "".join(f"{n:02d}\t{numbers[n]}\n" for n in sorted(numbers))


@functools.lru_cache(maxsize=4)
def load_wordnet(root: str | None = None):
    nltk = require("nltk", "cline", "WordNet views (CLINE)")
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    folder = prepare_wordnet(root)
    if str(folder) not in nltk.data.path:  # nltk reads only below its data paths
        nltk.data.path.append(str(folder))

    class LocalWordNet(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            return None  # English WordNet 3.0 only: no mapping to nltk's downloadable copy (for OMW)

    with warnings.catch_warnings():  # "multilingual functions are not available": we use English only
        warnings.simplefilter("ignore", UserWarning)
        return LocalWordNet(str(folder), None)


def tagged_sense_counts(folder: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """(lemma, pos) → (senses tagged in SemCor, synsets), read from the ``index.*`` files."""
    counts = {}
    for name in ("noun", "verb", "adj", "adv"):
        with (folder / f"index.{name}").open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("  "):
                    continue  # the licence header
                parts = line.split()
                pointers = int(parts[3])
                counts[(parts[0], parts[1])] = (int(parts[5 + pointers]), int(parts[2]))
    return counts


class Thesaurus:
    """Synonyms and antonyms of a word within its dominant part of speech (cached per word)."""

    def __init__(self, wordnet_dir: str | None = None):
        self.wordnet = load_wordnet(wordnet_dir)
        self.counts = tagged_sense_counts(prepare_wordnet(wordnet_dir))
        self.lookup = functools.lru_cache(maxsize=200_000)(self._lookup)

    def candidate(self, word: str) -> bool:
        return word.isalpha() and len(word) >= 3 and word.lower() not in FUNCTION_WORDS

    def part_of_speech(self, word: str) -> tuple[str, str] | None:
        """(lemma, pos) of the word's dominant part of speech: most SemCor-tagged senses, then synsets."""
        options = []
        for pos in POS:
            lemma = self.wordnet.morphy(word.lower(), pos)
            if lemma is not None and (lemma, pos) in self.counts:
                options.append((self.counts[(lemma, pos)], lemma, pos))
        return max(options)[1:] if options else None

    def _lookup(self, word: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        found = self.part_of_speech(word)
        if found is None:
            return (), ()
        base, pos = found
        synonyms: set[str] = set()
        antonyms: set[str] = set()
        for synset in self.wordnet.synsets(base, pos):
            for lemma in synset.lemmas():
                name = lemma.name()
                if name.isalpha() and name.lower() not in (word.lower(), base):
                    synonyms.add(name.lower())
                if name == base:
                    antonyms.update(a.name().lower() for a in lemma.antonyms() if a.name().isalpha())
        return tuple(sorted(synonyms)), tuple(sorted(antonyms))


@dataclass
class Views:
    original: str
    synonym: str
    antonym: str
    #: indices (pre-token words) replaced in each view
    synonym_words: tuple[int, ...]
    antonym_words: tuple[int, ...]


def _cased(replacement: str, word: str) -> str:
    return replacement[0].upper() + replacement[1:] if word[0].isupper() else replacement


def _rebuild(text: str, words: list[tuple[str, tuple[int, int]]], replacements: dict[int, str]) -> str:
    parts, last = [], 0
    for index in sorted(replacements):
        start, end = words[index][1]
        parts += [text[last:start], replacements[index]]
        last = end
    return "".join(parts) + text[last:]


def make_views(
    text: str,
    pre_tokenize,
    thesaurus: Thesaurus,
    rng: random.Random,
    fillers: list[str],
    synonym_share: float = 0.4,
    antonym_share: float = 0.2,
) -> Views:
    """One sentence's synonym and antonym views; ``fillers`` are random words for the antonym view."""
    words = pre_tokenize(text)
    candidates = [i for i, (word, _) in enumerate(words) if thesaurus.candidate(word)]
    with_synonyms = [i for i in candidates if thesaurus.lookup(words[i][0])[0]]
    chosen = rng.sample(with_synonyms, round(synonym_share * len(with_synonyms))) if with_synonyms else []
    synonyms = {i: _cased(rng.choice(thesaurus.lookup(words[i][0])[0]), words[i][0]) for i in chosen}
    count = max(1, round(antonym_share * len(candidates))) if candidates else 0
    with_antonyms = [i for i in candidates if thesaurus.lookup(words[i][0])[1]]
    rng.shuffle(with_antonyms)
    picked = with_antonyms[:count]
    rest = [i for i in candidates if i not in picked]
    picked += rng.sample(rest, min(count - len(picked), len(rest)))
    antonyms = {}
    for i in picked:
        word = words[i][0]
        options = thesaurus.lookup(word)[1]
        replacement = rng.choice(options) if options else None
        for _ in range(10 if replacement is None and fillers else 0):  # a random word instead
            filler = rng.choice(fillers)
            if filler.lower() != word.lower():
                replacement = filler
                break
        if replacement is not None:
            antonyms[i] = _cased(replacement, word)
    return Views(
        text,
        _rebuild(text, words, synonyms),
        _rebuild(text, words, antonyms),
        tuple(sorted(synonyms)),
        tuple(sorted(antonyms)),
    )


def pre_tokenizer(tokenizer):
    """``text → [(word, (start, end))]``: the fast tokenizer's words, before word pieces."""
    return tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str


#: rows whose words supply the antonym view's random words
FILLER_SAMPLE = 5000


class WordNetViewsDataset(ContrastiveDataset):
    """One-sentence rows with CLINE's views (``data.augment: wordnet``): item i is (x, x_syn, x_ant) as
    three token views, and its batch's ``token_labels`` flag the replaced words' tokens of the two made
    views (1 replaced, 0 kept; −100 on the original view, special tokens and padding).

    Views are made lazily for the rows a batch uses, seeded by the row, so a run and its resumption see
    the same views; WordNet is opened here, so a missing WordNet fails before training.
    """

    def __init__(self, records: Records, tokenizer, config, max_length: int = 32):
        if records.n_columns != 1:
            raise DataError(
                f"{records.path}: data.augment wordnet makes views of sentences, one per row "
                f"(got {records.n_columns} columns)"
            )
        super().__init__(records, tokenizer, max_length, n_views=1)
        self.n_views = 3
        self.config = config
        self.tokenizer = tokenizer
        self.thesaurus = Thesaurus(config.wordnet_dir or None)
        self.split = pre_tokenizer(tokenizer)
        texts = [row[0] for row in records.rows]
        sample = random.Random(config.augment_seed).sample(range(len(texts)), min(FILLER_SAMPLE, len(texts)))
        self.fillers = sorted(
            {w for i in sample for w, _ in self.split(texts[i]) if self.thesaurus.candidate(w)}
        )
        self.made: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}

    def views_of(self, row: int) -> Views:
        c = self.config
        rng = random.Random(c.augment_seed * 1_000_003 + row)
        text = self.records.rows[row][0]
        return make_views(
            text, self.split, self.thesaurus, rng, self.fillers, c.synonym_share, c.antonym_share
        )

    def _made(self, row: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(token ids of the three views, their token labels), made once per row."""
        if row not in self.made:
            views = self.views_of(row)
            tokens = self.tokenizer(
                [views.synonym, views.antonym], truncation=True, max_length=self.max_length
            )
            ids, labels = [self.columns[0][row]], [np.full(len(self.columns[0][row]), -100, np.int64)]
            for k, replaced in enumerate((views.synonym_words, views.antonym_words)):
                ids.append(np.asarray(tokens["input_ids"][k], dtype=np.int32))
                labels.append(
                    np.array([-100 if w is None else int(w in replaced) for w in tokens.word_ids(k)])
                )
            self.made[row] = ids, labels
        return self.made[row]

    def __getitem__(self, i: int) -> tuple[int, list[np.ndarray]]:
        return i, self._made(i)[0]

    def collate(self, items: list[tuple[int, list[np.ndarray]]]) -> Batch:
        batch = collate_views(items, self.pad_token_id)
        labels = torch.full(batch.input_ids.shape, -100, dtype=torch.long)
        for b, (row, _) in enumerate(items):
            for v, flags in enumerate(self._made(row)[1]):
                labels[b, v, : len(flags)] = torch.from_numpy(flags)
        batch.token_labels = labels
        return batch
