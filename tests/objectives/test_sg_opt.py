import math

import pytest
import torch

from sentcl.objectives import SGOPTConfig, build_objective
from sentcl.objectives.sg_opt import SGOPT, pool_layers, sg_opt_loss
from tests.objectives.helpers import batch_of, tiny_encoder


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "cls_before_pooler")


def test_sg_opt_loss_equals_a_naive_reference():
    torch.manual_seed(0)
    c, h = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 3, 5, dtype=torch.float64)

    def phi(u, v):
        return float(u @ v / (u.norm() * v.norm())) / 0.1

    total = 0.0
    for i in range(4):
        negatives = sum(math.exp(phi(c[i], h[m, n])) for m in range(4) if m != i for n in range(3))
        for k in range(3):
            positive = math.exp(phi(c[i], h[i, k]))
            total += -math.log(positive / (positive + negatives))
    assert sg_opt_loss(c, h, 0.1).item() == pytest.approx(total / 12, abs=1e-9)


def test_sg_opt_closed_form_when_everything_is_alike():
    c, h = torch.ones(5, 4), torch.ones(5, 3, 4)
    assert sg_opt_loss(c, h, 0.05).item() == pytest.approx(math.log(1 + 4 * 3), abs=1e-5)


def test_layer_pooling_ignores_padding():
    states = (torch.randn(2, 4, 3), torch.randn(2, 4, 3))
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    states[0][0, 2:] = 100.0  # padding: must not win the max nor enter the mean
    pooled = pool_layers(states, mask, "max")
    assert torch.equal(pooled[0, 0], states[0][0, :2].amax(0))
    assert torch.allclose(pool_layers(states, mask, "mean")[0, 1], states[1][0, :2].mean(0))
    assert pooled.shape == (2, 2, 3)


@pytest.mark.parametrize("optimised", [True, False])
def test_trains_bert_t_only_and_the_regulariser_measures_the_drift(encoder, optimised):
    objective = build_objective("sg_opt", SGOPTConfig(projection_size=16, optimised=optimised), encoder)
    assert isinstance(objective, SGOPT)
    embeddings = encoder.backbone.get_input_embeddings().weight
    assert not embeddings.requires_grad  # layer 0 of BERT_T is frozen
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    trained = [p for p in objective.parameters() if p.requires_grad]  # the encoder registered in it
    optimiser = torch.optim.Adam(trained, lr=3e-3)
    batch = batch_of(encoder, views=1)
    encoder.train()
    objective.train()
    losses = []
    for step in range(10):
        torch.manual_seed(step % 2)
        out = objective(batch)
        if step == 0:
            assert out.terms["regularizer"].item() == 0.0  # BERT_T starts as BERT_F
        optimiser.zero_grad()
        out.loss.backward()
        optimiser.step()
        losses.append(out.terms["sg"].item())
    assert sum(losses[-2:]) < sum(losses[:2])
    assert not objective.fixed.training
    for name, value in objective.fixed.state_dict().items():
        assert torch.equal(value, before[name]), name  # BERT_F never moves
    assert torch.equal(embeddings, before["backbone.embeddings.word_embeddings.weight"])
    drift = sum((p - before[n]).pow(2).sum() for n, p in encoder.named_parameters())
    assert objective.regularizer().item() == pytest.approx(drift.item(), rel=1e-5) and drift > 0


def test_sg_uses_one_layer_per_sentence(encoder):
    objective = SGOPT(SGOPTConfig(projection_size=8, optimised=False, regularizer_weight=0), encoder)
    batch = batch_of(encoder, views=1)
    z = torch.randn(len(batch.input_ids), 1, encoder.dimension)
    torch.manual_seed(0)
    a = objective.loss_from_embeddings(z, batch).loss
    torch.manual_seed(0)
    b = objective.loss_from_embeddings(z, batch).loss
    torch.manual_seed(1)
    c = objective.loss_from_embeddings(z, batch).loss
    assert a.item() == b.item() and a.item() != c.item()  # the sampled layers differ with the seed


def test_a_recipe_putting_simcse_mlp_before_sg_opt_projection_is_refused():
    from sentcl.config import ConfigError
    from sentcl.training import recipe_from_dict

    recipe = {"model": {"name_or_path": "m", "pooler": "cls"}, "data": {"train_file": "x.txt"}}
    with pytest.raises(ConfigError, match=r"model.pooler: 'cls' puts SimCSE's tanh MLP head in front"):
        recipe_from_dict(recipe | {"objective": {"name": "sg_opt"}})
    for pooler in ("cls_before_pooler", "avg"):
        recipe["model"]["pooler"] = pooler
        assert recipe_from_dict(recipe | {"objective": {"name": "sg_opt"}}).model.pooler == pooler
