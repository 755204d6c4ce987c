"""ESimCSE (objectives/esimcse.py): the repeated view as the reference builds it, the loss against a hand
computation, the momentum queue, and a run."""

import pytest
import torch
import torch.nn.functional as F

from sentcl.config import ConfigError
from sentcl.objectives import ESimCSE, ESimCSEConfig
from sentcl.objectives.esimcse import repeat_tokens
from tests.conftest import SENTENCES
from tests.objectives.helpers import batch_of, tiny_encoder, trains_three_steps


def test_the_repeated_view_duplicates_inner_tokens_only_and_at_most_its_cap():
    torch.manual_seed(0)
    ids = torch.tensor([[101, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 102, 0, 0]] * 200)
    mask = (ids != 0).long()
    repeated, repeated_mask = repeat_tokens(ids, mask, dup_rate=0.32)
    added = repeated_mask.sum(1) - mask.sum(1)
    assert added.min() == 0 and added.max() == min(10, int(0.32 * 15)) - 1  # randrange(cap): 0 … cap − 1
    for row, row_mask in zip(repeated, repeated_mask, strict=True):
        real = row[row_mask.bool()].tolist()
        assert real[0] == 101 and real[-1] == 102 and real.count(101) == real.count(102) == 1
        assert list(dict.fromkeys(real)) == ids[0, :15].tolist()  # the same tokens, in order, some twice
    same, same_mask = repeat_tokens(ids, mask, dup_rate=0.0)
    assert torch.equal(same, ids[:, :15]) and torch.equal(same_mask, mask[:, :15])


def test_the_loss_is_infonce_against_the_repeated_view_and_the_queue(tiny_model_dir):
    encoder = tiny_encoder(tiny_model_dir, "avg").eval()  # no dropout: the passes can be redone by hand
    objective = ESimCSE(ESimCSEConfig(queue_size=8, momentum=0.5), encoder)
    batch = batch_of(encoder, SENTENCES[:4], views=1)
    ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
    torch.manual_seed(3)
    first = objective(batch)
    torch.manual_seed(3)
    repeated, repeated_mask = repeat_tokens(ids, mask, 0.32, encoder.tokenizer.pad_token_id)
    with torch.no_grad():
        z, z_plus = encoder.embed_tokens(ids, mask), encoder.embed_tokens(repeated, repeated_mask)
        expected = F.cross_entropy(
            F.normalize(z, dim=-1) @ F.normalize(z_plus, dim=-1).T / 0.05, torch.arange(4)
        )
        assert first.loss.item() == pytest.approx(expected.item(), rel=1e-5)  # the queue starts empty
        # the queue now holds the momentum encoder's vectors of the batch (without dropout), oldest first
        assert int(objective.queue_filled) == 4
        torch.testing.assert_close(objective.queue[:4], objective.momentum_encoder.embed_tokens(ids, mask))
    objective(batch)
    objective(batch)
    assert int(objective.queue_filled) == 8  # full: the last 8 vectors


def test_a_run_on_sentences_trains_and_bad_keys_are_named(tiny_model_dir, tmp_path, stsb_data_dir):
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n", encoding="utf-8")
    assert trains_three_steps(tiny_model_dir, corpus, tmp_path / "run", stsb_data_dir, "esimcse")
    with pytest.raises(ConfigError, match=r"dup_rate: must be in \[0, 1\]"):
        ESimCSEConfig(dup_rate=1.5).validate()
