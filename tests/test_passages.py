"""Long documents as passages: the windows against the tokenizer's own tokens, the scores against a loop,
and a retrieval folder whose relevant text sits past the model's length, found only by its passages."""

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

from sentcl.evaluation import build_evaluator
from sentcl.evaluation.registry import Options
from sentcl.passages import (
    PassageError,
    PassageSettings,
    document_scores,
    model_window,
    rank_documents,
    split_passages,
)
from tests.conftest import SENTENCES


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def body_of(words: int, start: int = 0) -> str:
    return " ".join(SENTENCES[(start + i) % len(SENTENCES)] for i in range(words // 6 + 1)).split(" ")[:words]


def text_of(words: int, start: int = 0) -> str:
    return " ".join(body_of(words, start))


def test_a_short_document_is_one_passage_the_truncated_document(tokenizer):
    split = split_passages(["a title"], ["the dog runs on the street"], tokenizer, 32)
    assert split.texts == ["a title the dog runs on the street"]
    assert split.starts.tolist() == [0, 1] and split.owner.tolist() == [0]
    assert split.split_documents == 0


@pytest.mark.parametrize(
    ("length", "overlap", "title"), [(16, 4, "old book"), (24, 0, ""), (32, 8, "the car")]
)
def test_windows_cover_the_body_with_the_overlap_and_fit_the_model(tokenizer, length, overlap, title):
    body = text_of(120)
    split = split_passages([title, "x"], [body, "a dog"], tokenizer, length, overlap)
    own = split.texts[split.starts[0] : split.starts[1]]
    assert len(own) > 2 and split.owner.tolist() == [0] * len(own) + [1]
    body_ids = tokenizer(body, add_special_tokens=False)["input_ids"]
    pieces = []
    for text in own:
        assert text.startswith(title)  # the title before every passage
        assert len(tokenizer(text)["input_ids"]) <= length  # title, window and special tokens fit
        piece = text.removeprefix(title).strip()
        assert piece in body  # the user's own characters
        pieces.append(tokenizer(piece, add_special_tokens=False)["input_ids"])
    at = []  # where each window starts in the body's tokens: the passage's text gives back those tokens
    for ids in pieces:
        begin = next(
            i for i in range((at[-1] + 1) if at else 0, len(body_ids)) if body_ids[i : i + len(ids)] == ids
        )
        at.append(begin)
    assert at[0] == 0 and at[-1] + len(pieces[-1]) == len(body_ids)  # from the body's start to its end
    for a, b, first in zip(at, at[1:], pieces, strict=False):
        assert b > a and a + len(first) - b >= overlap  # moving on, sharing at least the overlap
    words = tokenizer(body, add_special_tokens=False).word_ids()
    for begin, ids in zip(at, pieces, strict=True):  # whole words only
        assert begin == 0 or words[begin] != words[begin - 1]
        end = begin + len(ids)
        assert end == len(words) or words[end] != words[end - 1]


def test_an_overlap_as_long_as_the_window_is_one_line(tokenizer):
    with pytest.raises(PassageError, match="--passage-overlap 20: not below the window of 14 tokens"):
        split_passages([""], [text_of(60)], tokenizer, 16, overlap=20)
    with pytest.raises(PassageError, match="an overlap of -1 tokens"):
        PassageSettings("max", -1).validate()
    with pytest.raises(PassageError, match="'mean' is not one of max, first"):
        PassageSettings("mean").validate()


def test_document_scores_and_ranking_against_a_loop():
    rng = np.random.default_rng(0)
    starts = np.array([0, 3, 4, 9, 11])
    passages = rng.normal(size=(11, 5))
    queries = rng.normal(size=(7, 5))
    scores = queries @ passages.T
    for how, pick in (("max", np.max), ("first", lambda s: s[0])):
        expected = np.array(
            [[pick(row[starts[d] : starts[d + 1]]) for d in range(4)] for row in scores]
        )  # fmt: skip
        assert np.allclose(document_scores(scores, starts, how), expected)
        exclude = [None, 2, None, 0, None, None, 3]
        ranked = rank_documents(queries, passages, starts, 3, exclude, how, cells=20)  # blocks of one query
        for q, row in enumerate(expected):
            row = row.copy()
            if exclude[q] is not None:
                row[exclude[q]] = -np.inf
            assert ranked[q].tolist() == np.argsort(-row, kind="stable")[:3].tolist()


class Truncating:
    """An encoder that reads its first ``max_length`` tokens (special ones included) as a model does: the
    vector says whether "needle" is among them."""

    def __init__(self, tokenizer, max_length):
        self.tokenizer, self.max_length, self.texts = tokenizer, max_length, 0

    def encode(self, sentences):
        self.texts += len(sentences)
        rows = []
        for text in sentences:
            ids = self.tokenizer(text, truncation=True, max_length=self.max_length)["input_ids"]
            seen = self.tokenizer.decode(ids, skip_special_tokens=True)
            rows.append([1.0, 0.0] if "needle" in seen.split() else [0.0, 1.0])
        return np.asarray(rows)


def write_needle_folder(folder):
    """One query "needle", relevant to d1, the one document with the word, past its 24th token."""
    folder.mkdir()
    documents = [
        {"_id": "d0", "title": "first", "text": text_of(40)},
        {"_id": "d2", "title": "third", "text": text_of(60, 5)},
        {"_id": "d1", "title": "second", "text": text_of(40) + " needle " + text_of(10, 3)},
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    queries = [{"_id": "q0", "text": "needle"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\n")
    return folder


def test_relevant_text_past_the_models_length_is_found_by_its_passages(tmp_path, tokenizer):
    folder = write_needle_folder(tmp_path / "beir")
    found = {}
    for passages in ("", "first", "max"):
        model = Truncating(tokenizer, 24)
        evaluator = build_evaluator(tmp_path, str(folder), Options(passages=passages))
        found[passages] = evaluator(model)["beir_mrr@10"]
        if passages:
            run = evaluator.results()["beir"]["retrieval"]["passages"]
            assert run["documents_split"] == 3 and model.texts == run["passages"] + 1  # + the query
            assert f"[{passages} of {run['passages']} passages; 3 documents split]" in evaluator.format(
                evaluator.last
            )
    # truncated (or by its first passage) d1's needle is never seen: every document ties, d1 comes third by
    # its row; its best passage finds it first
    assert found[""] == found["first"] == pytest.approx(100 / 3)
    assert found["max"] == pytest.approx(100)
    assert build_evaluator(tmp_path, str(folder), Options(passages="max")).passages.score == "max"


def test_passages_need_a_tokenizer_and_a_length(tmp_path):
    class Plain:
        def encode(self, sentences):
            return np.ones((len(sentences), 2))

    folder = write_needle_folder(tmp_path / "beir")
    with pytest.raises(PassageError, match="no fast tokenizer with a length"):
        build_evaluator(tmp_path, str(folder), Options(passages="max"))(Plain())
    with pytest.raises(PassageError):
        model_window(Plain())
