import math

import pytest
import torch
import torch.nn.functional as F

from sentcl.config import ConfigError, from_dict
from sentcl.objectives import SimCSE
from sentcl.objectives.dclr import (
    DCLR,
    START,
    DCLRConfig,
    dclr_loss,
    reference_dclr_loss,
    reference_noise,
    refine_noise,
)
from tests.conftest import SENTENCES
from tests.objectives.helpers import batch_of, tiny_encoder


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "avg")


def test_equals_a_naive_reference():
    torch.manual_seed(0)
    anchors, positives, noise = (
        torch.randn(5, 6, dtype=torch.float64),
        torch.randn(5, 6, dtype=torch.float64),
        torch.randn(3, 6, dtype=torch.float64),
    )
    weights = torch.ones(5, 5, dtype=torch.float64)
    weights[0, 2] = weights[3, 1] = 0

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    total = 0.0
    for i in range(5):
        denominator = sum(weights[i, j] * math.exp(cos(anchors[i], positives[j]) / 0.05) for j in range(5))
        denominator += sum(math.exp(cos(anchors[i], n) / 0.05) for n in noise)
        total += -cos(anchors[i], positives[i]) / 0.05 + math.log(denominator)
    assert dclr_loss(anchors, positives, weights, noise, 0.05).item() == pytest.approx(total / 5, abs=1e-9)


def test_reduces_to_simcse_without_weights_or_noise(encoder):
    dclr = DCLR(DCLRConfig(variant="paper", phi=1.0, noise_times=0, complementary_model=START), encoder)
    batch = batch_of(encoder, SENTENCES[:6])  # distinct sentences: no complementary cosine reaches 1
    torch.manual_seed(1)
    z = torch.randn(6, 2, encoder.dimension)
    assert dclr.loss_from_embeddings(z, batch).loss.item() == pytest.approx(
        SimCSE().loss_from_embeddings(z).loss.item(), abs=1e-5
    )


def test_a_duplicate_sentence_is_not_a_negative(encoder):
    dclr = DCLR(DCLRConfig(variant="paper", phi=0.999, noise_times=0, complementary_model=START), encoder)
    sentences = [SENTENCES[0], SENTENCES[1], SENTENCES[0], SENTENCES[2]]
    batch = batch_of(encoder, sentences)
    z = torch.randn(4, 2, encoder.dimension)
    out = dclr.loss_from_embeddings(z, batch)
    assert out.terms["dropped_negatives"].item() == pytest.approx(2 / 16)  # (0, 2) and (2, 0)
    weights = torch.ones(4, 4)
    weights[0, 2] = weights[2, 0] = 0
    expected = dclr_loss(z[:, 0], z[:, 1], weights, torch.zeros(0, encoder.dimension), 0.05)
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-5)


def test_noise_moves_towards_the_data():
    torch.manual_seed(2)
    points = F.normalize(torch.randn(16, 8) + 3.0, dim=-1)  # a dense cap of the sphere

    def non_uniformity(noise):
        return torch.logsumexp(-2 * torch.cdist(noise, points).pow(2).flatten(), 0).item()

    noise = F.normalize(torch.randn(16, 8), dim=-1)
    refined = refine_noise(noise, points, steps=5, step_size=0.2)
    assert non_uniformity(refined) > non_uniformity(noise)
    assert torch.allclose(refined.norm(dim=-1), torch.ones(16), atol=1e-5)
    assert not refined.requires_grad


@pytest.mark.parametrize("variant", ["reference", "paper"])
def test_complementary_encoder_is_frozen_and_loss_decreases(encoder, variant):
    dclr = DCLR(DCLRConfig(variant=variant, complementary_model=START), encoder)
    batch = batch_of(encoder, SENTENCES[:8])
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=3e-3)
    encoder.eval()  # deterministic views for the test; the complementary copy stays fixed
    frozen = [p.clone() for p in dclr.complementary.parameters()]
    losses = []
    for step in range(12):
        torch.manual_seed(step)
        out = dclr(batch)
        optimizer.zero_grad()
        out.loss.backward()
        assert all(p.grad is None for p in dclr.complementary.parameters())
        optimizer.step()
        losses.append(out.loss.item())
    assert all(torch.equal(a, b) for a, b in zip(frozen, dclr.complementary.parameters(), strict=True))
    assert sum(losses[-3:]) < sum(losses[:3])
    assert not dclr.complementary.training


