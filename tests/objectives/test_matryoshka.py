"""Matryoshka (objective.matryoshka_dims): the loss is the weighted sum of the objective's loss over
embedding prefixes, GradCache keeps it, and objectives whose loss is sized to the full dimension refuse it."""

import pytest
import torch

from sentcl.config import ConfigError, from_dict
from sentcl.objectives import DCLR, DCLRConfig, InfoNCE, InfoNCEConfig, MoCo, MoCoConfig, NTXent, NTXentConfig
from sentcl.training.gradcache import forward_backward
from tests.objectives.helpers import batch_of, tiny_encoder


def test_the_loss_is_the_weighted_sum_over_prefixes():
    torch.manual_seed(0)
    z = torch.randn(6, 2, 16)
    config = InfoNCEConfig(matryoshka_dims=[16, 8, 4], matryoshka_weights=[1.0, 0.5, 2.0])
    out = InfoNCE(config).embedding_loss(z)
    plain = InfoNCE()
    by_hand = sum(w * plain.loss_from_embeddings(z[..., :d]).loss for d, w in ((16, 1.0), (8, 0.5), (4, 2.0)))
    assert out.loss.item() == pytest.approx(by_hand.item(), abs=1e-6)
    assert set(out.terms) == {"loss@16", "loss@8", "loss@4"}
    even = NTXent(NTXentConfig(matryoshka_dims=[16, 4])).embedding_loss(z).loss
    assert even.item() == pytest.approx(
        (NTXent().loss_from_embeddings(z).loss + NTXent().loss_from_embeddings(z[..., :4]).loss).item(),
        abs=1e-6,
    )
    assert InfoNCE().embedding_loss(z).loss.item() == pytest.approx(plain.loss_from_embeddings(z).loss.item())
    with pytest.raises(ValueError, match="the embeddings have 16 dimensions"):
        InfoNCE(InfoNCEConfig(matryoshka_dims=[32])).embedding_loss(z)


def test_bad_keys_and_full_dimension_objectives_are_refused(tiny_model_dir):
    with pytest.raises(ConfigError, match="matryoshka_dims"):
        from_dict(InfoNCEConfig, {"matryoshka_dims": [8, 8]})
    with pytest.raises(ConfigError, match="matryoshka_weights"):
        from_dict(InfoNCEConfig, {"matryoshka_dims": [8, 4], "matryoshka_weights": [1.0]})
    encoder = tiny_encoder(tiny_model_dir, "avg")
    with pytest.raises(ConfigError, match=r"objective\.matryoshka_dims: MoCo keeps a queue"):
        MoCo(MoCoConfig(matryoshka_dims=[8]), encoder)
    DCLR(DCLRConfig(complementary_model="start", matryoshka_dims=[16, 8]), encoder)  # prefixes work there


def test_gradcache_keeps_the_prefix_losses(tiny_model_dir):
    torch.manual_seed(0)
    encoder = tiny_encoder(tiny_model_dir, "avg").eval()  # no dropout: one pass is the reference
    objective = InfoNCE(InfoNCEConfig(matryoshka_dims=[32, 8]), encoder)
    batch = batch_of(encoder, views=2)
    grads = []
    for chunk in (0, 2):
        encoder.zero_grad()
        loss = forward_backward(objective, batch, chunk).loss.item()
        grads.append((loss, [p.grad.clone() for p in encoder.parameters() if p.grad is not None]))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads[0][1], grads[1][1], strict=True))
