import math

import pytest
import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives import DebiasedConfig, DebiasedInfoNCE, InfoNCE
from sentcl.objectives.debiased import debiased_info_nce_loss


def by_the_equation(z: torch.Tensor, temperature: float, prior: float) -> float:
    """One anchor at a time, from the paper's equation with e^{s/τ} as written."""
    a, p = F.normalize(z[:, 0], dim=-1), F.normalize(z[:, 1], dim=-1)
    size, total = len(a), 0.0
    for i in range(size):
        positive = math.exp(float(a[i] @ p[i]) / temperature)
        negatives = sum(math.exp(float(a[i] @ p[j]) / temperature) for j in range(size) if j != i)
        n = size - 1
        g = max((negatives - prior * n * positive) / (1 - prior), n * math.exp(-1 / temperature))
        total += -math.log(positive / (positive + g))
    return total / size


@pytest.mark.parametrize(("temperature", "prior"), [(0.05, 0.1), (0.1, 0.3), (0.5, 0.0)])
def test_equals_the_equation(temperature, prior):
    torch.manual_seed(0)
    z = torch.randn(6, 2, 8, dtype=torch.float64)
    got = DebiasedInfoNCE(DebiasedConfig(temperature=temperature, class_prior=prior)).loss_from_embeddings(z)
    assert got.loss.item() == pytest.approx(by_the_equation(z, temperature, prior), abs=1e-6)


def test_no_prior_is_simcse_and_the_floor_holds():
    torch.manual_seed(1)
    z = torch.randn(8, 2, 16)
    plain = InfoNCE().loss_from_embeddings(z).loss
    assert DebiasedInfoNCE(DebiasedConfig(class_prior=0.0)).loss_from_embeddings(
        z
    ).loss.item() == pytest.approx(plain.item(), abs=1e-5)
    # orthogonal sentences, each its own positive: with τ⁺ = 0.5 the corrected term is negative and the
    # floor N·e^{−1/τ} holds instead (τ = 1)
    basis = torch.eye(4)
    loss = debiased_info_nce_loss(basis, basis, temperature=1.0, class_prior=0.5)
    assert loss.item() == pytest.approx(math.log(1 + 3 * math.exp(-2)), abs=1e-6)
    assert loss.item() == pytest.approx(by_the_equation(torch.stack([basis, basis], 1), 1.0, 0.5), abs=1e-6)


def test_gradients_reach_both_views_and_bad_prior_is_refused():
    z = torch.randn(5, 2, 8, requires_grad=True)
    DebiasedInfoNCE().loss_from_embeddings(z).loss.backward()
    assert z.grad[:, 0].abs().sum() > 0 and z.grad[:, 1].abs().sum() > 0
    with pytest.raises(ConfigError, match="class_prior"):
        DebiasedConfig(class_prior=1.0).validate()
