"""The static encoder (model/static.py): model2vec's vocabulary distillation against its definition, encoding
equal to a hand mean and to sentence-transformers' StaticEmbedding loading the saved folder, training by
distillation, and the refusals (dropout copies, token states, precisions, broken folders)."""

import hashlib
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from sentcl.cli.main import main
from sentcl.config import ConfigError
from sentcl.model import (
    ModelConfig,
    ModelLoadError,
    SentenceEncoder,
    StaticEncoder,
    for_inference,
    load_encoder,
)
from sentcl.model.static import vocabulary_distillation
from sentcl.training import recipe_from_dict, train
from tests.conftest import SENTENCES

TEXTS = ["a man plays the guitar", "the dog runs on the street", "", "red red red", "the cat sleeps " * 300]


def static_config(tiny_model_dir, **keys) -> ModelConfig:
    return ModelConfig(str(tiny_model_dir), architecture="static", **({"static_dim": 8} | keys))


def test_vocabulary_distillation_is_model2vecs_recipe(tiny_model_dir):
    teacher = SentenceEncoder.load(str(tiny_model_dir), pooler="avg")
    tokenizer = teacher.tokenizer
    table = vocabulary_distillation(teacher, dims=8, sif=None)
    special = sorted(set(tokenizer.all_special_ids))
    kept = [i for i in range(len(tokenizer)) if i not in special]
    assert table.shape == (len(tokenizer), 8) and not table[special].any()
    # the kept rows: each token alone between [CLS] and [SEP], the teacher's mean, then PCA
    ids = torch.tensor([[tokenizer.cls_token_id, i, tokenizer.sep_token_id] for i in kept])
    with torch.no_grad():
        pooled = teacher._pool(ids, torch.ones_like(ids)).double().numpy()
    centred = pooled - pooled.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    projected = centred @ vt[:8].T
    np.testing.assert_allclose(np.abs(table[kept]), np.abs(projected), atol=1e-4)  # up to each axis' sign
    weighted = vocabulary_distillation(teacher, dims=8, sif=1e-2)
    p = 1 / np.arange(2, len(kept) + 2)
    p /= p.sum()
    ratio = np.linalg.norm(weighted[kept], axis=1) / np.linalg.norm(table[kept], axis=1)
    np.testing.assert_allclose(ratio, 1e-2 / (1e-2 + p), rtol=1e-4)


def test_encode_is_the_mean_of_the_tokens_and_sentence_transformers_loads_the_same_model(
    tiny_model_dir, tmp_path
):
    from sentence_transformers import SentenceTransformer

    encoder = StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random"))
    got = encoder.encode(TEXTS, batch_size=3)
    table = encoder.embedding.weight.detach().numpy()
    for text, vector in zip(TEXTS, got, strict=True):
        ids = encoder.tokenizer(text, add_special_tokens=False)["input_ids"]
        expected = table[ids].mean(0) if ids else np.zeros(8)
        np.testing.assert_allclose(vector, expected, atol=1e-6)
    # the training path on collated ids (with [CLS]/[SEP] and padding) gives the same vectors
    batch = encoder.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    np.testing.assert_allclose(
        encoder.embed_tokens(batch.input_ids, batch.attention_mask).detach(), got[:2], atol=1e-6
    )
    encoder.prompts = {"query": "query: "}
    encoder.save(tmp_path / "static")
    st = SentenceTransformer(str(tmp_path / "static"), device="cpu")
    assert type(st[0]).__name__ == "StaticEmbedding" and st.prompts.get("query") == "query: "
    np.testing.assert_allclose(st.encode(TEXTS), got, atol=1e-6)
    loaded = load_encoder(str(tmp_path / "static"))
    assert isinstance(loaded, StaticEncoder) and loaded.prompts == {"query": "query: ", "document": ""}
    np.testing.assert_allclose(loaded.encode(TEXTS), got, atol=1e-6)
    np.testing.assert_allclose(loaded.encode_query(TEXTS), st.encode_query(TEXTS), atol=1e-6)
    np.testing.assert_allclose(loaded.encode_document(TEXTS), st.encode_document(TEXTS), atol=1e-6)
    # a sentence-transformers static folder sentcl did not write loads too
    st.save(str(tmp_path / "from-st"))
    np.testing.assert_allclose(load_encoder(str(tmp_path / "from-st")).encode(TEXTS), got, atol=1e-6)


def test_precisions_and_transformer_only_parts_are_refused_in_one_line(tiny_model_dir):
    encoder = StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random"))
    assert for_inference(encoder, "auto") is encoder
    for dtype in ("bf16", "int8"):
        with pytest.raises(ConfigError, match="a static model runs in fp32"):
            for_inference(encoder, dtype)
    with pytest.raises(ConfigError, match="no token states"):
        encoder.token_states(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3))
    with pytest.raises(ConfigError, match="keep_layers: a static model"):
        static_config(tiny_model_dir, keep_layers=[0]).validate()
    with pytest.raises(ConfigError, match="static_init"):
        static_config(tiny_model_dir, static_init="zeros").validate()


