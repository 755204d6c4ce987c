"""AnglE (objectives/angle.py): its angle score equal to sentence-transformers' pairwise_angle_sim, its
angle term to AnglELoss and its cosine term to CoSENTLoss on the same embeddings and labels (pairs and
triplets), its in-batch terms to SimCSE's losses averaged, and an NLI run."""

import gzip
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses import AnglELoss, CoSENTLoss
from sentence_transformers.util import pairwise_angle_sim

from sentcl.config import ConfigError
from sentcl.objectives import AnglE, AnglEConfig
from sentcl.objectives.angle import angle_scores
from tests.conftest import SENTENCES
from tests.objectives.helpers import trains_three_steps


def st_loss(loss_class, embeddings, labels):
    """sentence-transformers' loss on these embeddings (the model is not used by this step)."""
    return loss_class(None).compute_loss_from_embeddings(embeddings, labels)


ANGLE_ONLY = AnglEConfig(cosine_weight=0.0, angle_weight=1.0, ibn_weight=0.0, cln_weight=0.0)
COSINE_ONLY = AnglEConfig(cosine_weight=1.0, angle_weight=0.0, ibn_weight=0.0, cln_weight=0.0)


@pytest.mark.parametrize("dim", [16, 15])
def test_the_angle_score_is_sentence_transformers_pairwise_angle_sim(dim):
    left, right = torch.randn(9, dim), torch.randn(9, dim)
    torch.testing.assert_close(
        angle_scores(left, right), pairwise_angle_sim(left, right), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        angle_scores(3 * left, right), angle_scores(left, 0.5 * right)
    )  # lengths drop out


def test_the_angle_and_cosine_terms_equal_anglelosss_and_cosentloss_on_triplets_and_graded_pairs():
    anchor, positive, negative = torch.randn(3, 6, 16).unbind(0)
    triplets = torch.stack([anchor, positive, negative], 1)
    got = AnglE(ANGLE_ONLY).loss_from_embeddings(triplets).loss
    assert got.item() == pytest.approx(
        st_loss(AnglELoss, [anchor, positive, negative], None).item(), rel=1e-5
    )
    labels = torch.tensor([0.0, 1.0, 2.5, 2.5, 5.0, 3.0])
    values = torch.unique(labels)
    batch = SimpleNamespace(labels=torch.searchsorted(values, labels)[:, None])
    for config, loss_class in ((ANGLE_ONLY, AnglELoss), (COSINE_ONLY, CoSENTLoss)):
        objective = AnglE(config)
        objective.values = values
        got = objective.loss_from_embeddings(torch.stack([anchor, positive], 1), batch).loss
        assert got.item() == pytest.approx(st_loss(loss_class, [anchor, positive], labels).item(), rel=1e-5)


def test_the_in_batch_terms_are_simcses_two_losses_averaged():
    anchor, positive, negative = torch.randn(3, 5, 8).unbind(0)
    config = AnglEConfig(cosine_weight=0.0, angle_weight=0.0, ibn_weight=1.0, cln_weight=1.0)
    got = AnglE(config).loss_from_embeddings(torch.stack([anchor, positive, negative], 1))
    cos = lambda x, y: F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T  # noqa: E731
    ibn = F.cross_entropy(cos(anchor, positive) * 20, torch.arange(5))
    cln = F.cross_entropy(torch.cat([cos(anchor, positive), cos(anchor, negative)], 1) * 20, torch.arange(5))
    assert got.loss.item() == pytest.approx(((ibn + cln) / 2).item(), rel=1e-5)
    assert set(got.terms) == {"ibn", "cln"}
    with pytest.raises(ConfigError, match="at least one must be > 0"):
        AnglEConfig(angle_weight=0.0, ibn_weight=0.0, cln_weight=0.0).validate()


def test_anglees_nli_recipe_trains(tiny_model_dir, tmp_path, stsb_data_dir):
    rows = ["sent0,sent1,hard_neg"] + [
        f"{a},{b},{c}"
        for a, b, c in zip(
            SENTENCES, SENTENCES[1:] + SENTENCES[:1], SENTENCES[2:] + SENTENCES[:2], strict=True
        )
    ]
    path = tmp_path / "nli.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(rows) + "\n")
    assert trains_three_steps(tiny_model_dir, path, tmp_path / "run", stsb_data_dir, "angle", header=True)
