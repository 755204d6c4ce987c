import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from sentcl.data import Batch
from sentcl.model import ModelConfig, ModelLoadError, SentenceEncoder

TEXTS = ["a man plays the ball", "the dog runs", "a woman reads a very old book in the park today"]


def test_forward_flattens_views_once(tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg"))
    calls = []
    encoder.backbone.register_forward_hook(lambda module, args, kwargs_out: calls.append(1))
    ids = torch.randint(5, 50, (4, 3, 7))
    out = encoder.embed(Batch(ids, torch.ones_like(ids), None))
    assert out.shape == (4, 3, 32)
    assert len(calls) == 1


def test_encode_is_order_independent_and_deterministic(tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg"))
    encoder.train()  # encode must switch dropout off by itself, and restore the mode
    a = encoder.encode(TEXTS, batch_size=2)
    b = encoder.encode(TEXTS[::-1], batch_size=1)[::-1]
    assert encoder.training
    np.testing.assert_allclose(a, b, atol=1e-5)
    normalised = encoder.encode(TEXTS, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normalised, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    "pooler,mlp_only_train", [("avg", False), ("cls_before_pooler", False), ("cls", False), ("cls", True)]
)
def test_saved_model_loads_in_automodel_sentence_transformers_and_sentcl(
    tmp_path, tiny_model_dir, pooler, mlp_only_train
):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler, mlp_only_train))
    if encoder.head is not None:  # make the head non-trivial so a dropped head would show
        with torch.no_grad():
            encoder.head.dense.weight.normal_(0, 0.3)
    ours = encoder.encode(TEXTS)
    folder = encoder.save(tmp_path / "model")

    reloaded = SentenceEncoder.load(str(folder))
    assert reloaded.pooler == pooler
    np.testing.assert_allclose(reloaded.encode(TEXTS), ours, atol=1e-5)

    backbone = AutoModel.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = backbone(**inputs).last_hidden_state
    if pooler == "avg":
        mask = inputs["attention_mask"].unsqueeze(-1).float()
        np.testing.assert_allclose((hidden * mask).sum(1) / mask.sum(1), ours, atol=1e-5)

    st = SentenceTransformer(str(folder), device="cpu")
    np.testing.assert_allclose(st.encode(TEXTS, convert_to_numpy=True), ours, atol=1e-5)


def test_first_last_is_saved_without_sentence_transformers_files(tmp_path, tiny_model_dir):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg_first_last"))
    folder = encoder.save(tmp_path / "m")
    assert not (folder / "modules.json").exists()
    meta = json.loads((folder / "sentcl.json").read_text())
    assert meta["sentence_transformers"]["exported"] is False
    assert "no sentence-transformers equivalent" in meta["sentence_transformers"]["reason"]
    np.testing.assert_allclose(
        SentenceEncoder.load(str(folder)).encode(TEXTS), encoder.encode(TEXTS), atol=1e-5
    )


def test_failed_save_leaves_previous_model_intact(tmp_path, tiny_model_dir, monkeypatch):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="avg"))
    folder = encoder.save(tmp_path / "m")
    before = sorted(p.name for p in folder.iterdir())

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(encoder.tokenizer, "save_pretrained", crash)
    with pytest.raises(OSError, match=r"disk full"):
        encoder.save(folder)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no temporary folder left behind
    SentenceEncoder.load(str(folder))


def test_load_errors_are_clear(tmp_path, tiny_model_dir):
    with pytest.raises(ModelLoadError, match=r"no such folder"):
        SentenceEncoder.load(str(tmp_path / "absent"))
    with pytest.raises(ModelLoadError, match=r"needs the MLP head"):
        SentenceEncoder.load(str(tiny_model_dir), pooler="cls")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no config.json"):
        SentenceEncoder.load(str(tmp_path / "empty"))


def test_raw_model_defaults_to_avg_and_run_folder_resolves_to_its_model(tmp_path, tiny_model_dir):
    assert SentenceEncoder.load(str(tiny_model_dir)).pooler == "avg"
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="cls_before_pooler"))
    encoder.save(tmp_path / "run" / "model")
    assert SentenceEncoder.load(str(tmp_path / "run")).pooler == "cls_before_pooler"


def test_inference_dtypes_keep_fp32_outputs_close_to_fp32(tiny_model_dir):
    from sentcl import precision
    from sentcl.model import for_inference

    texts = ["a dog runs in the park", "two children eat food", "a red car"]
    fp32 = SentenceEncoder.load(str(tiny_model_dir)).encode(texts)
    bf16 = SentenceEncoder.load(str(tiny_model_dir)).with_dtype("bf16")
    assert bf16.inference_autocast is torch.bfloat16
    out = bf16.encode(texts)
    assert out.dtype == np.float32 and not np.array_equal(out, fp32)  # bf16 products, fp32 vectors
    np.testing.assert_allclose(out, fp32, atol=0.05)
    int8 = for_inference(SentenceEncoder.load(str(tiny_model_dir)), "int8")  # ONNX Runtime's (test_onnx)
    assert int8.precision == "int8"
    np.testing.assert_allclose(int8.encode(texts), fp32, atol=0.1)
    auto = SentenceEncoder.load(str(tiny_model_dir)).with_dtype("auto")
    expected = torch.bfloat16 if precision.decide("auto", "cpu") == "bf16" else None
    assert auto.inference_autocast is expected
    with pytest.raises(ValueError, match="'fp8' is not one of fp32, bf16, int8, auto"):
        SentenceEncoder.load(str(tiny_model_dir)).with_dtype("fp8")
    with pytest.raises(ValueError, match="int8 runs in ONNX Runtime"):
        SentenceEncoder.load(str(tiny_model_dir)).with_dtype("int8")


@pytest.mark.parametrize("batch_size", [0, -1])
def test_a_batch_size_below_one_is_refused_not_left_as_uninitialised_rows(tiny_model_dir, batch_size):
    with pytest.raises(ValueError, match=f"batch_size must be a positive integer, got {batch_size}"):
        SentenceEncoder.load(str(tiny_model_dir)).encode(["a dog", "a cat"], batch_size=batch_size)


def test_nan_embeddings_are_refused_naming_the_first_sentence(tiny_model_dir):
    from sentcl.embedder import EmbeddingError

    encoder = SentenceEncoder.load(str(tiny_model_dir))
    with torch.no_grad():  # broken after loading (loading refuses NaN weights: test_broken_models)
        encoder.backbone.embeddings.word_embeddings.weight[:] = float("nan")
    with pytest.raises(
        EmbeddingError, match=r"NaN or infinite embedding values for 2 of 2 sentences .*'a dog'"
    ):
        encoder.encode(["a dog", "a cat"])


def test_a_token_budget_changes_the_batches_not_the_vectors(tiny_model_dir):
    sentences = [" ".join(["word"] * n) + f" {n}" for n in (1, 40, 3, 17, 2, 29, 8, 1, 12)]
    encoder = SentenceEncoder.load(str(tiny_model_dir))
    plain = encoder.encode(sentences, batch_size=8)
    encoder.max_batch_tokens = 30  # most batches of one or two rows here
    np.testing.assert_allclose(encoder.encode(sentences, batch_size=8), plain, atol=1e-6)
    for bad in (0, -3, True, 1.5):
        with pytest.raises(ValueError, match="max_batch_tokens must be a positive integer"):
            encoder.max_batch_tokens = bad
    encoder.max_batch_tokens = None
    assert encoder.max_batch_tokens is None
