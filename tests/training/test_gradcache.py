import pytest
import torch

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import SimCSE
from sentcl.training.gradcache import forward_backward


class SavedTensorMeter:
    """Peak bytes of tensors autograd keeps for backward (the activation memory GradCache bounds)."""

    def __init__(self):
        self.live = 0
        self.peak = 0

    def __enter__(self):
        meter = self

        class Held:
            def __init__(self, tensor):
                self.tensor, self.bytes = tensor, tensor.numel() * tensor.element_size()
                meter.live += self.bytes
                meter.peak = max(meter.peak, meter.live)

            def __del__(self):
                meter.live -= self.bytes

        self.hooks = torch.autograd.graph.saved_tensors_hooks(Held, lambda held: held.tensor)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)


@pytest.fixture
def encoder(tiny_model_dir):
    return SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="cls"))


def make_batch(size=12, views=3, length=9):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (size, views, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[::3, :, -3:] = 0  # some padding
    return Batch(ids, mask, torch.arange(size))


def grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def chunkwise_reference(encoder, objective, batch, chunk):
    """The full batch's loss, embedded chunk by chunk with grad (same dropout draws as GradCache)."""
    parts = [encoder(Batch(batch.input_ids[s : s + chunk], batch.attention_mask[s : s + chunk], None))
             for s in range(0, batch.input_ids.shape[0], chunk)]  # fmt: skip
    output = objective.loss_from_embeddings(torch.cat(parts))
    output.loss.backward()
    return output


def test_gradcache_equals_full_batch_with_dropout(encoder):
    encoder.train()
    objective, batch = SimCSE(None, encoder), make_batch()
    torch.manual_seed(123)
    reference = chunkwise_reference(encoder, objective, batch, chunk=4)
    expected, rng_after = grads(encoder), torch.get_rng_state()
    encoder.zero_grad()
    torch.manual_seed(123)
    output = forward_backward(objective, batch, chunk_size=4)
    assert output.loss.item() == pytest.approx(reference.loss.item(), abs=1e-6)
    got = grads(encoder)
    assert got.keys() == expected.keys() and len(got) > 10
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-4, msg=name)
    assert torch.equal(torch.get_rng_state(), rng_after)  # later steps draw the same masks either way


def test_gradcache_equals_plain_single_pass_without_dropout(encoder):
    encoder.eval()  # no dropout: the plain one-pass batch is the reference
    objective, batch = SimCSE(None, encoder), make_batch()
    plain = forward_backward(objective, batch, chunk_size=0)
    expected = grads(encoder)
    encoder.zero_grad()
    cached = forward_backward(objective, batch, chunk_size=5)
    assert cached.loss.item() == pytest.approx(plain.loss.item(), abs=1e-6)
    for name, grad in grads(encoder).items():
        torch.testing.assert_close(grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_gradcache_holds_less_activation_memory(encoder):
    objective, batch = SimCSE(None, encoder), make_batch(size=24)
    with SavedTensorMeter() as plain:
        forward_backward(objective, batch, chunk_size=0)
    with SavedTensorMeter() as cached:
        forward_backward(objective, batch, chunk_size=4)
    assert 0 < cached.peak < plain.peak / 3


def test_ease_under_gradcache_equals_its_full_batch(tiny_model_dir):
    """EASE reads its entity ids from the batch: GradCache must hand it the batch, not crash."""
    from sentcl.data import ContrastiveDataset
    from sentcl.data.readers import Records
    from sentcl.objectives import EASE, EASEConfig

    torch.manual_seed(0)
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg")).eval()
    rows = [(f"sentence {i}", f"entity {i % 3}", f"entity {(i + 1) % 3}") for i in range(6)]
    records = Records(path="rows.tsv", rows=rows, lines=list(range(1, 7)))
    dataset = ContrastiveDataset(records, encoder.tokenizer, n_views=2, text_columns=1)
    ease = EASE(EASEConfig(), encoder, dataset)
    batch = dataset.collate([dataset[i] for i in range(6)])
    gradients = []
    for chunk in (0, 2):
        encoder.zero_grad()
        ease.zero_grad()
        loss = forward_backward(ease, batch, chunk).loss
        gradients.append((loss.item(), [p.grad.clone() for p in encoder.parameters() if p.grad is not None]))
    (full, full_grads), (cached, cached_grads) = gradients
    assert cached == pytest.approx(full, abs=1e-5)
    assert len(full_grads) == len(cached_grads) > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(full_grads, cached_grads, strict=True))
