import gzip
import json

import pytest

from sentcl.data import DataError
from sentcl.data.entity_pairs import detokenize, redocred_entity_pairs


def document(title, sentences, vertices):
    return {"title": title, "sents": [s.split() for s in sentences], "vertexSet": vertices, "labels": []}


def mention(name, sent_id, kind):
    return {"name": name, "sent_id": sent_id, "type": kind, "pos": [0, 1]}


@pytest.fixture
def corpus(tmp_path):
    docs = [
        document("A", ["Ann Lee was born in Paris .", "Lee sang ( loudly ) ."],
                 [[mention("Ann Lee", 0, "PER"), mention("Lee", 1, "PER")], [mention("Paris", 0, "LOC")],
                  [mention("1990", 1, "TIME")]]),
        document("B", ["Bob Ray lives in Rome ."],
                 [[mention("Bob Ray", 0, "PER")], [mention("Rome", 0, "LOC")]]),
    ]  # fmt: skip
    path = tmp_path / "dev_revised.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(docs, handle)
    return path


def test_one_row_per_named_entity_in_a_sentence_with_a_same_type_negative_from_another_document(corpus):
    rows = redocred_entity_pairs([corpus])
    assert ("Ann Lee was born in Paris.", "Ann Lee", "Bob Ray") in rows
    assert ("Lee sang (loudly).", "Ann Lee", "Bob Ray") in rows  # the longest mention names the entity
    assert ("Ann Lee was born in Paris.", "Paris", "Rome") in rows
    assert ("Bob Ray lives in Rome.", "Rome", "Paris") in rows
    assert all(entity != "1990" for _, entity, _ in rows)  # dates are no entities
    assert len(rows) == 5 and rows == redocred_entity_pairs([corpus])  # seeded


def test_detokenize_and_bad_file(tmp_path):
    assert detokenize(["He", "did", "n't", "go", ",", "(", "really", ")", "."]) == "He didn't go, (really)."
    bad = tmp_path / "x.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(DataError, match=r"x\.json\.gz"):
        redocred_entity_pairs([bad])


def test_a_file_that_is_not_json_names_its_line(tmp_path):
    bad = tmp_path / "y.json.gz"
    bad.write_bytes(gzip.compress(b'[\n{"sents": []},\n{oops}\n]'))
    with pytest.raises(DataError, match=r"y\.json\.gz:3: not a Re-DocRED JSON file"):
        redocred_entity_pairs([bad])
    with pytest.raises(DataError, match=r"absent\.json\.gz: file not found"):
        redocred_entity_pairs([tmp_path / "absent.json.gz"])
