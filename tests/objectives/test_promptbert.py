"""PromptBERT (objectives/promptbert.py): template denoising's bias is the template's own [MASK] state with
shifted positions, the loss against a hand computation, and a run."""

import pytest
import torch

from sentcl.config import ConfigError
from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import PromptBERT, PromptBERTConfig
from sentcl.objectives.simcse import info_nce_loss
from sentcl.training import recipe_from_dict
from tests.conftest import SENTENCES
from tests.objectives.helpers import batch_of

FIRST, SECOND = 'This sentence of "[X]" means [MASK] .', 'This sentence : "[X]" means [MASK] .'


def prompt_encoder(tiny_model_dir) -> SentenceEncoder:
    config = ModelConfig(str(tiny_model_dir), pooler="prompt", prompt_template=FIRST)
    return SentenceEncoder.from_config(config).eval()  # no dropout: passes can be redone by hand


def test_the_bias_is_the_empty_templates_mask_state_at_the_sentences_positions(tiny_model_dir):
    encoder = prompt_encoder(tiny_model_dir)
    with torch.no_grad():
        empty = encoder.tokenizer([""], return_tensors="pt")
        alone, length = encoder.prompt_states(empty.input_ids, empty.attention_mask, FIRST)
        assert int(length[0]) == 0
        torch.testing.assert_close(encoder.template_bias(FIRST, torch.tensor([0])), alone)
        # a shift of 3 is the empty template read with its positions after the sentence's place moved by 3
        shifted = encoder.template_bias(FIRST, torch.tensor([3, 0, 3]))
        torch.testing.assert_close(shifted[0], shifted[2])
        assert not torch.allclose(shifted[0], shifted[1])
        # the training path's [MASK] state is what the prompt pooler encodes with
        batch = batch_of(encoder, SENTENCES[:3], views=1)
        states, lengths = encoder.prompt_states(batch.input_ids[:, 0], batch.attention_mask[:, 0], FIRST)
        torch.testing.assert_close(
            states, torch.from_numpy(encoder.encode(SENTENCES[:3])), atol=1e-5, rtol=1e-5
        )
        expected = [len(encoder.tokenizer(s, add_special_tokens=False)["input_ids"]) for s in SENTENCES[:3]]
        assert lengths.tolist() == expected


def test_the_loss_is_infonce_between_the_denoised_views_through_its_mlp(tiny_model_dir):
    encoder = prompt_encoder(tiny_model_dir)
    objective = PromptBERT(PromptBERTConfig(second_template=SECOND), encoder)
    batch = batch_of(encoder, SENTENCES[:4], views=1)
    ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
    with torch.no_grad():
        got = objective(batch).loss
        views = []
        for template in (FIRST, SECOND):
            states, lengths = encoder.prompt_states(ids, mask, template)
            views.append(objective.mlp(states - encoder.template_bias(template, lengths)))
        assert got.item() == pytest.approx(info_nce_loss(*views, temperature=0.05).item(), rel=1e-5)


def test_it_needs_the_prompt_pooler_and_a_run_trains(tiny_model_dir, tmp_path, stsb_data_dir):
    with pytest.raises(ConfigError, match=r"set model\.pooler: prompt"):
        PromptBERT(
            PromptBERTConfig(), SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg"))
        )
    with pytest.raises(ConfigError, match="objective simcse does not train it"):
        recipe_from_dict({"model": {"name_or_path": str(tiny_model_dir), "pooler": "prompt"}})
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n", encoding="utf-8")
    from sentcl.training import train

    recipe = {
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "prompt", "prompt_template": FIRST},
        "data": {"train_file": str(corpus), "max_length": 16, "n_views": 1},
        "objective": {"name": "promptbert", "second_template": SECOND},
        "training": {"output_dir": str(tmp_path / "run"), "batch_size": 4, "learning_rate": 1e-3,
                     "max_steps": 3, "eval_steps": 0, "eval_data_dir": str(stsb_data_dir)},
    }  # fmt: skip
    assert train(recipe_from_dict(recipe)).steps == 3
    saved = SentenceEncoder.load(str(tmp_path / "run"))
    assert saved.pooler == "prompt" and saved.prompt_template == FIRST


