import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import SimCSE, SimCSEConfig, build_objective
from sentcl.objectives.masked_lm import WithMLM, head_loss, mask_tokens
from sentcl.training.gradcache import chunkable
from tests.objectives.helpers import batch_of, tiny_encoder


@pytest.fixture
def encoder(tiny_model_dir):
    torch.manual_seed(0)
    return tiny_encoder(tiny_model_dir, "avg")


def test_masking_is_bert_80_10_10_and_never_touches_specials_or_padding(encoder):
    torch.manual_seed(0)
    tok = encoder.tokenizer
    vocab = encoder.backbone.config.vocab_size
    ids = torch.randint(10, vocab, (400, 64))  # no special token among them
    ids[:, 0], ids[:, 50] = tok.cls_token_id, tok.sep_token_id
    ids[:, 51:] = tok.pad_token_id
    mask = (ids != tok.pad_token_id).long()
    masked, labels = mask_tokens(ids, mask, tok, 0.15)
    chosen = labels != -100
    assert not chosen[:, 0].any() and not chosen[:, 50:].any()
    assert chosen.float().sum() / mask[:, 1:50].sum() == pytest.approx(0.15, abs=0.01)
    assert torch.equal(labels[chosen], ids[chosen])
    to_mask = (masked[chosen] == tok.mask_token_id).float().mean()
    kept = (masked[chosen] == ids[chosen]).float().mean()
    assert to_mask == pytest.approx(0.8, abs=0.02)
    assert kept == pytest.approx(0.1 + 0.1 / vocab, abs=0.02)
    assert torch.equal(masked[~chosen], ids[~chosen])


def test_fresh_head_is_tied_to_the_input_embeddings(encoder):
    head = encoder.masked_lm_head()  # the tiny checkpoint is a BertModel: no MLM head in it
    decoder = [m for m in head.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert decoder.weight is encoder.backbone.get_input_embeddings().weight


def test_a_checkpoint_head_is_reused(tmp_path, encoder):
    config = BertConfig.from_pretrained(encoder.backbone.name_or_path)
    torch.manual_seed(7)
    full = BertForMaskedLM(config)
    full.save_pretrained(str(tmp_path / "mlm"))
    encoder.tokenizer.save_pretrained(str(tmp_path / "mlm"))
    with_head = SentenceEncoder.from_config(ModelConfig(name_or_path=str(tmp_path / "mlm"), pooler="avg"))
    head = with_head.masked_lm_head()
    assert torch.equal(head.predictions.transform.dense.weight, full.cls.predictions.transform.dense.weight)


def test_loss_equals_full_vocabulary_reference(encoder):
    head = encoder.masked_lm_head()
    batch = batch_of(encoder, views=1)
    ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
    torch.manual_seed(1)
    masked, labels = mask_tokens(ids, mask, encoder.tokenizer, 0.3)
    encoder.eval()
    ours = head_loss(head, encoder.token_states(masked, mask), labels)
    logits = head(encoder.backbone(input_ids=masked, attention_mask=mask).last_hidden_state)  # every position
    reference = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    assert ours.item() == pytest.approx(reference.item(), abs=1e-5)


def test_with_mlm_adds_lambda_times_mlm_and_trains_the_backbone(encoder):
    objective = build_objective("simcse", SimCSEConfig(mlm_weight=0.1), encoder)
    assert isinstance(objective, WithMLM) and not chunkable(objective)  # its MLM pass has its own graph
    batch = batch_of(encoder, views=2)
    torch.manual_seed(2)
    out = objective(batch)
    assert set(out.terms) == {"info_nce", "mlm"}
    assert out.loss.item() == pytest.approx(
        out.terms["info_nce"].item() + 0.1 * out.terms["mlm"].item(), abs=1e-5
    )
    out.loss.backward()
    assert encoder.backbone.get_input_embeddings().weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in objective.head.parameters())


def test_mlm_loss_decreases_under_adam(encoder):
    head = encoder.masked_lm_head()
    batch = batch_of(encoder, views=1)
    params = list({id(p): p for p in [*encoder.parameters(), *head.parameters()]}.values())
    optimizer = torch.optim.Adam(params, lr=1e-2)
    ids, mask = batch.input_ids[:, 0], batch.attention_mask[:, 0]
    losses = []
    for step in range(30):
        torch.manual_seed(step)
        masked, labels = mask_tokens(ids, mask, encoder.tokenizer, 0.15)
        loss = head_loss(head, encoder.token_states(masked, mask), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.75 * sum(losses[:5])


def test_plain_objective_unchanged_without_mlm(encoder):
    assert isinstance(build_objective("simcse", SimCSEConfig(), encoder), SimCSE)
    z = torch.randn(4, 2, 8)
    assert build_objective("simcse", SimCSEConfig(), encoder).loss_from_embeddings(z).loss.isfinite()
