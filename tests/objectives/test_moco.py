import math

import pytest
import torch
import torch.nn.functional as F

from sentcl.objectives.moco import MoCo, MoCoConfig
from tests.conftest import SENTENCES
from tests.objectives.helpers import batch_of, tiny_encoder


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "avg").eval()  # no dropout: keys are deterministic


def test_equals_a_naive_reference_with_queue(encoder):
    moco = MoCo(MoCoConfig(queue_size=5, momentum=0.9), encoder)
    first, second = batch_of(encoder, views=2), batch_of(encoder, views=2)
    moco(first)  # fills the queue with 5 of 6 keys
    queue = moco.queue.clone()
    assert int(moco.queue_filled) == 5
    with torch.no_grad():  # the naive step: momentum update, keys, logits one by one
        for k, q in zip(moco.key_encoder.parameters(), encoder.parameters(), strict=True):
            expected_key_param = 0.9 * k + 0.1 * q
        keys = F.normalize(moco.key_encoder.embed_tokens(second.input_ids[:, 1], second.attention_mask[:, 1]))
    out = moco(second)
    assert torch.allclose(list(moco.key_encoder.parameters())[-1], expected_key_param)
    queries = F.normalize(encoder.embed(second)[:, 0]).detach()
    total = 0.0
    for i in range(len(queries)):
        logits = [float(queries[i] @ keys[j]) / 0.05 for j in range(len(keys))]
        logits += [float(queries[i] @ n) / 0.05 for n in queue]
        total += -logits[i] + math.log(sum(math.exp(x) for x in logits))
    assert out.loss.item() == pytest.approx(total / len(queries), abs=1e-4)


def test_closed_form_one_sentence_repeated(encoder):
    moco = MoCo(MoCoConfig(queue_size=0), encoder)  # the key encoder starts as an exact copy
    batch = batch_of(encoder, ["the dog runs"] * 4)  # every query equals every key: all logits tie
    out = moco(batch)
    assert out.loss.item() == pytest.approx(math.log(4), abs=1e-4)


def test_fifo_queue_wraps(encoder):
    moco = MoCo(MoCoConfig(queue_size=4), encoder)
    for start in (0, 3):
        moco.enqueue(
            torch.arange(start, start + 3, dtype=torch.float)[:, None].repeat(1, moco.queue.shape[1])
        )
    assert moco.queue[:, 0].tolist() == [4.0, 5.0, 2.0, 3.0]
    assert int(moco.queue_pointer) == 2 and int(moco.queue_filled) == 4


def test_nothing_flows_into_keys_or_queue_and_loss_decreases(encoder):
    moco = MoCo(MoCoConfig(queue_size=6, momentum=0.5), encoder)
    # two disjoint batches in turn: the queue always holds the other batch's keys (true negatives)
    batches = [batch_of(encoder, SENTENCES[:6], views=1), batch_of(encoder, SENTENCES[6:], views=1)]
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=3e-3)
    losses = []
    for step in range(16):
        batch = batches[step % 2]  # one view: the key encoder's pass gives the second
        out = moco(batch)
        optimizer.zero_grad()
        out.loss.backward()
        assert all(p.grad is None for p in moco.key_encoder.parameters())
        assert not moco.queue.requires_grad
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())
        optimizer.step()
        losses.append(out.loss.item())
    assert sum(losses[-4:]) < sum(losses[2:6])  # the queue is full from step 1 on


def test_key_encoder_and_queue_are_in_the_state_dict(encoder):
    state = MoCo(MoCoConfig(queue_size=4), encoder).state_dict()
    assert {"queue", "queue_pointer", "queue_filled"} <= state.keys()
    assert any(k.startswith("key_encoder.") for k in state)
    assert not any(k.startswith("query_encoder") for k in state)
