import math

import pytest
import torch

from sentcl.data import ContrastiveDataset, DataError, read_records
from sentcl.objectives import EASEConfig, build_objective
from sentcl.objectives.ease import EASE, ease_entity_loss, read_entity_vectors
from sentcl.objectives.simcse import info_nce_loss
from tests.objectives.helpers import tiny_encoder

ROWS = [
    ("a man plays the ball", "Football", "Cooking"),
    ("the dog runs on the street", "Dog", "Cat"),
    ("a woman reads a book", "Book", "Football"),
    ("two men play the ball", "Football", "Music"),
]


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "avg")


@pytest.fixture
def records(tmp_path):
    path = tmp_path / "ease.tsv"
    path.write_text("sentence\tentity\thard_negative_entity\n" + "".join("\t".join(r) + "\n" for r in ROWS))
    return read_records(path)


def dataset_of(records, encoder, views=2):
    return ContrastiveDataset(records, encoder.tokenizer, n_views=views, text_columns=1)


def batch_of_rows(dataset):
    return dataset.collate([dataset[i] for i in range(len(dataset))])


def test_entity_loss_equals_a_naive_reference():
    torch.manual_seed(0)
    h, e, n = (torch.randn(4, 5, dtype=torch.float64) for _ in range(3))
    ids = torch.tensor([0, 1, 2, 0])  # rows 0 and 3 share an entity: neither is the other's negative

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    total = 0.0
    for i in range(4):
        denominator = sum(math.exp(cos(h[i], e[j]) / 0.05) for j in range(4) if j == i or ids[j] != ids[i])
        denominator += sum(math.exp(cos(h[i], n[j]) / 0.05) for j in range(4))
        total += -cos(h[i], e[i]) / 0.05 + math.log(denominator)
    assert ease_entity_loss(h, e, ids, n, 0.05).item() == pytest.approx(total / 4, abs=1e-9)


def test_binds_the_entity_vocabulary_and_initialises_from_vectors(tmp_path, encoder, records):
    vectors = tmp_path / "vectors.tsv"
    vectors.write_text("Football\t1\t0\t0\nDog\t0\t1\t0\nUnused\t0\t0\t1\n")
    dataset = dataset_of(records, encoder)
    objective = EASE(EASEConfig(variant="paper", entity_vectors=str(vectors)), encoder, dataset)
    names = dataset.label_names
    assert names == ["Book", "Cat", "Cooking", "Dog", "Football", "Music"]
    table = objective.entities.weight
    assert table.shape == (6, 3) and objective.projection.weight.shape == (encoder.dimension, 3)
    assert torch.equal(table[names.index("Football")], torch.tensor([1.0, 0, 0]))
    assert batch_of_rows(dataset).labels[2].tolist() == [names.index("Book"), names.index("Football")]


def test_total_is_entity_plus_lambda_self_and_gradients_reach_table_and_map(encoder, records):
    dataset = dataset_of(records, encoder)
    objective = build_objective("ease", EASEConfig(variant="paper", self_weight=0.5), encoder, dataset)
    z = torch.randn(4, 2, encoder.dimension, requires_grad=True)
    batch = batch_of_rows(dataset)
    out = objective.loss_from_embeddings(z, batch)
    expected_self = info_nce_loss(z[:, 0], z[:, 1], temperature=0.05)
    assert out.terms["self"].item() == pytest.approx(expected_self.item(), abs=1e-6)
    assert out.loss.item() == pytest.approx(out.terms["entity"].item() + 0.5 * expected_self.item(), abs=1e-5)
    out.loss.backward()
    used = range(len(dataset.label_names))  # every entity is some row's entity or hard negative
    assert objective.entities.weight.grad[used].abs().sum(1).gt(0).all()
    assert objective.projection.weight.grad.abs().sum() > 0 and z.grad.abs().sum() > 0


def test_training_the_table_pulls_sentences_to_their_entities(encoder, records):
    dataset = dataset_of(records, encoder, views=1)
    objective = EASE(EASEConfig(variant="paper", self_weight=0.0), encoder, dataset)
    torch.manual_seed(0)
    z = torch.randn(4, 1, encoder.dimension)
    batch = batch_of_rows(dataset)
    optimiser = torch.optim.SGD([objective.entities.weight, objective.projection.weight], lr=1.0)
    losses = []
    for _ in range(30):
        out = objective.loss_from_embeddings(z, batch)
        optimiser.zero_grad()
        out.loss.backward()
        optimiser.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0] * 0.5


def test_bad_inputs_name_the_file_and_line(tmp_path, encoder, records):
    bad = tmp_path / "bad.tsv"
    bad.write_text("Football\t1\t0\nDog\t1\tx\n")
    with pytest.raises(DataError, match=r"bad\.tsv:2"):
        read_entity_vectors(bad)
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("Football\t1\t0\nDog\t1\n")
    with pytest.raises(DataError, match=r"ragged\.tsv:2: 1 values, expected 2"):
        read_entity_vectors(ragged)
    one_column = tmp_path / "sentences.txt"
    one_column.write_text("a dog\na cat\n")
    with pytest.raises(DataError, match="sentence, entity"):
        EASE(EASEConfig(), encoder, ContrastiveDataset(read_records(one_column), encoder.tokenizer))


def test_the_reference_variant_is_the_authors_script(encoder, records):
    """studio-ousia/ease: L = L_self + 0.01 · L_ent, the entity logits cos/100, a hard negative's own logit
    +1, duplicates not masked, and a Linear + tanh projection."""
    dataset = dataset_of(records, encoder)
    objective = build_objective("ease", EASEConfig(), encoder, dataset)
    assert objective.config.variant == "reference"
    assert isinstance(objective.projection[1], torch.nn.Tanh) and objective.projection[0].bias is not None
    z = torch.randn(4, 2, encoder.dimension, dtype=torch.float32)
    batch = batch_of_rows(dataset)
    out = objective.loss_from_embeddings(z, batch)
    with torch.no_grad():
        e = objective.projection(objective.entities(batch.labels[:, 0]))
        n = objective.projection(objective.entities(batch.labels[:, 1]))
    total = 0.0
    for i in range(4):
        logits = [torch.cosine_similarity(z[i, 0], e[j], 0).item() / 100 for j in range(4)]
        logits += [
            torch.cosine_similarity(z[i, 0], n[j], 0).item() / 100 + (1.0 if j == i else 0.0)
            for j in range(4)
        ]
        total += -logits[i] + math.log(sum(math.exp(x) for x in logits))
    assert out.terms["entity"].item() == pytest.approx(total / 4, abs=1e-5)
    expected_self = info_nce_loss(z[:, 0], z[:, 1], temperature=0.05).item()
    assert out.loss.item() == pytest.approx(expected_self + 0.01 * out.terms["entity"].item(), abs=1e-5)
