"""PromptBERT's representation (pooler ``prompt``): the [MASK] state of the sentence inside its template,
equal to tokenising the filled template directly; the template kept with a saved model; bad templates
refused."""

import numpy as np
import pytest
import torch

from sentcl.config import ConfigError
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.model.pooling import template_frame, wrap_in_template
from sentcl.training import recipe_from_dict

TEXTS = ["a man plays the guitar", "the dog runs", "red"]


@pytest.mark.parametrize("template", ['This sentence : "[X]" means [MASK] .', "[X] is [MASK] ."])
def test_the_vector_is_the_mask_state_of_the_filled_template(tiny_model_dir, template, tmp_path):
    encoder = SentenceEncoder.from_config(
        ModelConfig(str(tiny_model_dir), pooler="prompt", prompt_template=template)
    )
    got = encoder.eval().encode(TEXTS)
    tokenizer = encoder.tokenizer
    for text, vector in zip(TEXTS, got, strict=True):
        filled = tokenizer(
            template.replace("[X]", text).replace("[MASK]", tokenizer.mask_token), return_tensors="pt"
        )
        with torch.no_grad():
            states = encoder.backbone(**filled).last_hidden_state[0]
        at = filled.input_ids[0].tolist().index(tokenizer.mask_token_id)
        np.testing.assert_allclose(vector, states[at].numpy(), atol=1e-5)
    encoder.save(tmp_path / "model")
    loaded = SentenceEncoder.load(str(tmp_path / "model"))
    assert loaded.pooler == "prompt" and loaded.prompt_template == template
    np.testing.assert_allclose(loaded.encode(TEXTS), got, atol=1e-6)


def test_a_long_sentence_is_cut_so_the_template_fits(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir), pooler="prompt")
    frame = template_frame(encoder.tokenizer, encoder.prompt_template)
    ids = torch.tensor([[2] + [7] * 30 + [3]])
    limit = len(frame.prefix) + len(frame.suffix) + 2 + 5  # room for 5 of the sentence's 30 tokens
    wrapped, _, at = wrap_in_template(ids, torch.ones_like(ids), frame, 0, limit=limit)
    assert (
        wrapped.shape[1] == limit
        and (wrapped[0] == 7).sum() == 5
        and int(wrapped[0, at[0]]) == encoder.tokenizer.mask_token_id
    )
    assert wrapped[0, 0] == 2 and wrapped[0, -1] == 3


def test_bad_templates_and_training_are_refused(tiny_model_dir):
    for template, match in (("no slot [MASK]", "one \\[X\\]"), ("[MASK] [X]", "after \\[X\\]")):
        with pytest.raises(ConfigError, match=match):
            SentenceEncoder.from_config(
                ModelConfig(str(tiny_model_dir), pooler="prompt", prompt_template=template)
            )
    with pytest.raises(ConfigError, match="objective simcse does not train it"):
        recipe_from_dict({"model": {"name_or_path": str(tiny_model_dir), "pooler": "prompt"}})
