"""Ditto's pooler (model/pooling.py ``ditto-L-H``) against a hand computation from the backbone's own outputs,
the head ranking (model/ditto.py) consistent with evaluating its best head, and the refusals."""

import numpy as np
import pytest
import torch

from sentcl.cli.main import main
from sentcl.config import ConfigError
from sentcl.evaluation import STSEvaluator
from sentcl.model import SentenceEncoder
from sentcl.model.ditto import rank_heads
from sentcl.training import recipe_from_dict

TEXTS = ["a man plays the guitar", "the dog runs", "a woman reads a book in the park"]


def test_the_pooler_weights_first_and_last_states_by_the_heads_self_attention(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir), pooler="ditto-1-1")
    got = encoder.encode(TEXTS)
    batch = encoder.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = encoder.backbone(**batch, output_hidden_states=True, output_attentions=True)
    for i in range(len(TEXTS)):
        real = batch.attention_mask[i].bool()
        weights = torch.stack([out.attentions[1][i, 1, t, t] for t in range(real.shape[0])])[real]
        states = ((out.hidden_states[0][i] + out.hidden_states[-1][i]) / 2)[real]
        expected = (weights[:, None] * states).sum(0) / weights.sum()
        np.testing.assert_allclose(got[i], expected.numpy(), rtol=1e-4, atol=1e-5)


def test_the_ranking_scores_every_head_and_its_best_is_what_evaluation_gives(tiny_model_dir, stsb_data_dir):
    ranking = rank_heads(SentenceEncoder.load(str(tiny_model_dir)), stsb_data_dir)
    assert len(ranking) == 2 * 2 and ranking == sorted(ranking, reverse=True)  # 2 layers of 2 heads
    score, layer, head = ranking[0]
    chosen = SentenceEncoder.load(str(tiny_model_dir), pooler=f"ditto-{layer}-{head}")
    measured = STSEvaluator(stsb_data_dir, "stsb-dev")(chosen)["stsb_dev_spearman"]
    assert measured == pytest.approx(score, abs=1e-3)


def test_heads_the_model_lacks_training_and_a_misspelt_pooler_are_refused(tiny_model_dir, tmp_path, capsys):
    with pytest.raises(ConfigError, match="pooler ditto-5-0: the model has 2 layers of 2 heads"):
        SentenceEncoder.load(str(tiny_model_dir), pooler="ditto-5-0")
    with pytest.raises(ConfigError, match="Ditto's training-free pooler"):
        recipe_from_dict({"model": {"name_or_path": str(tiny_model_dir), "pooler": "ditto-0-0"}})
    texts = tmp_path / "t.txt"
    texts.write_text("a man plays\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(
            ["encode", str(tiny_model_dir), str(texts), "--out", str(tmp_path / "v.npy"), "--pooler", "dito"]
        )
    assert "ditto-LAYER-HEAD" in capsys.readouterr().err
    out = tmp_path / "v.npy"
    assert (
        main(
            [
                "encode",
                str(tiny_model_dir),
                str(texts),
                "--out",
                str(out),
                "--pooler",
                "ditto-0-1",
                "--dtype",
                "fp32",
            ]
        )
        == 0
    )
    expected = SentenceEncoder.load(str(tiny_model_dir), pooler="ditto-0-1").encode(["a man plays"])
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)
