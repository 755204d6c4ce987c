import math

import pytest
import torch

from sentcl.objectives import SimCSE
from sentcl.objectives.nt_xent import nt_xent_loss
from sentcl.objectives.vascl import (
    VaSCL,
    VaSCLConfig,
    hard_negative_loss,
    neighbourhood_loss,
    virtual_perturbation,
)
from sentcl.training.optim import build_optimizer


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
    out = VaSCL(VaSCLConfig(variant="paper", virtual_weight=0.0)).loss_from_embeddings(z)
    assert out.loss.item() == pytest.approx(SimCSE().loss_from_embeddings(z).loss.item(), abs=1e-6)
    assert out.terms["virtual"].item() > 0


def test_loss_decreases_and_gradient_reaches_both_views():
    torch.manual_seed(3)
    z = torch.randn(12, 2, 16, requires_grad=True)
    optimizer = torch.optim.SGD([z], lr=0.5)
    losses = []
    for _ in range(25):
        out = VaSCL(VaSCLConfig(variant="paper", topk=4)).loss_from_embeddings(z)
        optimizer.zero_grad()
        out.loss.backward()
        assert z.grad[:, 0].abs().sum() > 0 and z.grad[:, 1].abs().sum() > 0
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_hard_negative_losses_equal_the_authors_definitions():
    """VaSCL_NUniDir: the perturbed feature against the originals of its neighbours; VaSCL_NBiDir: both the
    original and the perturbed feature against both features of the neighbours."""
    torch.manual_seed(4)
    f = torch.nn.functional.normalize(torch.randn(5, 6, dtype=torch.float64), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(5, 6, dtype=torch.float64), dim=-1)
    neighbours = torch.tensor([[1, 2], [0, 3], [4, 1], [2, 0], [3, 1]])
    uni = bi = 0.0
    for i in range(5):
        pos = math.exp(float(f[i] @ p[i]) / 0.05)
        uni += -math.log(pos / (pos + sum(math.exp(float(p[i] @ f[j]) / 0.05) for j in neighbours[i])))
        for anchor in (f[i], p[i]):
            negatives = sum(math.exp(float(anchor @ x[j]) / 0.05) for j in neighbours[i] for x in (f, p))
            bi += -math.log(pos / (pos + negatives))
    assert hard_negative_loss(f, p, neighbours, 0.05, bidirectional=False).item() == pytest.approx(uni / 5)
    assert hard_negative_loss(f, p, neighbours, 0.05, bidirectional=True).item() == pytest.approx(bi / 10)


def test_the_reference_trains_the_encoder_through_nt_xent_and_the_head_through_both():
    """The virtual term sees detached embeddings: it adds nothing to the embeddings' gradient, only to the
    head's (the same random direction: the same seed)."""
    torch.manual_seed(5)
    objective = VaSCL(VaSCLConfig(topk=4), dimension=16)
    assert objective.config.variant == "reference" and objective.radius == 15.0
    z = torch.randn(10, 2, 16, requires_grad=True)
    out = objective.loss_from_embeddings(z)
    features = objective.head(z.reshape(20, 16)).reshape(10, 2, -1)
    assert out.terms["nt_xent"].item() == pytest.approx(
        nt_xent_loss(features, features, 0.05).item(), abs=1e-5
    )
    assert features.shape[-1] == 128 and torch.allclose(features.norm(dim=-1), torch.ones(10, 2), atol=1e-5)
    assert out.terms["virtual"].item() > 0
    gradients = []
    for weight in (0.0, 1.0):
        objective.config.virtual_weight = weight
        torch.manual_seed(6)
        loss = objective.loss_from_embeddings(z).loss
        gradients.append(torch.autograd.grad(loss, [z, *objective.head.parameters()]))
    assert torch.allclose(gradients[0][0], gradients[1][0], atol=1e-7)  # the embeddings: NT-Xent only
    assert any(not torch.allclose(a, b) for a, b in zip(gradients[0][1:], gradients[1][1:], strict=True))


def test_the_reference_head_is_trained_at_its_learning_rate_scale():
    objective = VaSCL(VaSCLConfig(head_lr_scale=100.0), dimension=16)
    optimizer = build_optimizer(objective, learning_rate=1e-5, weight_decay=0.01)
    head = {id(p) for p in objective.head.parameters()}
    rates = {group["lr"] for group in optimizer.param_groups if any(id(p) in head for p in group["params"])}
    assert len(rates) == 1 and rates.pop() == pytest.approx(1e-3)
    others = {group["lr"] for group in optimizer.param_groups} - {1e-3}
    assert others in (set(), {1e-5})