def test_a_broken_static_folder_is_one_error_naming_the_file(tiny_model_dir, tmp_path):
    encoder = StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random"))
    encoder.save(tmp_path / "static")
    weights = tmp_path / "static" / "0_StaticEmbedding" / "model.safetensors"
    save_file({"embedding.weight": torch.full((3, 8), float("nan"))}, str(weights))
    with pytest.raises(ModelLoadError, match=r"model\.safetensors: the token vectors hold NaN"):
        load_encoder(str(tmp_path / "static"))
    weights.write_bytes(b"broken")
    with pytest.raises(ModelLoadError, match=r"model\.safetensors: the token vectors cannot be read"):
        load_encoder(str(tmp_path / "static"))


@pytest.mark.parametrize(
    ("table", "match"),
    [
        (torch.zeros(200, 0), r"model\.safetensors: the token vector table is empty \(shape \[200, 0\]\)"),
        (torch.zeros(200, 8), r"model\.safetensors: every token vector is zero"),
        (torch.ones(200, 6), r"sentcl_static\.json: dimension 8, but .* holds vectors of 6"),
        (  # issue 70 item 5: [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4) set, every word zero
            torch.cat([torch.ones(5, 8), torch.zeros(195, 8)]),
            r"model\.safetensors: every token vector but the special tokens' \(5\) is zero",
        ),
    ],
    ids=["no dimensions", "all zeros", "another width", "special rows only"],
)
def test_a_static_table_that_cannot_be_its_models_is_refused(tiny_model_dir, tmp_path, table, match):
    """Issue 55: a [V, 0] table was a RuntimeError from embedding_bag; a table of another width than its
    record, or of zeros only, loaded (zero vectors)."""
    encoder = StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random"))
    encoder.save(tmp_path / "static")
    weights = tmp_path / "static" / "0_StaticEmbedding" / "model.safetensors"
    save_file({"embedding.weight": table.contiguous()}, str(weights))
    with pytest.raises(ModelLoadError, match=match) as refused:
        load_encoder(str(tmp_path / "static"))
    assert "\n" not in str(refused.value)


def test_a_static_folder_without_its_tokenizer_says_so(tiny_model_dir, tmp_path):
    """Issue 55: the message spoke of sentencepiece and tiktoken."""
    StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random")).save(tmp_path / "static")
    for file in (tmp_path / "static").rglob("tokenizer*.json"):
        file.unlink()
    with pytest.raises(
        ModelLoadError, match=r"static: no tokenizer files \(tokenizer\.json, .*beside the token"
    ):
        load_encoder(str(tmp_path / "static"))


def static_recipe(tiny_model_dir, train_file, output_dir, data_dir, **data):
    return recipe_from_dict(
        {
            "model": {"name_or_path": str(tiny_model_dir), "architecture": "static", "static_dim": 8},
            "data": {"train_file": str(train_file), "max_length": 16} | data,
            "objective": {
                "name": "distillation",
                "teacher": str(tiny_model_dir),
                "contrastive_weight": 0.0,
                "embedding_loss": "cosine",
                "listwise": "listnet",
            },
            "training": {
                "output_dir": str(output_dir),
                "batch_size": 4,
                "learning_rate": 1e-2,
                "max_steps": 6,
                "eval_steps": 3,
                "eval_at_start": True,
                "eval_data_dir": str(data_dir),
                "seed": 7,
            },
        }
    )