def test_supervised_is_simcse_on_the_denoised_states_of_one_template(tiny_model_dir):
    encoder = prompt_encoder(tiny_model_dir)
    objective = PromptBERT(PromptBERTConfig(supervised=True, hard_negative_weight=2.0), encoder)
    assert objective.mlp is None  # no MLP: the denoised [MASK] states themselves
    anchors, positives, negatives = SENTENCES[:4], SENTENCES[4:8], SENTENCES[8:12]
    tokens = encoder.tokenizer(anchors + positives + negatives, padding=True, return_tensors="pt")
    ids = tokens.input_ids.reshape(3, 4, -1).transpose(0, 1)  # [B, V=3, L]
    mask = tokens.attention_mask.reshape(3, 4, -1).transpose(0, 1)
    with torch.no_grad():
        got = objective(Batch(ids, mask, indices=ids.new_tensor(range(4))))
        views = []
        for k in range(3):
            states, lengths = encoder.prompt_states(ids[:, k], mask[:, k], FIRST)
            views.append(states - encoder.template_bias(FIRST, lengths))
        expected = info_nce_loss(*views, temperature=0.05, hard_negative_weight=2.0)
    assert got.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # each setting refuses the other's rows, in one line
    with pytest.raises(ValueError, match="supervised PromptBERT reads"):
        objective(batch_of(encoder, SENTENCES[:4], views=1))
    with pytest.raises(ValueError, match=r"objective\.supervised: true"):
        PromptBERT(PromptBERTConfig(), encoder)(batch_of(encoder, SENTENCES[:4], views=3))


def test_a_denoised_prompt_model_encodes_minus_the_template_and_keeps_it_when_saved(tiny_model_dir, tmp_path):
    config = ModelConfig(str(tiny_model_dir), pooler="prompt", prompt_template=FIRST, prompt_denoise=True)
    encoder = SentenceEncoder.from_config(config).eval()
    batch = batch_of(encoder, SENTENCES[:5], views=1)
    with torch.no_grad():
        states, lengths = encoder.prompt_states(batch.input_ids[:, 0], batch.attention_mask[:, 0], FIRST)
        expected = states - encoder.template_bias(FIRST, lengths)
    got = encoder.encode(SENTENCES[:5], convert_to_tensor=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    plain = SentenceEncoder.from_config(
        ModelConfig(str(tiny_model_dir), pooler="prompt", prompt_template=FIRST)
    )
    assert not torch.allclose(plain.eval().encode(SENTENCES[:5], convert_to_tensor=True), got, atol=1e-3)
    saved = SentenceEncoder.load(str(encoder.save(tmp_path / "model")))
    assert saved.prompt_denoise
    torch.testing.assert_close(saved.encode(SENTENCES[:5], convert_to_tensor=True), got, atol=1e-5, rtol=1e-5)
    for key in ("prompt_denoise", "prompt_head"):
        with pytest.raises(ConfigError, match=f"{key}: PromptBERT's, for the prompt pooler, not 'avg'"):
            ModelConfig(str(tiny_model_dir), pooler="avg", **{key: True}).validate()


def test_the_prompt_head_comes_before_the_subtraction_trains_and_is_kept(tiny_model_dir, tmp_path):
    config = ModelConfig(
        str(tiny_model_dir), pooler="prompt", prompt_template=FIRST, prompt_denoise=True, prompt_head=True
    )
    encoder = SentenceEncoder.from_config(config).eval()
    head = encoder.prompt_head
    assert head is not None
    batch = batch_of(encoder, SENTENCES[:5], views=1)
    with torch.no_grad():
        states, lengths = encoder.prompt_states(batch.input_ids[:, 0], batch.attention_mask[:, 0], FIRST)
        expected = head(states) - head(encoder.template_bias(FIRST, lengths))  # f(h) − f(δ), not f(h − δ)
    got = encoder.encode(SENTENCES[:5], convert_to_tensor=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the supervised objective trains it: its loss reaches the head's weights
    objective = PromptBERT(PromptBERTConfig(supervised=True), encoder.train())
    objective(batch_of(encoder, SENTENCES[:4], views=3)).loss.backward()
    assert head.dense.weight.grad is not None and head.dense.weight.grad.abs().sum() > 0
    encoder.eval()
    saved = SentenceEncoder.load(str(encoder.save(tmp_path / "model")))
    assert (tmp_path / "model" / "sentcl_prompt_head.safetensors").is_file() and saved.prompt_head is not None
    torch.testing.assert_close(saved.encode(SENTENCES[:5], convert_to_tensor=True), got, atol=1e-5, rtol=1e-5)
    (tmp_path / "model" / "sentcl_prompt_head.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(Exception, match="prompt head cannot be read"):
        SentenceEncoder.load(str(tmp_path / "model"))


def test_a_prompt_model_has_no_onnx_graph_and_no_int8_candidate(tiny_model_dir, tmp_path, stsb_data_dir):
    from sentcl.hardware import detect
    from sentcl.model.int8_gate import int8_candidate
    from sentcl.model.onnx import export_onnx

    encoder = prompt_encoder(tiny_model_dir)
    with pytest.raises(ConfigError, match="pooler 'prompt' reads each sentence in a template"):
        export_onnx(encoder, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()
    int8, why, check = int8_candidate(encoder, detect(), stsb_data_dir)
    assert int8 is None and check is None and "template" in why
