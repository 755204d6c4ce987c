import math

import pytest
import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from sentcl.objectives import SimCSE, SimCSEConfig, info_nce_loss


def naive_info_nce(anchor, positive, negative=None, temperature=0.05, alpha=1.0) -> float:
    """SimCSE's equation written as loops over python floats."""
    batch = anchor.shape[0]

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    total = 0.0
    for i in range(batch):
        numerator = math.exp(cos(anchor[i], positive[i]) / temperature)
        denominator = sum(math.exp(cos(anchor[i], positive[j]) / temperature) for j in range(batch))
        if negative is not None:
            denominator += sum(
                (alpha if i == j else 1.0) * math.exp(cos(anchor[i], negative[j]) / temperature)
                for j in range(batch)
            )
        total += -math.log(numerator / denominator)
    return total / batch


@pytest.mark.parametrize("views", [2, 3])
@pytest.mark.parametrize("alpha", [1.0, 2.5])
def test_equals_loop_reference(views, alpha):
    torch.manual_seed(0)
    embeddings = torch.randn(6, views, 8, dtype=torch.float64)
    objective = SimCSE(SimCSEConfig(temperature=0.1, hard_negative_weight=alpha))
    loss = objective.loss_from_embeddings(embeddings).loss
    negative = embeddings[:, 2] if views == 3 else None
    expected = naive_info_nce(embeddings[:, 0], embeddings[:, 1], negative, temperature=0.1, alpha=alpha)
    assert loss.item() == pytest.approx(expected, abs=1e-9)


def test_alpha_only_weights_the_matching_hard_negative():
    torch.manual_seed(1)
    anchor, positive, negative = torch.randn(3, 5, 4, dtype=torch.float64)
    base = info_nce_loss(anchor, positive, negative, temperature=0.05, hard_negative_weight=1.0)
    weighted = info_nce_loss(anchor, positive, negative, temperature=0.05, hard_negative_weight=3.0)
    assert weighted > base  # a heavier own hard negative makes each example harder


@pytest.mark.parametrize("views,expected", [(2, math.log(8)), (3, math.log(16))])
def test_closed_form_identical_embeddings(views, expected):
    # all logits equal → the softmax is uniform over the B (or 2B) candidates
    embeddings = torch.ones(8, views, 4)
    loss = SimCSE().loss_from_embeddings(embeddings).loss
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("views", [2, 3])
def test_equals_sentence_transformers_mnrl(views):
    torch.manual_seed(2)
    embeddings = torch.randn(16, views, 32)
    ours = SimCSE(SimCSEConfig(temperature=0.05)).loss_from_embeddings(embeddings).loss
    peer = MultipleNegativesRankingLoss(model=None, scale=20.0)
    theirs = peer.compute_loss_from_embeddings([embeddings[:, v] for v in range(views)], labels=None)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-5)


def test_loss_decreases_under_sgd():
    torch.manual_seed(3)
    embeddings = torch.randn(8, 2, 16, requires_grad=True)
    objective = SimCSE()
    optimizer = torch.optim.SGD([embeddings], lr=0.5)
    losses = []
    for _ in range(20):
        loss = objective.loss_from_embeddings(embeddings).loss
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]


def test_gradient_reaches_every_view_and_terms_are_named():
    embeddings = torch.randn(4, 3, 8, requires_grad=True)
    output = SimCSE().loss_from_embeddings(embeddings)
    output.loss.backward()
    assert output.loss.shape == ()
    assert set(output.terms) == {"info_nce"}
    for view in range(3):
        assert embeddings.grad[:, view].abs().sum() > 0


def test_rejects_wrong_view_count():
    with pytest.raises(ValueError, match="2 or 3 views"):
        SimCSE().loss_from_embeddings(torch.randn(4, 1, 8))


def test_every_contrastive_objective_shares_one_temperature_key_and_check():
    from dataclasses import fields

    from sentcl.config import ConfigError, from_dict
    from sentcl.objectives import REGISTRY
    from sentcl.objectives.base import ContrastiveConfig
    from sentcl.objectives.contrastive_tension import ContrastiveTensionConfig
    from sentcl.objectives.masked_lm import MaskedLMConfig
    from sentcl.objectives.tsdae import TSDAEConfig

    # no τ: masked-LM and TSDAE compare no vectors (token cross-entropies); CT learns its scale
    without = (MaskedLMConfig, TSDAEConfig, ContrastiveTensionConfig)
    for name, (_, config_class) in REGISTRY.items():
        if config_class in without:
            assert "temperature" not in {f.name for f in fields(config_class)}, name
            continue
        assert issubclass(config_class, ContrastiveConfig), name
        with pytest.raises(ConfigError, match=r"objective\.temperature: must be positive"):
            extra = {"complementary_model": "start"} if name == "dclr" else {}
            from_dict(config_class, {"temperature": 0, **extra}, prefix="objective")
