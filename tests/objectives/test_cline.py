import math
import random

import pytest
import torch

from sentcl.data import DataError, read_records
from sentcl.data.wordnet_views import Thesaurus, make_views, pre_tokenizer
from sentcl.objectives import CLINEConfig, build_objective
from sentcl.objectives.cline import CLINE, cline_contrast
from tests.conftest import SENTENCES
from tests.objectives.helpers import batch_of, tiny_encoder


@pytest.fixture(scope="module")
def thesaurus():
    return Thesaurus()  # Debian's wordnet-base, installed by `make test`


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "avg")


def test_wordnet_relations_within_the_dominant_part_of_speech(thesaurus):
    synonyms, antonyms = thesaurus.lookup("happy")
    assert "glad" in synonyms and antonyms == ("unhappy",)
    assert thesaurus.part_of_speech("cooks") == ("cook", "v") and thesaurus.part_of_speech("dogs") == (
        "dog",
        "n",
    )
    assert "little" in thesaurus.lookup("big")[1]
    assert not thesaurus.candidate("the") and not thesaurus.candidate("1990") and thesaurus.candidate("House")


def test_views_replace_the_chosen_shares_and_record_the_words(thesaurus, encoder):
    split = pre_tokenizer(encoder.tokenizer)
    text = "The happy child cooks good food, and the sad man sells big houses."
    views = make_views(text, split, thesaurus, random.Random(0), ["zebra"], 0.4, 0.2)
    words, synonym_words = split(text), split(views.synonym)
    assert len(words) == len(synonym_words)  # one word for one word: the word indices still line up
    changed = tuple(i for i, (a, b) in enumerate(zip(words, synonym_words, strict=True)) if a[0] != b[0])
    assert changed == views.synonym_words and len(changed) >= 2
    candidates = [i for i, (w, _) in enumerate(words) if thesaurus.candidate(w)]
    assert len(views.antonym_words) == round(0.2 * len(candidates))
    antonym_words = [w for w, _ in split(views.antonym)]
    for i in views.antonym_words:  # an antonym where WordNet has one, else a random word
        original = words[i][0]
        assert antonym_words[i].lower() in thesaurus.lookup(original)[1] or antonym_words[i] == "zebra"
    again = make_views(text, split, thesaurus, random.Random(0), ["zebra"], 0.4, 0.2)
    assert again == views  # seeded


def test_contrast_equals_a_naive_reference_and_closed_forms():
    torch.manual_seed(0)
    x, s, a = (torch.randn(3, 4, dtype=torch.float64) for _ in range(3))
    expected = sum(
        -math.log(
            math.exp(float(x[i] @ s[i])) / (math.exp(float(x[i] @ s[i])) + math.exp(float(x[i] @ a[i])))
        )
        for i in range(3)
    )
    assert cline_contrast(x, s, a, "dot", 1.0).item() == pytest.approx(expected / 3, abs=1e-6)
    assert cline_contrast(x, x, x, "cosine", 0.05).item() == pytest.approx(math.log(2), abs=1e-6)


def test_detection_labels_mark_the_pieces_of_replaced_words(encoder, tmp_path):
    objective = CLINE(CLINEConfig(mlm_weight=0.0), encoder)
    _, mask, labels = objective.tokenize(["a dog eats zebras", "a cat"], [(3,), ()], "cpu")
    words = encoder.tokenizer(["a dog eats zebras"]).word_ids(0)
    expected = [-100.0 if w is None else float(w == 3) for w in words]
    assert labels[0, : len(words)].tolist() == expected and labels[0].eq(1).sum() > 1  # zebras: many pieces
    assert labels[1].eq(1).sum() == 0 and labels[1, mask[1] == 0].eq(-100).all()


def test_objective_terms_gradients_and_learning(encoder, tmp_path):
    data = tmp_path / "sentences.txt"
    data.write_text(
        "\n".join(["the happy dog runs in the big park", "a sad woman reads a good book"] * 3) + "\n"
    )
    objective = build_objective("cline", CLINEConfig(mlm_probability=0.3), encoder)
    assert isinstance(objective, CLINE)  # its own MLM term: not wrapped
    objective.bind_records(read_records(data))
    batch = batch_of(
        encoder, ["the happy dog runs in the big park", "a sad woman reads a good book"], views=1
    )
    params = {id(p): p for p in [*encoder.parameters(), *objective.parameters()] if p.requires_grad}
    optimiser = torch.optim.Adam(params.values(), lr=3e-3)
    encoder.train()
    losses = []
    for step in range(12):
        torch.manual_seed(step % 2)
        out = objective(encoder(batch.input_ids, batch.attention_mask), batch)
        assert set(out.terms) == {"contrast", "rtd", "mlm"}
        optimiser.zero_grad()
        out.loss.backward()
        if step == 0:
            assert objective.detector.weight.grad.abs().sum() > 0
            assert encoder.backbone.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0
        optimiser.step()
        losses.append(out.terms["contrast"].item() + out.terms["rtd"].item())
    assert sum(losses[-2:]) < sum(losses[:2])
    assert objective.views_of(0) == objective.views_of(0) and objective.views_of(0).synonym != SENTENCES[0]


def test_missing_wordnet_says_how_to_install_it(encoder, tmp_path):
    with pytest.raises(DataError, match="wordnet-base"):
        CLINE(CLINEConfig(wordnet_dir=str(tmp_path)), encoder)
    with pytest.raises(DataError, match="one per row"):
        table = tmp_path / "pairs.csv"
        table.write_text("a dog,a cat\n")
        CLINE(CLINEConfig(mlm_weight=0.0), encoder).bind_records(read_records(table))
