"""Matryoshka (objective.matryoshka_dims): the loss is the weighted sum of the objective's loss over
embedding prefixes, GradCache keeps it, and objectives whose loss is sized to the full dimension refuse it."""

import pytest
import torch

from sentcl.config import ConfigError, from_dict
from sentcl.objectives import DCLR, DCLRConfig, MoCo, MoCoConfig, NTXent, NTXentConfig, SimCSE, SimCSEConfig
from sentcl.training.gradcache import forward_backward
from tests.objectives.helpers import batch_of, tiny_encoder


def test_the_loss_is_the_weighted_sum_over_prefixes():
    torch.manual_seed(0)
    z = torch.randn(6, 2, 16)
    config = SimCSEConfig(matryoshka_dims=[16, 8, 4], matryoshka_weights=[1.0, 0.5, 2.0])
    out = SimCSE(config).embedding_loss(z)
    plain = SimCSE()
    by_hand = sum(w * plain.loss_from_embeddings(z[..., :d]).loss for d, w in ((16, 1.0), (8, 0.5), (4, 2.0)))
    assert out.loss.item() == pytest.approx(by_hand.item(), abs=1e-6)
    assert set(out.terms) == {"loss@16", "loss@8", "loss@4"}
    even = NTXent(NTXentConfig(matryoshka_dims=[16, 4])).embedding_loss(z).loss
    assert even.item() == pytest.approx(
        (NTXent().loss_from_embeddings(z).loss + NTXent().loss_from_embeddings(z[..., :4]).loss).item(),
        abs=1e-6,
    )
    assert SimCSE().embedding_loss(z).loss.item() == pytest.approx(plain.loss_from_embeddings(z).loss.item())
    with pytest.raises(ValueError, match="the embeddings have 16 dimensions"):
        SimCSE(SimCSEConfig(matryoshka_dims=[32])).embedding_loss(z)


def test_bad_keys_and_full_dimension_objectives_are_refused(tiny_model_dir):
    with pytest.raises(ConfigError, match="matryoshka_dims"):
        from_dict(SimCSEConfig, {"matryoshka_dims": [8, 8]})
    with pytest.raises(ConfigError, match="matryoshka_weights"):
        from_dict(SimCSEConfig, {"matryoshka_dims": [8, 4], "matryoshka_weights": [1.0]})
    encoder = tiny_encoder(tiny_model_dir, "avg")
    with pytest.raises(ConfigError, match=r"objective\.matryoshka_dims: MoCo keeps a queue"):
        MoCo(MoCoConfig(matryoshka_dims=[8]), encoder)
    DCLR(DCLRConfig(complementary_model="start", matryoshka_dims=[16, 8]), encoder)  # prefixes work there


def test_gradcache_keeps_the_prefix_losses(tiny_model_dir):
    torch.manual_seed(0)
    encoder = tiny_encoder(tiny_model_dir, "avg").eval()  # no dropout: one pass is the reference
    objective = SimCSE(SimCSEConfig(matryoshka_dims=[32, 8]), encoder)
    batch = batch_of(encoder, views=2)
    grads = []
    for chunk in (0, 2):
        encoder.zero_grad()
        loss = forward_backward(objective, batch, chunk).loss.item()
        grads.append((loss, [p.grad.clone() for p in encoder.parameters() if p.grad is not None]))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads[0][1], grads[1][1], strict=True))


def test_no_objective_of_the_registry_accepts_the_key_and_ignores_it(tiny_model_dir, tmp_path):
    """Every registered objective either refuses matryoshka_dims when it is built (one line naming why) or
    trains the prefixes: its loss on embeddings carries a loss@8 term and differs from its loss without."""
    from dataclasses import fields

    from sentcl.objectives import REGISTRY

    encoder = tiny_encoder(tiny_model_dir, "avg")
    accepted, refused = [], []
    for name, (objective_class, config_class) in REGISTRY.items():
        extra = {"complementary_model": "start"} if name == "dclr" else {}
        if name == "vascl":
            extra = {"variant": "paper"}  # the reference variant refuses (tested below)
        if name == "distillation":
            extra = {"teacher": str(tiny_model_dir)}  # its one required key
        if "matryoshka_dims" not in {f.name for f in fields(config_class)}:
            refused.append(name)  # a config without the key: a recipe naming it is an unknown key
            with pytest.raises(ConfigError, match="unknown"):
                from_dict(config_class, {"matryoshka_dims": [8]}, prefix="objective")
            continue
        config = from_dict(config_class, {"matryoshka_dims": [32, 8], **extra}, prefix="objective")
        try:
            objective = objective_class(config, encoder, None)
        except ConfigError as error:
            assert "objective.matryoshka_dims" in str(error) and "\n" not in str(error)
            refused.append(name)
            continue
        except ValueError:  # needs its training data (EASE's entity table, CLINE's WordNet views)
            pytest.fail(f"{name}: built without refusing matryoshka_dims, but could not be tested")
        torch.manual_seed(0)
        views = 3 if name in ("cosent", "angle") else 2  # they rank labelled pairs: NLI triplets here
        batch = batch_of(encoder, views=views)
        z = torch.randn(len(batch.input_ids), views, 32)
        with_prefixes = objective.embedding_loss(z, batch)
        torch.manual_seed(0)
        plain = objective_class(from_dict(config_class, extra, prefix="objective"), encoder, None)
        without = plain.embedding_loss(z, batch)
        assert "loss@8" in with_prefixes.terms
        assert with_prefixes.loss.item() != pytest.approx(without.loss.item(), rel=1e-4)
        accepted.append(name)
    assert set(accepted) == {
        "simcse", "nt_xent", "align_uniform", "dclr", "vascl", "debiased_simcse", "cosent", "angle",
        "cropping",
    }  # fmt: skip
    assert set(refused) == {
        "moco", "tacl", "sg_opt", "ease", "cline", "masked_lm", "distillation", "esimcse", "promptbert",
        "tsdae", "contrastive_tension",
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"VaSCL \(variant: reference\) maps the full embedding"):
        from sentcl.objectives import VaSCL, VaSCLConfig

        VaSCL(VaSCLConfig(matryoshka_dims=[8]), encoder)
