"""A static model's token ids from tokie are exactly the tokenizer's, or tokie is not used (token_ids.py)."""

from __future__ import annotations

import copy
import gzip
import logging
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import BertTokenizerFast

from sentcl.model import StaticEncoder
from sentcl.model.backbone import resolve_model_path
from sentcl.model.token_ids import TokenizerIds, TokieIds, ranges
from tests.conftest import build_vocab

#: texts where the libraries are known to part (DEL, unassigned code points, Thai, Ethiopic, Mongolian)
#: mixed with ones they share, in one batch
HARD = [
    "plain words, then a\x7fdel",
    "unassigned \u0378 and \u20c1 code points",
    "Thai \u0e67 digits and \u135b Ethiopic \u1a1d",
    "naïve café Ångström Σοφός ΣΟΦΟΣ",
    "[CLS] special [SEP] tokens in [MASK] text",
    "",
    "a" * 150,
    "tab\tand\nnewline",
    "東京は日本の首都",
]


def sentences_of(ids: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[int, list[int]]:
    order, flat, lengths = ids
    assert len(order) == len(lengths) and int(lengths.sum()) == len(flat)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    return {int(k): flat[s : s + n].tolist() for k, s, n in zip(order, starts, lengths, strict=True)}


def tokenizers_ids(tokenizer: Tokenizer, texts: list[str]) -> dict[int, list[int]]:
    return {i: e.ids for i, e in enumerate(tokenizer.encode_batch(texts, add_special_tokens=False))}


def random_texts(count: int, seed: int = 0) -> list[str]:
    """Strings over the whole of Unicode (unassigned code points too) and plenty of ASCII and spaces."""
    rng = random.Random(seed)
    pool = [chr(p) for p in range(0x20, 0x7F)] * 40 + [" "] * 400
    return [
        "".join(
            rng.choice(pool) if rng.random() < 0.8 else chr(rng.choice([rng.randrange(0x80, 0x3000), 0x7F]))
            for _ in range(rng.randrange(0, 40))
        )
        for _ in range(count)
    ]


def plain(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


@pytest.fixture
def bert() -> BertTokenizerFast:
    """A BERT WordPiece tokenizer whose ids run 0..V-1 (the tiny model's has a gap: "a" is listed twice)."""
    return BertTokenizerFast(
        vocab={t: i for i, t in enumerate(dict.fromkeys(build_vocab()))}, do_lower_case=True
    )


@pytest.fixture
def bert_tokenizer(bert) -> Tokenizer:
    return plain(Tokenizer.from_str(bert.backend_tokenizer.to_str()))


def test_tokie_gives_the_tokenizers_ids_where_it_is_trusted_and_leaves_the_rest_to_tokenizers(bert_tokenizer):
    ids = TokieIds.for_tokenizer(bert_tokenizer)
    assert isinstance(ids, TokieIds)
    texts = HARD + random_texts(3000)
    assert sentences_of(ids(texts)) == tokenizers_ids(bert_tokenizer, texts)
    outside = ids.outside()
    assert outside.search("plain ascii, with punctuation!") is None
    assert outside.search("del\x7f") is not None  # measured: tokie and tokenizers part on DEL
    # a batch of trusted texts alone goes through tokie in one call, in order
    order, _, _ = ids(["one", "two words", ""])
    assert order.tolist() == [0, 1, 2]


def test_a_tokie_that_disagrees_is_not_used_at_all(tiny_model_dir, caplog):
    # measured: tokie numbers a vocabulary with a gap (the tiny model's lists "a" twice, so id 6 is no
    # token's) without the gap, every id after it one lower than the tokenizer's
    tokenizer = plain(Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json")))
    ids = TokieIds.for_tokenizer(tokenizer)
    texts = ["a plain sentence", "another one, with words"]
    with caplog.at_level(logging.INFO, logger="sentcl.model.token_ids"):
        assert sentences_of(ids(texts)) == tokenizers_ids(tokenizer, texts)
    assert "tokie disagrees" in caplog.text
    assert ids.outside().search("plain") is not None  # nothing goes to tokie


def test_other_tokenizers_and_a_missing_tokie_use_tokenizers(bert_tokenizer, monkeypatch):
    word_level = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    assert type(TokieIds.for_tokenizer(word_level)) is TokenizerIds
    monkeypatch.setitem(sys.modules, "tokie", None)  # import tokie fails
    assert type(TokieIds.for_tokenizer(bert_tokenizer)) is TokenizerIds


def test_a_static_model_with_tokie_copies_pickles_and_encodes_as_with_tokenizers(bert):
    vectors = torch.randn(len(bert), 8, generator=torch.Generator().manual_seed(0))
    encoder = StaticEncoder(vectors, bert, "test")
    assert isinstance(encoder.token_ids, TokieIds)
    texts = HARD + random_texts(500, seed=1)
    got = encoder.encode(texts, batch_size=7)
    assert encoder.token_ids.outside().search("the dog runs") is None  # tokie did the plain ones
    for copied in (copy.deepcopy(encoder), pickle.loads(pickle.dumps(encoder))):
        np.testing.assert_array_equal(copied.encode(texts), got)
    encoder.token_ids = TokenizerIds(encoder.fast)
    np.testing.assert_array_equal(encoder.encode(texts), got)


def test_ranges_are_a_character_class_of_exactly_the_points():
    import re

    points = [0x41, 0x42, 0x43, 0x61, 0x2000, 0x2001]
    pattern = re.compile(f"[{ranges(points)}]")
    assert [p for p in range(0x2100) if pattern.match(chr(p))] == points


@pytest.mark.integration
def test_tokie_matches_the_real_minilm_tokenizer_on_the_shared_wiki(shared_data):
    path = Path(resolve_model_path("sentence-transformers/all-MiniLM-L6-v2"))
    tokenizer = plain(Tokenizer.from_file(str(path / "tokenizer.json")))
    ids = TokieIds.for_tokenizer(tokenizer)
    assert isinstance(ids, TokieIds)
    with gzip.open(shared_data / "wiki" / "sentences.txt.gz", "rt", encoding="utf-8") as handle:
        texts = [line.strip() for line, _ in zip(handle, range(20_000), strict=False)]
    texts += HARD + random_texts(5000, seed=2)
    assert sentences_of(ids(texts)) == tokenizers_ids(tokenizer, texts)