def test_a_static_student_trains_by_distillation_and_every_command_takes_it(
    tiny_model_dir, tmp_path, stsb_data_dir, monkeypatch, capsys
):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    wiki = tmp_path / "wiki.txt"
    wiki.write_text("\n".join(SENTENCES * 2) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"data\.n_views: .* a static model has no dropout"):
        train(static_recipe(tiny_model_dir, wiki, tmp_path / "refused", stsb_data_dir))
    assert not (tmp_path / "refused").exists()
    start = StaticEncoder.from_config(static_config(tiny_model_dir))
    result = train(static_recipe(tiny_model_dir, wiki, tmp_path / "run", stsb_data_dir, n_views=1))
    assert result.steps == 6
    trained = load_encoder(str(tmp_path / "run"))
    assert isinstance(trained, StaticEncoder) and trained.init == "distill"
    assert not torch.allclose(trained.embedding.weight, start.embedding.weight)  # the table trained
    meta = json.loads((tmp_path / "run" / "model" / "sentcl_static.json").read_text())
    assert meta["pooler"] == "static" and meta["dimension"] == 8
    texts = tmp_path / "texts.txt"
    texts.write_text("a man plays\nthe dog runs\n", encoding="utf-8")
    assert main(["encode", str(tmp_path / "run"), str(texts), "--out", str(tmp_path / "v.npy")]) == 0
    np.testing.assert_allclose(
        np.load(tmp_path / "v.npy"), trained.encode(["a man plays", "the dog runs"]), atol=1e-6
    )
    assert (
        main(["evaluate", str(tmp_path / "run"), "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)])
        == 0
    )
    assert "STS" in capsys.readouterr().out


def test_export_to_onnx_of_a_static_model_is_one_line(tiny_model_dir, tmp_path, capsys):
    StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random")).save(tmp_path / "static")
    assert main(["export", str(tmp_path / "static"), "--onnx", str(tmp_path / "onnx")]) != 0
    assert "a static model is a table lookup" in capsys.readouterr().err and not (tmp_path / "onnx").exists()


def test_a_static_folder_with_a_dense_after_it_is_refused_by_name(tiny_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense

    StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random")).save(tmp_path / "static")
    st = SentenceTransformer(str(tmp_path / "static"), device="cpu")
    SentenceTransformer(modules=[st[0], Dense(8, 4)], device="cpu").save(str(tmp_path / "dense"))
    with pytest.raises(ModelLoadError, match=r"modules\.json: a static model followed by .*Dense"):
        load_encoder(str(tmp_path / "dense"))


def test_a_model2vec_folder_with_normalize_loads_trains_and_saves_as_sentence_transformers_reads_it(
    tiny_model_dir, tmp_path
):
    """model2vec's own layout: the table as ``embeddings`` at the top, its config.json, and a Normalize
    module (``normalize: true``) whose folder model2vec never writes."""
    from safetensors.numpy import save_file as save_numpy
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    folder = tmp_path / "m2v"
    folder.mkdir()
    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    table = np.random.default_rng(0).normal(size=(tokenizer.get_vocab_size(), 8)).astype(np.float32)
    save_numpy({"embeddings": table}, str(folder / "model.safetensors"))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({"model_type": "model2vec", "normalize": True}))
    modules = [
        {"idx": 0, "name": "0", "path": ".", "type": "sentence_transformers.models.StaticEmbedding"},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    expected = SentenceTransformer(str(folder), device="cpu").encode(TEXTS)
    loaded = load_encoder(str(folder))
    assert loaded.normalize
    got = loaded.encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got[:2], axis=1), 1.0, atol=1e-6)
    batch = loaded.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")  # the training path too
    np.testing.assert_allclose(
        loaded.embed_tokens(batch.input_ids, batch.attention_mask).detach(), got[:2], atol=1e-6
    )
    loaded.save(tmp_path / "saved")
    again = SentenceTransformer(str(tmp_path / "saved"), device="cpu")
    assert [type(module).__name__ for module in again] == ["StaticEmbedding", "Normalize"]
    np.testing.assert_allclose(again.encode(TEXTS), expected, atol=1e-6)
    np.testing.assert_allclose(load_encoder(str(tmp_path / "saved")).encode(TEXTS), expected, atol=1e-6)


def test_a_static_model_on_the_hub_loads_by_its_id_checked_and_cached(
    tiny_model_dir, tmp_path, online_hub, monkeypatch
):
    from huggingface_hub import constants

    from sentcl.model.static import hub_static_folder
    from tests.hub_server import FakeHub, folder_files

    encoder = StaticEncoder.from_config(static_config(tiny_model_dir, static_init="random"))
    encoder.prompts = {"query": "query: "}
    encoder.save(tmp_path / "static")
    files = {f"someone/static-8/{name}": data for name, data in folder_files(tmp_path / "static").items()}
    files["someone/transformer/modules.json"] = json.dumps(
        [{"idx": 0, "path": "", "type": "x.Transformer"}]
    ).encode()
    weights = "someone/broken/0_StaticEmbedding/model.safetensors"
    files |= {name.replace("static-8", "broken"): data for name, data in files.items() if "static-8" in name}
    with FakeHub(files, corrupt={weights}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        loaded = load_encoder("someone/static-8")
        assert isinstance(loaded, StaticEncoder) and loaded.prompts == {"query": "query: ", "document": ""}
        np.testing.assert_array_equal(loaded.encode(TEXTS), encoder.encode(TEXTS))
        assert hub.downloads("model.safetensors") == 1
        # a repository whose first module is not a table, and one without a modules.json: not static
        assert hub_static_folder("someone/transformer") is None
        assert hub_static_folder("someone/nothing") is None
        # a damaged download is one line naming the file, and nothing damaged stays in the cache
        with pytest.raises(
            ModelLoadError, match=r"someone/broken/0_StaticEmbedding/model\.safetensors: sha256"
        ):
            load_encoder("someone/broken")
        broken = online_hub / "models--someone--broken"
        assert hashlib.sha256(files[weights]).hexdigest() not in {p.name for p in broken.glob("blobs/*")}
        assert not list(broken.glob("snapshots/*/0_StaticEmbedding/model.safetensors"))
    # offline, the cache serves it again
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    np.testing.assert_array_equal(load_encoder("someone/static-8").encode(TEXTS), encoder.encode(TEXTS))
