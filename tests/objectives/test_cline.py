import math
import random

import pytest
import torch

from sentcl.config import ConfigError
from sentcl.data import ContrastiveDataset, DataConfig, DataError, build_dataset, read_records
from sentcl.data.wordnet_views import Thesaurus, WordNetViewsDataset, make_views, pre_tokenizer
from sentcl.objectives import CLINEConfig, build_objective
from sentcl.objectives.cline import CLINE, cline_contrast
from tests.objectives.helpers import tiny_encoder


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


def views_dataset(tmp_path, encoder, lines, **keys):
    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(lines) + "\n")
    config = DataConfig(train_file=str(data), augment="wordnet", **keys)
    return build_dataset(config, read_records(data), encoder.tokenizer)


def test_detection_labels_mark_the_pieces_of_replaced_words(encoder, tmp_path):
    dataset = views_dataset(
        tmp_path, encoder, ["The happy child cooks good food, and the sad man sells houses."]
    )
    assert isinstance(dataset, WordNetViewsDataset) and dataset.n_views == 3
    batch = dataset.collate([dataset[0]])
    views = dataset.views_of(0)
    assert batch.input_ids.shape[:2] == (1, 3) and batch.token_labels[0, 0].eq(-100).all()
    for v, (text, replaced) in enumerate(
        [(views.synonym, views.synonym_words), (views.antonym, views.antonym_words)], start=1
    ):
        words = encoder.tokenizer([text], truncation=True, max_length=32).word_ids(0)
        expected = [-100 if w is None else int(w in replaced) for w in words]
        assert batch.token_labels[0, v, : len(words)].tolist() == expected
        assert batch.token_labels[0, v].eq(1).sum() >= len(replaced) > 0
        assert batch.token_labels[0, v, len(words) :].eq(-100).all()  # padding


@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_objective_terms_gradients_and_learning(encoder, tmp_path, variant):
    lines = ["the happy dog runs in the big park", "a sad woman reads a good book"]
    dataset = views_dataset(tmp_path, encoder, lines)
    config = CLINEConfig(variant=variant, mlm_probability=0.3)
    objective = build_objective("cline", config, encoder, dataset)
    assert isinstance(objective, CLINE)  # its own MLM term: not wrapped
    batch = dataset.collate([dataset[0], dataset[1]])
    optimiser = torch.optim.Adam([p for p in objective.parameters() if p.requires_grad], lr=3e-3)
    objective.train()
    detector = objective.detector if variant == "paper" else objective.detector[-1]
    losses = []
    for step in range(12):
        torch.manual_seed(step % 2)
        out = objective(batch)
        assert set(out.terms) == {"contrast", "rtd", "mlm"}
        optimiser.zero_grad()
        out.loss.backward()
        if step == 0:
            assert detector.weight.grad.abs().sum() > 0
            assert encoder.backbone.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0
            if variant == "reference":  # the learned uncertainty weights
                assert objective.log_vars.grad.abs().sum() > 0
        optimiser.step()
        losses.append(out.terms["contrast"].item() + out.terms["rtd"].item())
    assert sum(losses[-2:]) < sum(losses[:2])
    assert dataset.views_of(0) == dataset.views_of(0) and dataset.views_of(0).synonym != lines[0]


def test_the_reference_losses_are_the_authors(encoder, tmp_path):
    """kandorm/CLINE LecbertForPreTraining: BCE on σ(mean(x ⊙ view)) (1 for x_syn, 0 for x_ant); 3-class
    token labels (0 kept, 1 replaced in x_syn, 2 in x_ant); Σ e^{-s} L + max(s, 0), which is the plain sum
    at s = 0."""
    from sentcl.objectives.cline import reference_contrast

    torch.manual_seed(0)
    x, syn, ant = (torch.randn(3, 8, dtype=torch.float64) for _ in range(3))
    expected = 0.0
    for i in range(3):
        for other, label in ((syn[i], 1.0), (ant[i], 0.0)):
            p = 1 / (1 + math.exp(-float((x[i] * other).mean())))
            expected += -(label * math.log(p) + (1 - label) * math.log(1 - p))
    assert reference_contrast(x, syn, ant).item() == pytest.approx(expected / 6, abs=1e-6)
    lines = ["the happy dog runs in the big park", "a sad woman reads a good book"]
    dataset = views_dataset(tmp_path, encoder, lines)
    objective = build_objective("cline", CLINEConfig(mlm_probability=0.3), encoder, dataset).eval()
    batch = dataset.collate([dataset[0], dataset[1]])
    torch.manual_seed(1)
    out = objective(batch)
    assert out.loss.item() == pytest.approx(sum(t.item() for t in out.terms.values()), abs=1e-5)
    with torch.no_grad():
        objective.log_vars.fill_(1.0)
    torch.manual_seed(1)
    weighted = objective(batch)
    assert weighted.loss.item() == pytest.approx(
        math.exp(-1) * sum(t.item() for t in weighted.terms.values()) + 3.0, abs=1e-5
    )


def test_missing_wordnet_or_views_say_what_to_do(encoder, tmp_path):
    with pytest.raises(DataError, match="wordnet-base"):
        views_dataset(tmp_path, encoder, ["a dog"], wordnet_dir=str(tmp_path))
    with pytest.raises(DataError, match="one per row"):
        table = tmp_path / "pairs.csv"
        table.write_text("a dog,a cat\n")
        build_dataset(
            DataConfig(train_file=str(table), augment="wordnet"), read_records(table), encoder.tokenizer
        )
    with pytest.raises(ConfigError, match=r"data\.augment"):
        plain = ContrastiveDataset(read_records(table), encoder.tokenizer)
        CLINE(CLINEConfig(), encoder, plain)
