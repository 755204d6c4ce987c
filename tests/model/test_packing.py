import pytest
import torch
import transformers

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.model.packing import PackedLayout, backbone_states, packing_position
from sentcl.model.pooling import POOLERS

TEXTS = ["a man plays the ball", "the dog runs", "a woman reads a very old book in the park today", "yes"]


def _batch(encoder, texts=TEXTS):
    tokens = encoder.tokenizer(texts, padding=True, return_tensors="pt")
    return tokens["input_ids"], tokens["attention_mask"]


def test_layout_pad_and_pack_are_inverse():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    layout = PackedLayout(mask.reshape(-1).nonzero().squeeze(1), 3, 3)
    packed = torch.arange(6.0)[:, None].expand(6, 2)
    padded = layout.pad(packed)
    assert padded.shape == (3, 3, 2)
    assert padded[0, 2].abs().sum() == 0 and padded[1, 1:].abs().sum() == 0
    assert torch.equal(layout.pack(padded), packed)


def test_unpadded_states_equal_padded_states_in_every_layer(tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg")).eval()
    ids, mask = _batch(encoder)
    assert not bool(mask.all())
    with torch.no_grad():
        padded_last, padded_all = backbone_states(encoder.backbone, ids, mask, True, unpad=False)
        last, hidden = backbone_states(encoder.backbone, ids, mask, True, unpad=True)
    real = mask[..., None].bool()
    assert packing_position(encoder.backbone) == 0
    torch.testing.assert_close(last, padded_last * real, atol=1e-5, rtol=1e-5)
    assert len(hidden) == len(padded_all) == 3
    for a, b in zip(hidden, padded_all, strict=True):
        torch.testing.assert_close(a, b * real, atol=1e-5, rtol=1e-5)
    assert last[~real.squeeze(-1)].abs().sum() == 0  # padding comes back as zeros


@pytest.mark.parametrize("pooler", sorted(POOLERS))
def test_training_forward_and_gradients_do_not_depend_on_unpadding(tiny_model_dir, pooler):
    embeddings, gradients = [], []
    for unpad in (False, True):
        torch.manual_seed(0)
        encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler=pooler, unpad=unpad))
        encoder.eval()  # no dropout: the two passes must agree exactly, gradients included
        ids, mask = _batch(encoder)
        out = encoder.embed(Batch(ids[:, None].expand(-1, 2, -1), mask[:, None].expand(-1, 2, -1), None))
        (out.square().sum() + out[:, 0].sum()).backward()
        embeddings.append(out.detach())
        gradients.append({n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None})
    torch.testing.assert_close(embeddings[1], embeddings[0], atol=1e-5, rtol=1e-5)
    assert gradients[0].keys() == gradients[1].keys() and len(gradients[0]) > 10
    for name, grad in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], grad, atol=1e-4, rtol=1e-4, msg=name)


def test_training_pass_runs_only_real_tokens_through_the_layers(tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg", unpad=True)).train()
    ids, mask = _batch(encoder)
    packing_position(encoder.backbone)  # the one-time probe, outside the hook
    rows = []
    encoder.backbone.encoder.layer[0].intermediate.dense.register_forward_hook(
        lambda module, args, out: rows.append(out.shape[:-1].numel())
    )
    encoder.embed(Batch(ids[:, None], mask[:, None], None))
    assert rows == [int(mask.sum())]
    assert encoder.training and encoder.backbone.config._attn_implementation != "sentcl_packed"


def test_default_unpads_on_cpu_only(tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir)))
    assert encoder.unpad is None and encoder.unpads_training()
    encoder.unpad = False
    assert not encoder.unpads_training()


def _tiny(config_class, **extra):
    return transformers.AutoModel.from_config(
        config_class(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            **extra,
        )
    )


def test_probe_finds_roberta_positions_and_refuses_what_it_cannot_reproduce():
    assert packing_position(_tiny(transformers.RobertaConfig, pad_token_id=1)) == 2  # padding_idx + 1
    deberta = _tiny(transformers.DebertaV2Config)  # relative positions: the packed pass differs
    assert packing_position(deberta) is None
    ids = torch.tensor([[5, 6, 7], [5, 6, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    last, _ = backbone_states(deberta.eval(), ids, mask, unpad=True)  # falls back to the padded pass
    torch.testing.assert_close(last, deberta(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_packed_attention_with_dropout_is_the_same_attention(tiny_model_dir, monkeypatch):
    """The CPU branch that applies attention dropout itself: with the mask made all ones it must give the
    states of the plain pass."""
    import sentcl.model.packing as packing

    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg")).eval()
    ids, mask = _batch(encoder)
    with torch.no_grad():
        expected, _ = backbone_states(encoder.backbone, ids, mask, unpad=False)
    calls = []
    monkeypatch.setattr(packing, "fast_dropout", lambda x, p: calls.append(p) or x)
    encoder.train()
    for name, module in encoder.backbone.named_modules():
        if isinstance(module, torch.nn.Dropout) and not name.endswith("attention.self.dropout"):
            module.p = 0.0  # hidden dropout off; attention dropout stays on (p = 0.1)
    with torch.no_grad():
        last, _ = backbone_states(encoder.backbone, ids, mask, unpad=True)
    assert calls == [0.1, 0.1]  # one attention map per layer went through the dropout branch
    torch.testing.assert_close(last, expected * mask[..., None], atol=1e-5, rtol=1e-5)
