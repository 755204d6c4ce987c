import pytest
import torch
from torch import nn

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.model.dropout import FastDropout, fast_dropout, keep_mask, use_fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_masks_drop_at_rate_p_independently_and_keep_the_mean(p):
    torch.manual_seed(0)
    mask = keep_mask(
        torch.Size([400, 1001]), p, torch.float32, torch.device("cpu")
    )  # odd size: a partial word
    dropped = (mask == 0).float()
    assert abs(dropped.mean().item() - p) < 4 * (p * (1 - p) / mask.numel()) ** 0.5
    assert torch.allclose(mask[mask != 0], torch.tensor(1 / (1 - p)))
    # neighbouring entries come from the same 64-bit word: they must still be uncorrelated
    a, b = dropped[:, :-1].reshape(-1), dropped[:, 1:].reshape(-1)
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.01
    x = torch.ones(200, 1000)
    assert abs(fast_dropout(x, p).mean().item() - 1.0) < 0.01


def test_gradient_flows_through_kept_entries_only():
    x = torch.randn(64, 128, requires_grad=True)
    y = fast_dropout(x, 0.2)
    y.sum().backward()
    kept = y != 0
    torch.testing.assert_close(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.8))
    assert x.grad[~kept].abs().sum() == 0


def test_eval_mode_and_p_zero_and_p_one():
    x = torch.randn(8, 8)
    module = FastDropout(0.5).eval()
    assert torch.equal(module(x), x)
    assert torch.equal(fast_dropout(x, 0.0), x)
    assert fast_dropout(x, 1.0).abs().sum() == 0


def test_encoder_replaces_the_backbones_dropout_and_saves_the_same_weights(tiny_model_dir, tmp_path):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg"))
    modules = [m for m in encoder.backbone.modules() if isinstance(m, nn.Dropout)]
    assert modules and all(type(m) is FastDropout for m in modules)
    assert all(m.p == encoder.backbone.config.hidden_dropout_prob for m in modules)
    plain = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg", fast_dropout=False))
    assert not any(type(m) is FastDropout for m in plain.backbone.modules())
    assert encoder.backbone.state_dict().keys() == plain.backbone.state_dict().keys()
    assert use_fast_dropout(plain.backbone) == len(modules)
    ids = torch.randint(5, 50, (6, 2, 9))
    encoder.train()
    a, b = encoder.embed(Batch(ids, torch.ones_like(ids), None)).unbind(1)
    assert not torch.allclose(a, b)  # the two views differ: dropout is on
