import math

import pytest
import torch

from sentcl.objectives import NTXent
from sentcl.objectives.nt_xent import NTXentConfig, nt_xent_loss


def naive_nt_xent(z, temperature):
    """SimCLR's definition, one anchor at a time over the 2N embeddings [z_1^a, z_1^b, z_2^a, ...]."""
    flat = [z[i, v] for i in range(z.shape[0]) for v in range(2)]

    def sim(u, w):
        return float(u @ w / (u.norm() * w.norm()))

    total = 0.0
    for i, anchor in enumerate(flat):
        positive = i + 1 if i % 2 == 0 else i - 1
        denominator = sum(math.exp(sim(anchor, flat[k]) / temperature) for k in range(len(flat)) if k != i)
        total += -math.log(math.exp(sim(anchor, flat[positive]) / temperature) / denominator)
    return total / len(flat)


@pytest.mark.parametrize("temperature", [0.05, 0.5])
def test_equals_the_definition(temperature):
    torch.manual_seed(0)
    z = torch.randn(6, 2, 8, dtype=torch.float64)
    got = NTXent(NTXentConfig(temperature=temperature)).loss_from_embeddings(z).loss.item()
    assert got == pytest.approx(naive_nt_xent(z, temperature), abs=1e-9)


def test_closed_form_identical_embeddings():
    z = torch.ones(5, 2, 4)  # every similarity is 1: the positive is one of 2N − 1 equal candidates
    assert nt_xent_loss(z, z, 0.05).item() == pytest.approx(math.log(2 * 5 - 1), abs=1e-5)


def test_same_view_negatives_make_it_differ_from_simcse():
    from sentcl.objectives import SimCSE

    torch.manual_seed(1)
    z = torch.randn(6, 2, 8)
    assert NTXent().loss_from_embeddings(z).loss.item() != pytest.approx(
        SimCSE().loss_from_embeddings(z).loss.item(), abs=1e-3
    )


def test_loss_decreases_and_gradient_reaches_both_views():
    torch.manual_seed(3)
    z = torch.randn(8, 2, 16, requires_grad=True)
    optimizer = torch.optim.SGD([z], lr=0.5)
    losses = []
    for _ in range(20):
        loss = NTXent().loss_from_embeddings(z).loss
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        assert z.grad[:, 0].abs().sum() > 0 and z.grad[:, 1].abs().sum() > 0
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]


def test_rejects_three_views():
    with pytest.raises(ValueError, match="2 views"):
        NTXent().loss_from_embeddings(torch.randn(4, 3, 8))
