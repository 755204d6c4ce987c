"""Contrastive Tension (in-batch): equals sentence-transformers' ContrastiveTensionLossInBatchNegatives on the
same batch and weights; both copies and the scale train, the kept encoder is the second copy."""

import math

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer import modules as st_modules
from sentence_transformers.sentence_transformer.losses import ContrastiveTensionLossInBatchNegatives

from sentcl.config import ConfigError
from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import ContrastiveTension, ContrastiveTensionConfig
from sentcl.objectives.contrastive_tension import tension_loss

TEXTS = ["a man plays the ball in the park", "the dog runs on the street", "a woman reads a book", "the cat"]


def objective(folder, scale=20.0) -> ContrastiveTension:
    encoder = SentenceEncoder.from_config(ModelConfig(str(folder), pooler="avg"))
    return ContrastiveTension(ContrastiveTensionConfig(scale=scale), encoder)


def batch_of(tokenizer) -> Batch:
    tokens = tokenizer(TEXTS, padding=True, return_tensors="pt")
    return Batch(tokens["input_ids"][:, None], tokens["attention_mask"][:, None], torch.arange(len(TEXTS)))


@pytest.mark.parametrize("scale", [20.0, 5.0])
def test_the_loss_equals_sentence_transformers_on_the_same_batch_and_weights(tiny_model_dir, scale):
    transformer = st_modules.Transformer(str(tiny_model_dir), max_seq_length=32)
    pooling = st_modules.Pooling(transformer.get_embedding_dimension(), "mean")
    theirs = ContrastiveTensionLossInBatchNegatives(
        SentenceTransformer(modules=[transformer, pooling], device="cpu"), scale=scale
    )
    ours = objective(tiny_model_dir, scale)
    torch.manual_seed(1)
    with torch.no_grad():  # the two copies made different, the same way on both sides
        for mine, peer in zip(ours.twin.backbone.parameters(), theirs.model1[0].auto_model.parameters(),
                              strict=True):  # fmt: skip
            mine.add_(torch.randn_like(mine) * 0.05)
            peer.copy_(mine)
    ours.eval(), theirs.eval()
    tokens = ours.require_encoder().tokenizer(TEXTS, padding=True, return_tensors="pt")
    expected = theirs([dict(tokens)], None)
    got = ours(batch_of(ours.require_encoder().tokenizer)).loss
    assert got.item() == pytest.approx(expected.item(), abs=1e-6)
    assert got.item() > 0.01  # the copies differ: not the trivial zero


def test_both_copies_and_the_scale_train_and_the_second_is_kept(tiny_model_dir):
    ct = objective(tiny_model_dir).train()
    output = ct(batch_of(ct.require_encoder().tokenizer))
    output.loss.backward()
    for copy in (ct.twin, ct.require_encoder()):  # every layer of both (BERT's unused pooler aside)
        assert all(p.grad is not None for name, p in copy.named_parameters() if ".pooler." not in name)
    assert ct.log_scale.grad is not None and ct.log_scale.grad.abs() > 0
    assert output.terms["scale"].item() == pytest.approx(20.0)
    assert ct.twin is not ct.require_encoder()


def test_the_closed_form_for_equal_vectors():
    """Identical, orthogonal vectors: S = e^s·I, each row's CE = log(1 + (B−1)·e^{−e^s})."""
    first = torch.eye(4)
    loss = tension_loss(first, first, torch.tensor(math.log(2.0)))
    assert loss.item() == pytest.approx(math.log(1 + 3 * math.exp(-2.0)), rel=1e-6)


def test_the_scale_is_checked():
    with pytest.raises(ConfigError, match="scale: must be positive"):
        ContrastiveTensionConfig(scale=0).validate()