def test_the_complementary_model_is_required_by_name():
    """No silent copy of the starting encoder: on a raw MLM encoder that copy drops every negative."""
    with pytest.raises(ConfigError, match="complementary_model: DCLR weighs negatives with a trained"):
        from_dict(DCLRConfig, {}, prefix="objective")
    assert from_dict(DCLRConfig, {"complementary_model": "start"}, prefix="objective").complementary_model


def test_a_trained_complementary_model_is_loaded_from_its_folder(encoder, tiny_model_dir, tmp_path):
    other = tiny_encoder(tiny_model_dir, "avg")
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # "trained": not the starting weights
    other.save(tmp_path / "run" / "model")
    dclr = DCLR(DCLRConfig(complementary_model=str(tmp_path / "run")), encoder)  # a run folder: its model
    batch = batch_of(encoder, SENTENCES[:4])
    with torch.no_grad():
        expected = other.eval().encode_tokens(batch.input_ids[:, 0], batch.attention_mask[:, 0])
        start = encoder.eval().encode_tokens(batch.input_ids[:, 0], batch.attention_mask[:, 0])
        used = dclr.complementary.encode_tokens(batch.input_ids[:, 0], batch.attention_mask[:, 0])
    assert torch.allclose(used, expected, atol=1e-5) and not torch.allclose(used, start, atol=1e-3)


def test_the_reference_loss_equals_a_loop_over_the_authors_matrix():
    """RUCAIBox/DCLR cl_vat_forward: a dropped negative's logit × 0 stays in the softmax (e⁰), and the loss
    averages −[y log p + (1 − y) log(1 − p)] over every entry of the [B, N + M] matrix."""
    torch.manual_seed(0)
    anchors, positives = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    noise = torch.randn(2, 6, dtype=torch.float64)
    weights = torch.ones(4, 4, dtype=torch.float64)
    weights[1, 3] = 0

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    total, entries = 0.0, 0
    for i in range(4):
        logits = [weights[i, j].item() * cos(anchors[i], positives[j]) / 0.05 for j in range(4)]
        logits += [cos(anchors[i], n) / 0.05 for n in noise]
        top = max(logits)
        z = sum(math.exp(x - top) for x in logits)
        for j, x in enumerate(logits):
            p = math.exp(x - top) / z
            total += -(math.log(p) if j == i else math.log(1 - p))
            entries += 1
    got = reference_dclr_loss(anchors, positives, weights, noise, 0.05)
    assert got.item() == pytest.approx(total / entries, rel=1e-9)
    logits = torch.tensor([weights[1, j].item() * cos(anchors[1], positives[j]) / 0.05 for j in range(4)])
    assert logits[3] == 0.0  # the dropped negative: e^0 in the denominator, not removed


def test_the_reference_noise_takes_tiny_steps_that_harden_the_negatives():
    torch.manual_seed(3)
    anchors, positives = torch.randn(8, 16), torch.randn(8, 16)
    torch.manual_seed(4)
    start = reference_noise(anchors, positives, 8, 0.05, steps=0, step_size=1e-3)
    torch.manual_seed(4)
    moved = reference_noise(anchors, positives, 8, 0.05, steps=4, step_size=1e-3)
    assert torch.allclose((moved - start).norm(dim=-1), torch.full((8,), 4e-3), atol=1e-4)  # 4 × 1e-3
    assert start.norm(dim=-1).mean() > 3  # unnormalised Gaussians (norm ≈ √16)
    rows = torch.arange(8)

    def loss(noise):
        logits = torch.cat([F.cosine_similarity(anchors[:, None], positives[None], -1),
                            F.cosine_similarity(anchors[:, None], noise[None], -1)], 1) / 0.05  # fmt: skip
        return F.cross_entropy(logits, rows).item()

    assert loss(moved) > loss(start)  # ascent: harder negatives
    torch.manual_seed(4)
    far = reference_noise(anchors, positives, 8, 0.05, steps=4, step_size=1.0)
    assert loss(far) > loss(moved)


def test_the_variants_differ_and_the_reference_is_the_default(encoder):
    batch = batch_of(encoder, SENTENCES[:6])
    z = torch.randn(6, 2, encoder.dimension)
    assert DCLRConfig(complementary_model=START).variant == "reference"
    torch.manual_seed(5)
    reference = DCLR(DCLRConfig(complementary_model=START), encoder).loss_from_embeddings(z, batch).loss
    torch.manual_seed(5)
    paper = DCLR(DCLRConfig(variant="paper", complementary_model=START), encoder).loss_from_embeddings(
        z, batch
    )
    assert reference.item() != pytest.approx(paper.loss.item(), rel=1e-3)
