import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from sentcl.data import Batch
from sentcl.model import POOLERS, SentenceEncoder
from sentcl.model.heads import MLPHead


@pytest.fixture
def backbone_and_inputs(tiny_model_dir):
    model = AutoModel.from_pretrained(str(tiny_model_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    inputs = tokenizer(["a dog runs", "the old woman reads a book today"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True)
    return model, tokenizer, inputs, out


def hand_mean(states, mask):
    rows = []
    for i in range(states.shape[0]):
        n = int(mask[i].sum())
        rows.append(sum(states[i, t] for t in range(n)) / n)  # real tokens come first
    return torch.stack(rows)


def expected(name, out, mask):
    hs = out.hidden_states
    return {
        "cls_before_pooler": out.last_hidden_state[:, 0],
        "avg": hand_mean(out.last_hidden_state, mask),
        "avg_first_last": hand_mean((hs[1] + hs[-1]) / 2, mask),
        "avg_top2": hand_mean((hs[-1] + hs[-2]) / 2, mask),
    }[name]


@pytest.mark.parametrize("name", ["cls_before_pooler", "avg", "avg_first_last", "avg_top2"])
def test_pooler_matches_hand_computation(backbone_and_inputs, name):
    _, _, inputs, out = backbone_and_inputs
    pooled = POOLERS[name](out.last_hidden_state, out.hidden_states, inputs["attention_mask"])
    torch.testing.assert_close(pooled, expected(name, out, inputs["attention_mask"]), atol=1e-6, rtol=1e-6)


def test_first_last_uses_first_transformer_layer_not_embeddings(backbone_and_inputs):
    _, _, inputs, out = backbone_and_inputs
    mask = inputs["attention_mask"]
    pooled = POOLERS["avg_first_last"](out.last_hidden_state, out.hidden_states, mask)
    with_embeddings = hand_mean((out.hidden_states[0] + out.hidden_states[-1]) / 2, mask)
    assert not torch.allclose(pooled, with_embeddings)


def test_cls_pooler_applies_mlp_in_training_and_respects_mlp_only_train(backbone_and_inputs):
    model, tokenizer, inputs, out = backbone_and_inputs
    for train_only in (False, True):
        head = MLPHead(model.config.hidden_size, train_only=train_only)
        encoder = SentenceEncoder(model, tokenizer, "cls", head).eval()
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        with torch.no_grad():
            trained = encoder.embed(Batch(ids.unsqueeze(1), mask.unsqueeze(1), None))[:, 0]
            embedded = encoder.encode_tokens(ids, mask)
        cls_vector = out.last_hidden_state[:, 0]
        manual_mlp = torch.tanh(cls_vector @ head.dense.weight.T + head.dense.bias)
        torch.testing.assert_close(trained, manual_mlp, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(embedded, cls_vector if train_only else manual_mlp, atol=1e-6, rtol=1e-6)


def test_one_definition_of_poolers_and_their_sentence_transformers_modes():
    from sentcl.config import ConfigError
    from sentcl.model.pooling import (
        LEGACY_POOLING_KEYS,
        POOLERS,
        check_pooler,
        from_sentence_transformers,
        sentence_transformers_mode,
    )

    old_keys = {mode: key for key, mode in LEGACY_POOLING_KEYS.items()}
    for name in POOLERS:
        assert check_pooler(name) == name
        mode = sentence_transformers_mode(name)
        if mode is None:
            continue
        back, included = from_sentence_transformers({"pooling_mode": mode}, "c")  # the new config format
        old = from_sentence_transformers({old_keys[mode]: True}, "c")  # the old one
        assert (back, included) == old and sentence_transformers_mode(back) == mode and included
    assert sentence_transformers_mode("avg_first_last") is None
    assert from_sentence_transformers({}, "c") == ("avg", True)  # no mode set: mean, as theirs
    with pytest.raises(ConfigError, match=r"model.pooler: 'median' is not one of cls, cls_before_pooler"):
        check_pooler("median", "model.pooler")
