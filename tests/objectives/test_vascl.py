import math

import pytest
import torch

from sentcl.objectives import InfoNCE
from sentcl.objectives.vascl import VaSCL, VaSCLConfig, neighbourhood_loss, virtual_perturbation


def test_neighbourhood_loss_equals_the_definition():
    torch.manual_seed(0)
    h = torch.randn(5, 4, dtype=torch.float64)
    a = h + 0.3 * torch.randn_like(h)
    neighbours = torch.tensor([[1, 2], [0, 3], [4, 1], [2, 0], [3, 1]])

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    total = 0.0
    for i in range(5):
        own = math.exp(cos(a[i], h[i]) / 0.05)
        total += -math.log(own / (own + sum(math.exp(cos(a[i], h[j]) / 0.05) for j in neighbours[i])))
    assert neighbourhood_loss(a, h, neighbours, 0.05).item() == pytest.approx(total / 5, abs=1e-9)


def test_perturbation_is_on_the_ball_and_makes_the_task_harder():
    torch.manual_seed(1)
    h = torch.randn(6, 8)
    neighbours = torch.tensor([[j for j in range(6) if j != i][:3] for i in range(6)])
    delta = virtual_perturbation(h, neighbours, radius=0.2, temperature=0.05)
    assert torch.allclose(delta.norm(dim=-1), 0.2 * h.norm(dim=-1), atol=1e-5)
    before = neighbourhood_loss(h, h, neighbours, 0.05)
    after = neighbourhood_loss(h + delta, h, neighbours, 0.05)
    assert after > before


def test_reduces_to_simcse_with_zero_weight():
    torch.manual_seed(2)
    z = torch.randn(8, 2, 16)
    out = VaSCL(VaSCLConfig(virtual_weight=0.0)).loss_from_embeddings(z)
    assert out.loss.item() == pytest.approx(InfoNCE().loss_from_embeddings(z).loss.item(), abs=1e-6)
    assert out.terms["virtual"].item() > 0


def test_loss_decreases_and_gradient_reaches_both_views():
    torch.manual_seed(3)
    z = torch.randn(12, 2, 16, requires_grad=True)
    optimizer = torch.optim.SGD([z], lr=0.5)
    losses = []
    for _ in range(25):
        out = VaSCL(VaSCLConfig(topk=4)).loss_from_embeddings(z)
        optimizer.zero_grad()
        out.loss.backward()
        assert z.grad[:, 0].abs().sum() > 0 and z.grad[:, 1].abs().sum() > 0
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.5 * losses[0]
