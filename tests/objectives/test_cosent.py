"""CoSENT (objectives/cosent.py) equal to sentence-transformers' CoSENTLoss on the same embeddings and labels,
its closed forms, the pairs it makes from triplets and labelled rows, and a run on a scored pair file."""

import math
from types import SimpleNamespace

import pytest
import torch
from sentence_transformers.sentence_transformer.losses import CoSENTLoss

from sentcl.config import ConfigError
from sentcl.objectives import CoSENT, CoSENTConfig
from sentcl.objectives.cosent import cosent_loss, label_values
from tests.conftest import SENTENCES
from tests.objectives.helpers import trains_three_steps


def st_cosent(left, right, labels, scale=20.0):
    """sentence-transformers' CoSENTLoss on these embeddings (the model is not used by this step)."""
    return CoSENTLoss(None, scale=scale).compute_loss_from_embeddings([left, right], labels)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_to_sentence_transformers_on_graded_labels_with_ties(seed):
    generator = torch.Generator().manual_seed(seed)
    left, right = torch.randn(12, 16, generator=generator), torch.randn(12, 16, generator=generator)
    labels = torch.randint(0, 4, (12,), generator=generator).float() * 1.25  # ties included
    ours = cosent_loss(torch.nn.functional.cosine_similarity(left, right), labels)
    assert ours.item() == pytest.approx(st_cosent(left, right, labels).item(), rel=1e-5)
    objective = CoSENT(CoSENTConfig(scale=10.0))
    objective.values = torch.unique(labels)  # the dataset's label table: ids → values
    batch = SimpleNamespace(labels=torch.searchsorted(objective.values, labels)[:, None])
    got = objective.loss_from_embeddings(torch.stack([left, right], 1), batch).loss
    assert got.item() == pytest.approx(st_cosent(left, right, labels, 10.0).item(), rel=1e-5)


def test_closed_forms_and_the_pairs_made_from_triplets():
    scores = torch.tensor([0.1, 0.5, 0.9])
    assert cosent_loss(scores, torch.ones(3)).item() == 0.0  # all tied: log(1 + 0)
    # two pairs in the wrong order by 0.4: log(1 + e^{20·0.4})
    assert cosent_loss(torch.tensor([0.9, 0.5]), torch.tensor([0.0, 1.0])).item() == pytest.approx(
        math.log1p(math.exp(8.0)), rel=1e-6
    )
    anchor, positive, negative = torch.randn(3, 5, 8).unbind(0)
    got = CoSENT().loss_from_embeddings(torch.stack([anchor, positive, negative], 1)).loss
    left, right = torch.cat([anchor, anchor]), torch.cat([positive, negative])
    assert got.item() == pytest.approx(
        st_cosent(left, right, torch.tensor([1.0] * 5 + [0.0] * 5)).item(), rel=1e-5
    )
    with pytest.raises(ValueError, match="CoSENT ranks labelled pairs"):
        CoSENT().loss_from_embeddings(torch.randn(4, 2, 8))


def test_labels_that_are_not_numbers_are_one_error_naming_the_label():
    assert label_values(
        SimpleNamespace(label_names=["0.5", "4", "1e0"], label_columns=1), "data"
    ).tolist() == [
        0.5,
        4.0,
        1.0,
    ]
    with pytest.raises(ConfigError, match="data: the label 'entailment' is not a number"):
        label_values(SimpleNamespace(label_names=["1", "entailment"], label_columns=1), "data")


def test_a_scored_pair_file_trains(tiny_model_dir, tmp_path, stsb_data_dir):
    rows = [
        f"{a}\t{b}\t{(i * 7) % 6}"
        for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1], strict=True))
    ]
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(rows * 2) + "\n", encoding="utf-8")
    assert trains_three_steps(tiny_model_dir, path, tmp_path / "run", stsb_data_dir, "cosent", text_columns=2)
