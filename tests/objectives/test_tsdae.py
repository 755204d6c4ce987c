"""TSDAE: the loss equals sentence-transformers' DenoisingAutoEncoderLoss on the same batch and weights; the
noise deletes whole words, keeps the special tokens and at least one word."""

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer import modules as st_modules
from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

from sentcl.config import ConfigError
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import TSDAE, TSDAEConfig
from sentcl.objectives.tsdae import continuation_table, delete_words

SOURCES = ["man plays ball", "dog runs", "a woman reads a book quickly", "cat"]
TARGETS = [
    "a man plays the ball in the park",
    "the dog runs on the street",
    "a woman reads a book",
    "the cat",
]


def encoder(folder, pooler="cls_before_pooler") -> SentenceEncoder:
    return SentenceEncoder.from_config(ModelConfig(str(folder), pooler=pooler))


def test_the_loss_equals_sentence_transformers_on_the_same_batch_and_weights(tiny_model_dir):
    transformer = st_modules.Transformer(str(tiny_model_dir), max_seq_length=32)
    pooling = st_modules.Pooling(transformer.get_embedding_dimension(), "cls")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    theirs = DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True).eval()
    ours = TSDAE(TSDAEConfig(), encoder(tiny_model_dir)).eval()
    ours.decoder.load_state_dict(theirs.decoder.state_dict())  # the fresh cross-attention and LM head
    tokenizer = ours.require_encoder().tokenizer
    source = tokenizer(SOURCES, padding=True, return_tensors="pt")
    target = tokenizer(TARGETS, padding=True, return_tensors="pt")
    expected = theirs([dict(source), dict(target)], None)
    got = ours.reconstruction_loss(source["input_ids"], source["attention_mask"], target["input_ids"])
    assert got.item() == pytest.approx(expected.item(), abs=1e-6)
    assert got.item() > 1.0  # a real cross-entropy over the vocabulary, not a constant


def test_the_decoder_shares_the_encoders_weights(tiny_model_dir):
    objective = TSDAE(TSDAEConfig(), encoder(tiny_model_dir))
    backbone = objective.require_encoder().backbone
    assert objective.decoder.get_input_embeddings().weight is backbone.get_input_embeddings().weight
    assert objective.decoder.get_output_embeddings().weight is backbone.get_input_embeddings().weight
    layer = objective.decoder.bert.encoder.layer[0]
    assert layer.attention.self.query.weight is backbone.encoder.layer[0].attention.self.query.weight
    assert hasattr(layer, "crossattention")  # the decoder's own


def test_a_training_step_moves_the_shared_weights(tiny_model_dir):
    objective = TSDAE(TSDAEConfig(), encoder(tiny_model_dir)).train()
    tokenizer = objective.require_encoder().tokenizer
    target = tokenizer(TARGETS, padding=True, return_tensors="pt")
    from sentcl.data import Batch

    batch = Batch(
        input_ids=target["input_ids"][:, None], attention_mask=target["attention_mask"][:, None],
        indices=torch.arange(4),
    )  # fmt: skip
    torch.manual_seed(0)
    output = objective(batch)
    output.loss.backward()
    embeddings = objective.require_encoder().backbone.get_input_embeddings().weight
    assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0
    assert set(output.terms) == {"tsdae"}


def test_words_are_deleted_whole_and_specials_kept(tiny_model_dir):
    tokenizer = encoder(tiny_model_dir).tokenizer
    table = continuation_table(tokenizer)
    vocabulary = tokenizer.get_vocab()
    assert table[vocabulary["##s"]] and not table[vocabulary["man"]] and not table[vocabulary["[CLS]"]]
    special = torch.tensor(sorted(tokenizer.all_special_ids))
    text = "the mans dogs plays in the parks with cats and balls"
    tokens = tokenizer([text], return_tensors="pt")
    ids, mask = tokens["input_ids"], tokens["attention_mask"]
    words = text.split()
    kept_counts = []
    torch.manual_seed(0)
    for _ in range(200):
        damaged, damaged_mask = delete_words(ids, mask, 0.6, table, special, tokenizer.pad_token_id)
        row = damaged[0][damaged_mask[0].bool()]
        assert row[0] == tokenizer.cls_token_id and row[-1] == tokenizer.sep_token_id
        decoded = tokenizer.decode(row[1:-1]).split()
        assert decoded and all(word in words for word in decoded)  # whole words only, at least one
        kept_counts.append(len(decoded))
    share = 1 - sum(kept_counts) / (200 * len(words))
    assert 0.5 < share < 0.7  # ≈ 0.6 deleted (the floor of one word adds a little)


def test_deletion_zero_keeps_the_sentence(tiny_model_dir):
    tokenizer = encoder(tiny_model_dir).tokenizer
    tokens = tokenizer(TARGETS, padding=True, return_tensors="pt")
    special = torch.tensor(sorted(tokenizer.all_special_ids))
    damaged, damaged_mask = delete_words(
        tokens["input_ids"], tokens["attention_mask"], 0.0, continuation_table(tokenizer), special, 0
    )
    assert torch.equal(damaged, tokens["input_ids"]) and torch.equal(damaged_mask, tokens["attention_mask"])


def test_the_deletion_share_is_checked():
    with pytest.raises(ConfigError, match="deletion: must be in"):
        TSDAEConfig(deletion=1.0).validate()
