import math

import pytest
import torch
import torch.nn.functional as F

from sentcl.objectives import AlignUniform, SimCSE
from sentcl.objectives.align_uniform import AlignUniformConfig


def naive(z, alpha=2.0, t=2.0):
    x, y = F.normalize(z[:, 0], dim=-1), F.normalize(z[:, 1], dim=-1)
    align = sum(float((x[i] - y[i]).norm() ** alpha) for i in range(len(x))) / len(x)

    def uniform(v):
        pairs = [(i, j) for i in range(len(v)) for j in range(i + 1, len(v))]
        return math.log(sum(math.exp(-t * float((v[i] - v[j]).norm() ** 2)) for i, j in pairs) / len(pairs))

    return align, (uniform(x) + uniform(y)) / 2


@pytest.mark.parametrize(("alpha", "t", "lam"), [(2.0, 2.0, 1.0), (1.0, 3.0, 0.5)])
def test_equals_the_definition(alpha, t, lam):
    torch.manual_seed(0)
    z = torch.randn(7, 2, 5, dtype=torch.float64)
    out = AlignUniform(AlignUniformConfig(alpha=alpha, t=t, uniform_weight=lam)).loss_from_embeddings(z)
    align, uniform = naive(z, alpha, t)
    assert out.terms["align"].item() == pytest.approx(align, abs=1e-9)
    assert out.terms["uniform"].item() == pytest.approx(uniform, abs=1e-9)
    assert out.loss.item() == pytest.approx(align + lam * uniform, abs=1e-9)


def test_closed_forms():
    same = torch.ones(4, 2, 3)  # aligned and collapsed: ℓ_align = 0, ℓ_uniform = log e^0 = 0
    out = AlignUniform().loss_from_embeddings(same)
    assert out.terms["align"].item() == pytest.approx(0.0, abs=1e-6)
    assert out.terms["uniform"].item() == pytest.approx(0.0, abs=1e-6)
    opposite = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]], [[-1.0, 0.0], [1.0, 0.0]]])  # antipodal: ‖x−y‖² = 4
    out = AlignUniform().loss_from_embeddings(opposite)
    assert out.terms["align"].item() == pytest.approx(4.0, abs=1e-6)
    assert out.terms["uniform"].item() == pytest.approx(-8.0, abs=1e-5)


def test_info_nce_can_be_added():
    torch.manual_seed(2)
    z = torch.randn(6, 2, 8)
    base = AlignUniform().loss_from_embeddings(z)
    mixed = AlignUniform(AlignUniformConfig(info_nce_weight=0.5)).loss_from_embeddings(z)
    nce = SimCSE().loss_from_embeddings(z).loss.item()
    assert mixed.loss.item() == pytest.approx(base.loss.item() + 0.5 * nce, abs=1e-5)
    assert mixed.terms["info_nce"].item() == pytest.approx(nce, abs=1e-6)


def test_loss_decreases_and_spreads_the_points():
    torch.manual_seed(3)
    z = (torch.randn(16, 1, 8) * 0.1 + torch.ones(8)).repeat(1, 2, 1)  # collapsed near one direction
    z = (z + 0.01 * torch.randn_like(z)).requires_grad_()
    optimizer = torch.optim.SGD([z], lr=5.0)
    first = None
    for _ in range(60):
        out = AlignUniform().loss_from_embeddings(z)
        first = first if first is not None else out
        optimizer.zero_grad()
        out.loss.backward()
        assert z.grad.abs().sum() > 0
        optimizer.step()
    assert out.loss.item() < first.loss.item()
    assert out.terms["uniform"].item() < first.terms["uniform"].item() - 0.5
