"""Any Hugging Face encoder: tiny random configs of each architecture the installed transformers has go
through one SimCSE training step, the packed pass (equal to the padded one where the probe allows it,
the padded pass with a log line where it does not), and save → SentenceTransformer / AutoModel with the
same embeddings. The tokenizer is the tiny word-piece one of tests/conftest.py for every architecture:
the models do not care which vocabulary their ids come from."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import transformers
from transformers import AutoModel, AutoTokenizer

from sentcl.model import ModelConfig, SentenceEncoder, backbone_states
from sentcl.model.packing import packing_position
from sentcl.training import recipe_from_dict, train
from tests.conftest import SENTENCES

COMMON = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
ARCHITECTURES = {
    "bert": ("BertConfig", COMMON),
    "roberta": ("RobertaConfig", COMMON),
    "xlm-roberta": ("XLMRobertaConfig", COMMON),
    "electra": ("ElectraConfig", COMMON | {"embedding_size": 16}),
    "distilbert": ("DistilBertConfig", {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}),
    "mpnet": ("MPNetConfig", COMMON),
    "deberta-v2": ("DebertaV2Config", COMMON),
    "modernbert": ("ModernBertConfig", COMMON | {"global_attn_every_n_layers": 1, "local_attention": 8}),
}
# the packed pass is only as good as the probe says: these reproduce their padded states packed
PACKS = {"bert", "roberta", "xlm-roberta", "electra", "distilbert", "modernbert"}


def available():
    for name, (config_class, settings) in ARCHITECTURES.items():
        marks = () if hasattr(transformers, config_class) else pytest.mark.skip(f"no {config_class} here")
        yield pytest.param((name, config_class, settings), id=name, marks=marks)


@pytest.fixture
def model_folder(tmp_path, tiny_model_dir, request):
    name, config_class, settings = request.param
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    config = getattr(transformers, config_class)(
        vocab_size=tokenizer.vocab_size,
        max_position_embeddings=80,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        **settings,
    )
    if hasattr(config, "cls_token_id"):
        config.cls_token_id, config.sep_token_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    torch.manual_seed(0)
    folder = tmp_path / name
    AutoModel.from_config(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return name, folder


def batch(encoder, sentences):
    tokens = encoder.tokenizer(sentences, padding=True, return_tensors="pt")
    return tokens["input_ids"], tokens["attention_mask"]


@pytest.mark.parametrize("model_folder", list(available()), indirect=True)
def test_every_encoder_trains_packs_and_exports(model_folder, tmp_path, caplog):
    name, folder = model_folder
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    run = tmp_path / "run"
    result = train(
        recipe_from_dict({
            "model": {"name_or_path": str(folder), "pooler": "avg"},
            "data": {"train_file": str(corpus), "max_length": 16},
            "objective": {"name": "simcse"},
            "training": {"output_dir": str(run), "batch_size": 4, "max_steps": 1, "eval_steps": 0},
        })
    )  # fmt: skip
    assert result.steps == 1

    encoder = SentenceEncoder.from_config(ModelConfig(str(folder), pooler="avg")).eval()
    ids, mask = batch(encoder, SENTENCES[:4])
    assert not bool(mask.all())  # the batch has padding, so packing has something to skip
    with caplog.at_level(logging.INFO, logger="sentcl.model.packing"):
        packs = packing_position(encoder.backbone) is not None
    assert packs == (name in PACKS), name
    if not packs:
        assert any("no unpadded pass" in r.getMessage() for r in caplog.records)
    with torch.no_grad():
        padded, _ = backbone_states(encoder.backbone, ids, mask, unpad=False)
        packed, _ = backbone_states(encoder.backbone, ids, mask, unpad=True)
    real = mask.bool()
    torch.testing.assert_close(packed[real], padded[real], atol=1e-5, rtol=1e-4)

    saved = SentenceEncoder.load(str(run))
    texts = ["a dog runs in the park", "two children eat food", "a red car"]
    ours = saved.encode(texts)
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(run / "model"), device="cpu").encode(texts)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    backbone = AutoModel.from_pretrained(str(run / "model")).eval()  # plain transformers, mean pooling
    ids, mask = batch(saved, texts)
    with torch.no_grad():
        states = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
    mean = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    np.testing.assert_allclose(ours, mean.numpy(), atol=1e-5)
