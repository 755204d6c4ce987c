import math

import pytest
import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives import DebiasedSimCSE, DebiasedSimCSEConfig, NTXent, SimCSE
from sentcl.objectives.debiased_simcse import debiased_info_nce_loss


def by_the_equation(z: torch.Tensor, temperature: float, prior: float, symmetric: bool) -> float:
    """One anchor at a time, from the paper's equation with e^{s/τ} as written. Symmetric (the reference
    code's form): every embedding anchors, its positive is the other view, its negatives every embedding
    of the other sentences (N = 2B − 2); else view 0 anchors against the other sentences' view 1."""
    z = F.normalize(z, dim=-1)
    size, terms = len(z), []
    anchors = [(i, v) for i in range(size) for v in ((0, 1) if symmetric else (0,))]
    for i, v in anchors:
        positive = math.exp(float(z[i, v] @ z[i, 1 - v]) / temperature)
        views = (0, 1) if symmetric else (1,)
        negatives = [
            math.exp(float(z[i, v] @ z[j, w]) / temperature) for j in range(size) if j != i for w in views
        ]
        n = len(negatives)
        g = max((sum(negatives) - prior * n * positive) / (1 - prior), n * math.exp(-1 / temperature))
        terms.append(-math.log(positive / (positive + g)))
    return sum(terms) / len(terms)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("temperature", "prior"), [(0.05, 0.1), (0.5, 0.1), (0.1, 0.3), (0.5, 0.0)])
def test_equals_the_equation(temperature, prior, symmetric):
    torch.manual_seed(0)
    z = torch.randn(6, 2, 8, dtype=torch.float64)
    config = DebiasedSimCSEConfig(temperature=temperature, class_prior=prior, symmetric=symmetric)
    got = DebiasedSimCSE(config).loss_from_embeddings(z)
    assert got.loss.item() == pytest.approx(by_the_equation(z, temperature, prior, symmetric), abs=1e-6)


def test_no_prior_is_nt_xent_or_simcse_and_the_floor_holds():
    torch.manual_seed(1)
    z = torch.randn(8, 2, 16)
    for symmetric, plain in ((True, NTXent()), (False, SimCSE())):
        config = DebiasedSimCSEConfig(class_prior=0.0, temperature=0.05, symmetric=symmetric)
        got = DebiasedSimCSE(config).loss_from_embeddings(z).loss.item()
        assert got == pytest.approx(plain.loss_from_embeddings(z).loss.item(), abs=1e-5)
    # orthogonal sentences, each its own positive: with τ⁺ = 0.5 the corrected term is negative and the
    # floor N·e^{−1/τ} holds instead (τ = 1)
    basis = torch.eye(4)
    loss, at_floor = debiased_info_nce_loss(basis, basis, torch.arange(4), temperature=1.0, class_prior=0.5)
    assert loss.item() == pytest.approx(math.log(1 + 3 * math.exp(-2)), abs=1e-6) and at_floor.item() == 1.0
    z = torch.stack([basis, basis], 1)
    assert loss.item() == pytest.approx(by_the_equation(z, 1.0, 0.5, symmetric=False), abs=1e-6)


def realistic_batch(size: int = 32, dim: int = 64, positive: float = 0.84, negative: float = 0.48):
    """Two views of ``size`` sentences: a shared direction gives every pair cosine ``negative``, the views of
    one sentence share a direction more, which lifts their cosine to ``positive`` (MiniLM's dropout views)."""
    generator = torch.Generator().manual_seed(0)
    common = F.normalize(torch.randn(dim, generator=generator), dim=0)
    own = F.normalize(torch.randn(size, dim, generator=generator), dim=1)
    noise = F.normalize(torch.randn(size, 2, dim, generator=generator), dim=2)
    a = math.sqrt(negative)  # weight of the common direction: cos between sentences ≈ a²
    b = math.sqrt(positive - negative)  # of the sentence's own direction: cos between views ≈ a² + b²
    c = math.sqrt(1 - positive)
    z = a * common + b * own[:, None] + c * noise
    return F.normalize(z, dim=-1).requires_grad_(True)


def grad_norm(objective, z) -> float:
    z.grad = None
    objective.loss_from_embeddings(z).loss.backward()
    return float(z.grad.norm())


def test_the_default_trains_on_a_realistic_batch_where_simcse_tau_does_not():
    """The issue's batch (32 sentences, positive cosine 0.84, negatives 0.48): at SimCSE's τ = 0.05 every
    anchor's corrected term is the floor, the loss is ~0 and so is its gradient; at the reference's τ = 0.5
    (the default) none is, and the gradient is of InfoNCE's order."""
    z = realistic_batch()
    cos = F.cosine_similarity(z[:, 0], z[:, 1]).mean().item()
    cross = F.cosine_similarity(z[:1, 0], z[1:, 1]).mean().item()
    assert cos == pytest.approx(0.84, abs=0.03) and cross == pytest.approx(0.48, abs=0.05)
    info_nce = grad_norm(SimCSE(), z)
    floored = DebiasedSimCSE(DebiasedSimCSEConfig(temperature=0.05, symmetric=False))
    out = floored.loss_from_embeddings(z)
    assert out.terms["floor_share"].item() == 1.0 and out.loss.item() < 1e-6
    assert grad_norm(floored, z) < 1e-4 * info_nce
    default = DebiasedSimCSE()
    out = default.loss_from_embeddings(z)
    assert out.terms["floor_share"].item() == 0.0 and out.loss.item() > 1.0
    assert grad_norm(default, z) > 0.1 * info_nce


def test_a_temperature_that_floors_a_typical_anchor_is_warned_about(caplog):
    DebiasedSimCSE(DebiasedSimCSEConfig(temperature=0.05))
    assert "sits at its floor" in caplog.text
    caplog.clear()
    DebiasedSimCSE()
    DebiasedSimCSE(DebiasedSimCSEConfig(temperature=0.05, class_prior=0.0))
    assert caplog.text == ""


def test_gradients_reach_both_views_and_bad_prior_is_refused():
    for symmetric in (True, False):
        z = torch.randn(5, 2, 8, requires_grad=True)
        DebiasedSimCSE(DebiasedSimCSEConfig(symmetric=symmetric)).loss_from_embeddings(z).loss.backward()
        assert z.grad[:, 0].abs().sum() > 0 and z.grad[:, 1].abs().sum() > 0
    with pytest.raises(ConfigError, match="class_prior"):
        DebiasedSimCSEConfig(class_prior=1.0).validate()
