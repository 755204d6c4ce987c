"""sentcl's encode() contract against sentence-transformers' own: the same calls on both libraries, over a
matrix of inputs and options, on a tiny model saved by sentence-transformers with a Dense layer and
Normalize after its Pooling (so the model's own modules are exercised too)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base import modules as st_modules
from sentence_transformers.sentence_transformer.modules import Pooling

from sentcl.encode_contract import EncodeArgumentError
from sentcl.model import SentenceEncoder
from sentcl.model.backbone import ModelLoadError
from sentcl.model.encoder import ModelConfig
from sentcl.model.modules import Dense, Normalize

TEXTS = [
    "a man plays the ball in the park",
    "the dog runs",
    "a woman reads a book in the house with the cat",
    "two children eat food",
    "they walk",
]
LONG = " ".join(["the small dog jumps in the park"] * 40)  # beyond the model's 64 positions
PROMPTS = {"query": "query: ", "passage": "passage: "}
ROLE_PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def st_folder(tiny_model_dir, tmp_path_factory):
    """A sentence-transformers folder: Transformer → mean Pooling → Dense(32 → 16, tanh) → Normalize."""
    torch.manual_seed(3)
    transformer = st_modules.Transformer(str(tiny_model_dir), max_seq_length=64)
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    dense = st_modules.Dense(transformer.get_embedding_dimension(), 16)
    model = SentenceTransformer(
        modules=[transformer, pooling, dense, st_modules.Normalize()], prompts=PROMPTS
    )
    folder = tmp_path_factory.mktemp("st") / "model"
    model.save(str(folder))
    return folder


@pytest.fixture(scope="module")
def peer(st_folder):
    return SentenceTransformer(str(st_folder), device="cpu")


@pytest.fixture(scope="module")
def ours(st_folder):
    return SentenceEncoder.load(str(st_folder))


@pytest.fixture(scope="module")
def ours_onnx(ours, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from sentcl.model.onnx import OnnxEncoder, export_onnx

    return OnnxEncoder.load(export_onnx(ours, tmp_path_factory.mktemp("onnx") / "model"))


def test_the_models_own_modules_are_loaded(ours):
    kinds = [type(m) for m in ours.output_modules]
    assert kinds == [Dense, Normalize]
    assert ours.dimension == ours.get_sentence_embedding_dimension() == 16
    assert ours.prompts == {**PROMPTS, "document": ""}  # sentence-transformers saves the empty one


def _same(theirs, mine, atol: float = 1e-5) -> None:
    assert type(mine) is type(theirs), (type(mine), type(theirs))
    if isinstance(theirs, list):
        assert len(mine) == len(theirs)
        for a, b in zip(theirs, mine, strict=True):
            _same(a, b, atol)
        return
    if isinstance(theirs, torch.Tensor) and theirs.dtype == torch.bfloat16:  # numpy has no bfloat16
        assert mine.dtype == torch.bfloat16
        theirs, mine = theirs.float(), mine.float()
    a, b = np.asarray(theirs), np.asarray(mine)
    assert b.shape == a.shape and b.dtype == a.dtype, (b.shape, b.dtype, a.shape, a.dtype)
    if a.dtype.kind == "f":
        np.testing.assert_allclose(b, a, atol=atol)
    else:  # codes: a float a hair from a bucket's edge may land in the next bucket
        diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
        assert diff.max(initial=0) <= 1 and (diff == 0).mean() >= 0.99


INPUTS = {
    "one text": TEXTS[0],
    "a list": TEXTS,
    "a tuple": tuple(TEXTS),
    "an array": np.array(TEXTS),
    "empty": [],
    "long texts": [LONG, TEXTS[1]],
}
OPTIONS = {
    "defaults": {},
    "normalize_embeddings": {"normalize_embeddings": True},
    "convert_to_tensor": {"convert_to_tensor": True},
    "list of tensors": {"convert_to_numpy": False},
    "truncate_dim": {"truncate_dim": 8},
    "truncate and normalize": {"truncate_dim": 8, "normalize_embeddings": True},
    "prompt_name": {"prompt_name": "query"},
    "default document prompt": {"prompt_name": "document"},
    "prompt": {"prompt": "passage: "},
    "batch_size": {"batch_size": 2},
    **{precision: {"precision": precision} for precision in ("int8", "uint8", "binary", "ubinary")},
    "int8 as a tensor": {"precision": "int8", "convert_to_tensor": True},
}


def _calls():
    """Every (input, option) pair, less int8/uint8 of fewer than three texts: both libraries refuse ranges
    from one vector (tested below)."""
    for given in INPUTS:
        for option, kwargs in OPTIONS.items():
            if "int8" in kwargs.get("precision", "") and given in ("one text", "long texts"):
                continue
            yield given, option


@pytest.mark.parametrize("backend", ["torch", "onnx"])
@pytest.mark.parametrize("given, option", list(_calls()))
def test_encode_returns_what_sentence_transformers_returns(peer, ours, ours_onnx, backend, given, option):
    model = ours if backend == "torch" else ours_onnx
    _same(peer.encode(INPUTS[given], **OPTIONS[option]), model.encode(INPUTS[given], **OPTIONS[option]))


def test_int8_of_one_text_is_refused(ours):
    """int8 ranges from one vector are no ranges (sentence-transformers 6.2 refuses too; 6.0 did not)."""
    with pytest.raises(ValueError, match="at least two"):
        ours.encode(TEXTS[0], precision="int8")


def test_sentcl_keyword_names_stay(ours):
    np.testing.assert_array_equal(
        ours.encode(TEXTS, normalize=True, show_progress=False),
        ours.encode(TEXTS, normalize_embeddings=True, show_progress_bar=False),
    )
    with pytest.raises(EncodeArgumentError, match="disagree"):
        ours.encode(TEXTS, normalize=False, normalize_embeddings=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"nonsense": 1}, "unknown keyword"),
        ({"output_value": "token_embeddings"}, "sentence embeddings only"),
        ({"precision": "float16"}, "not one of"),
        ({"truncate_dim": 0}, "positive integer"),
        ({"batch_size": 0}, "positive integer"),
    ],
)
def test_what_sentcl_cannot_honour_is_one_clear_error(ours, kwargs, match):
    with pytest.raises(EncodeArgumentError, match=match):
        ours.encode(TEXTS, **kwargs)


def test_a_non_text_item_is_named(ours):
    with pytest.raises(EncodeArgumentError, match="item 1 is int"):
        ours.encode(["a text", 3])


def test_an_unknown_prompt_name_is_refused_by_both(peer, ours):
    with pytest.raises(ValueError):
        peer.encode(TEXTS, prompt_name="nope")
    with pytest.raises(ValueError, match="no prompt 'nope'"):
        ours.encode(TEXTS, prompt_name="nope")


@pytest.mark.parametrize("name", ["cosine", "dot", "euclidean", "manhattan"])
def test_similarity_takes_embeddings_as_sentence_transformers_does(peer, ours, name):
    peer.similarity_fn_name, ours.similarity_fn_name = name, name
    try:
        a, b = peer.encode(TEXTS[:3]), peer.encode(TEXTS[2:])
        for x, y in ((a, b), (a[0], b), (torch.from_numpy(a), list(torch.from_numpy(b)))):
            # a list of tensors as sentence-transformers 6.2 stacks it (6.0 could not take one)
            theirs = peer.similarity(x, torch.stack(y) if isinstance(y, list) else y)
            mine = ours.similarity(x, y)
            assert isinstance(mine, torch.Tensor) and mine.shape == theirs.shape
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            ours.similarity_pairwise(a, b), peer.similarity_pairwise(a, b), atol=1e-5, rtol=1e-5
        )
        # sentcl also takes texts, encoded first
        torch.testing.assert_close(
            ours.similarity(TEXTS[:3], TEXTS[2:]), peer.similarity(a, b), atol=1e-5, rtol=1e-5
        )
    finally:
        peer.similarity_fn_name = ours.similarity_fn_name = "cosine"


def test_the_companions_sentence_transformers_users_call(peer, ours):
    assert ours.get_sentence_embedding_dimension() == peer.get_embedding_dimension()
    assert ours.max_seq_length == peer.max_seq_length == 64
    tokens = ours.tokenize(TEXTS[:2])
    theirs = peer.preprocess(TEXTS[:2])
    torch.testing.assert_close(tokens["input_ids"], theirs["input_ids"])
    torch.testing.assert_close(tokens["attention_mask"], theirs["attention_mask"])
    with pytest.raises(EncodeArgumentError):
        ours.similarity_fn_name = "maxsim"


def test_a_saved_folder_keeps_the_modules_and_loads_in_sentence_transformers(ours, tmp_path):
    folder = ours.save(tmp_path / "saved")
    rows = json.loads((folder / "modules.json").read_text())
    assert [row["type"].rsplit(".", 1)[1] for row in rows] == ["Transformer", "Pooling", "Dense", "Normalize"]
    reloaded = SentenceTransformer(str(folder), device="cpu")
    np.testing.assert_allclose(reloaded.encode(TEXTS), ours.encode(TEXTS), atol=1e-6)
    again = SentenceEncoder.load(str(folder))
    np.testing.assert_array_equal(again.encode(TEXTS), ours.encode(TEXTS))
    assert reloaded.prompts["passage"] == "passage: "


def test_training_inherits_the_modules_unless_the_recipe_says_otherwise(st_folder):
    started = SentenceEncoder.from_config(ModelConfig(name_or_path=str(st_folder), pooler="avg"))
    assert [type(m) for m in started.output_modules] == [Dense, Normalize]
    dense = started.output_modules[0]
    assert all(p.requires_grad for p in dense.parameters())  # trained with the encoder
    ids = torch.tensor([[2, 10, 11, 3]])
    mask = torch.ones_like(ids)
    trained_path = started.train().embed_tokens(ids, mask)
    assert trained_path.shape == (1, 16) and not torch.allclose(trained_path.norm(dim=-1), torch.ones(1))
    plain = SentenceEncoder.from_config(ModelConfig(name_or_path=str(st_folder), keep_modules=False))
    assert len(plain.output_modules) == 0 and plain.dimension == 32
    unnormalised = SentenceEncoder.from_config(ModelConfig(name_or_path=str(st_folder), normalize=False))
    assert [type(m) for m in unnormalised.output_modules] == [Dense]


def test_a_module_sentcl_does_not_run_is_refused(st_folder, tmp_path):
    import shutil

    folder = tmp_path / "other"
    shutil.copytree(st_folder, folder)
    rows = json.loads((folder / "modules.json").read_text())
    rows.insert(
        2, {"idx": 9, "name": "9", "path": "9_LayerNorm", "type": "sentence_transformers.models.LayerNorm"}
    )
    (folder / "modules.json").write_text(json.dumps(rows))
    with pytest.raises(ModelLoadError, match=r"modules\.json: module 2 .*LayerNorm.* refused"):
        SentenceEncoder.load(str(folder))


def test_mteb_encoder_takes_texts_as_sentence_transformers_does(st_folder, peer):
    pytest.importorskip("mteb")
    from sentcl.integrations.mteb import MTEBEncoder

    encoder = MTEBEncoder(str(st_folder))
    _same(peer.encode(TEXTS[0]), encoder.encode(TEXTS[0]))
    _same(peer.encode(TEXTS, normalize_embeddings=True), encoder.encode(TEXTS, normalize_embeddings=True))


@pytest.mark.parametrize("precision", ["int8", "ubinary"])
def test_sentcl_encode_writes_the_codes_sentence_transformers_gives(st_folder, peer, tmp_path, precision):
    from sentcl.cli.main import main

    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "codes.npy"
    argv = ["encode", str(st_folder), str(tmp_path / "texts.txt"), "--out", str(out)]
    assert main([*argv, "--precision", precision, "--dtype", "fp32"]) == 0
    _same(peer.encode(TEXTS, precision=precision), np.load(out))


# ------------------------------------------------------------ every Pooling mode sentence-transformers has
MODES = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]


@pytest.fixture(scope="module")
def mode_folders(tiny_model_dir, tmp_path_factory):
    """One folder saved by sentence-transformers per (Pooling mode, include_prompt)."""
    folders = {}
    for mode in MODES:
        for include_prompt in (True, False):
            transformer = st_modules.Transformer(str(tiny_model_dir), max_seq_length=64)
            pooling = Pooling(transformer.get_embedding_dimension(), mode, include_prompt=include_prompt)
            model = SentenceTransformer(modules=[transformer, pooling], prompts=ROLE_PROMPTS)
            folder = tmp_path_factory.mktemp("modes") / f"{mode}-{include_prompt}"
            model.save(str(folder))
            folders[mode, include_prompt] = folder
    return folders


@pytest.mark.parametrize("include_prompt", [True, False], ids=["with-prompt", "without-prompt"])
@pytest.mark.parametrize("mode", MODES)
def test_every_pooling_mode_encodes_as_sentence_transformers(mode_folders, tmp_path, mode, include_prompt):
    """Issue 55: max, weightedmean, lasttoken and mean_sqrt_len_tokens loaded as mean pooling, and
    include_prompt false was ignored; each now gives sentence-transformers' vectors, in torch and ONNX."""
    pytest.importorskip("onnxruntime")
    from sentcl.model.onnx import OnnxEncoder, export_onnx

    folder = mode_folders[mode, include_prompt]
    peer = SentenceTransformer(str(folder), device="cpu")
    ours = SentenceEncoder.load(str(folder))
    assert ours.include_prompt is include_prompt
    onnx = OnnxEncoder.load(export_onnx(ours, tmp_path / "onnx"))
    texts = [*TEXTS, LONG]
    for kwargs in ({}, {"prompt_name": "query"}, {"prompt": "a much longer passage prompt: "}):
        theirs = peer.encode(texts, **kwargs)
        np.testing.assert_allclose(ours.encode(texts, **kwargs), theirs, atol=1e-6, rtol=0)
        np.testing.assert_allclose(onnx.encode(texts, **kwargs), theirs, atol=1e-5, rtol=0)
    if not include_prompt and mode != "lasttoken":  # the prompt left out (the last token is never one)
        with_prompt = SentenceEncoder.load(str(mode_folders[mode, True]))
        assert not np.allclose(
            with_prompt.encode(texts, prompt_name="query"), ours.encode(texts, prompt_name="query")
        )
    saved = ours.save(tmp_path / "saved")  # and sentcl's folder says the same to sentence-transformers
    np.testing.assert_allclose(
        SentenceTransformer(str(saved), device="cpu").encode(texts, prompt_name="query"),
        SentenceEncoder.load(str(saved)).encode(texts, prompt_name="query"),
        atol=1e-6,
        rtol=0,
    )


@pytest.mark.parametrize("include_prompt", [True, False], ids=["with-prompt", "without-prompt"])
@pytest.mark.parametrize("mode", MODES)
def test_every_role_path_encodes_as_encode_query_and_encode_document(
    mode_folders, tmp_path, mode, include_prompt
):
    """Issue 70 item 1: the role paths glued the prompt onto the text, so a Pooling with include_prompt false
    pooled over it (max |diff| 0.18 mean, 0.76 cls). encode_query / encode_document, what an index, a search,
    the server and retrieval evaluation encode with (for_role over Batched), and the ONNX export each give
    sentence-transformers' encode_query / encode_document."""
    pytest.importorskip("onnxruntime")
    from sentcl.embedder import DOCUMENT, QUERY, Batched, for_role, unit_rows
    from sentcl.model.onnx import OnnxEncoder, export_onnx
    from sentcl.search import SentenceIndex
    from sentcl.serving.server import create_app

    folder = mode_folders[mode, include_prompt]
    peer = SentenceTransformer(str(folder), device="cpu")
    ours = SentenceEncoder.load(str(folder))
    onnx = OnnxEncoder.load(export_onnx(ours, tmp_path / "onnx"))
    texts = [*TEXTS, LONG]
    theirs = {QUERY: peer.encode_query(texts), DOCUMENT: peer.encode_document(texts)}
    for role, method in ((QUERY, "encode_query"), (DOCUMENT, "encode_document")):
        for encoder, atol in ((ours, 1e-6), (onnx, 1e-5)):
            np.testing.assert_allclose(getattr(encoder, method)(texts), theirs[role], atol=atol, rtol=0)
            np.testing.assert_allclose(
                for_role(Batched(encoder, 4), role).encode(texts), theirs[role], atol=atol, rtol=0
            )
    # a call's own prompt wins over the role's, as in sentence-transformers
    np.testing.assert_allclose(
        ours.encode_query(texts, prompt="other: "), peer.encode_query(texts, prompt="other: "), atol=1e-6
    )
    expected = unit_rows(theirs[QUERY]) @ unit_rows(theirs[DOCUMENT]).T
    index = SentenceIndex.of_corpus(Batched(ours, 4), texts, kind="flat")
    hits = index.query(Batched(ours, 4), texts, top_k=len(texts))
    for row, found in zip(expected, hits, strict=True):
        np.testing.assert_allclose([h.score for h in found], np.sort(row)[::-1], atol=1e-5)
    service = create_app(Batched(ours, 4), model_name="m", dimension=ours.dimension).state.service
    np.testing.assert_allclose(
        service.embed(texts, prompt=ours.prompts[QUERY]), unit_rows(theirs[QUERY]), atol=1e-6
    )
    if not include_prompt and mode != "lasttoken":  # the paths differ from a glued prompt where it matters
        glued = ours.encode([ROLE_PROMPTS[QUERY] + t for t in texts])
        assert np.abs(glued - theirs[QUERY]).max() > 1e-3


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"pooling_mode": ["cls", "mean"]}, r"pooling_mode cls\+mean concatenates several poolings"),
        (
            {"pooling_mode_cls_token": True, "pooling_mode_max_tokens": True},
            r"pooling_mode cls\+max concatenates",
        ),
        ({"pooling_mode": "median"}, "pooling_mode 'median' is not one of"),
        ({"pooling_mode": "mean", "pooling_temperature": 2}, "field 'pooling_temperature' is not one sentcl"),
        ({"pooling_mode": "mean", "include_prompt": "no"}, "include_prompt 'no' is not true or false"),
    ],
)
def test_a_pooling_sentcl_cannot_compute_is_refused_in_one_line(st_folder, tmp_path, config, match):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(st_folder, folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32, **config}))
    with pytest.raises(ModelLoadError, match=r"1_Pooling/config\.json: " + match) as refused:
        SentenceEncoder.load(str(folder))
    assert "\n" not in str(refused.value)


# ------------------------------------------------------------------- the rest of the drop-in surface
def test_load_takes_what_sentence_transformers_constructor_takes(st_folder):
    """Issue 55: these keywords were a TypeError."""
    options = {
        "device": "cpu",
        "truncate_dim": 8,
        "prompts": {"search": "search: "},
        "default_prompt_name": "search",
        "similarity_fn_name": "dot",
    }
    theirs = SentenceTransformer(str(st_folder), **options)
    ours = SentenceEncoder.load(str(st_folder), **options)
    assert ours.prompts == theirs.prompts and ours.default_prompt_name == theirs.default_prompt_name
    assert ours.similarity_fn_name == theirs.similarity_fn_name == "dot"
    assert ours.get_sentence_embedding_dimension() == theirs.get_sentence_embedding_dimension() == 8
    _same(theirs.encode(TEXTS), ours.encode(TEXTS))  # the default prompt, then the truncation
    _same(theirs.encode(TEXTS, prompt=""), ours.encode(TEXTS, prompt=""))
    _same(theirs.similarity(theirs.encode(TEXTS), theirs.encode(TEXTS)), ours.similarity(TEXTS, TEXTS), 1e-4)
    with pytest.raises(EncodeArgumentError, match="default_prompt_name 'nope' is not one of"):
        SentenceEncoder.load(str(st_folder), default_prompt_name="nope")


def test_a_model_without_prompts_has_the_two_empty_ones(tiny_model_dir):
    ours, theirs = SentenceEncoder.load(str(tiny_model_dir)), SentenceTransformer(str(tiny_model_dir))
    assert ours.prompts == theirs.prompts == {"query": "", "document": ""}


@pytest.mark.parametrize("cast", ["half", "bfloat16"])
def test_half_and_bfloat16_give_vectors_in_that_dtype(st_folder, cast):
    theirs = getattr(SentenceTransformer(str(st_folder), device="cpu"), cast)()
    ours = getattr(SentenceEncoder.load(str(st_folder)), cast)()
    for kwargs in ({}, {"convert_to_tensor": True}, {"convert_to_numpy": False}):
        _same(theirs.encode(TEXTS, **kwargs), ours.encode(TEXTS, **kwargs), atol=2e-2)


def test_multi_process_encoding_as_sentence_transformers_spells_it(ours):
    single = ours.encode(TEXTS * 3, batch_size=2)
    np.testing.assert_allclose(ours.encode(TEXTS * 3, batch_size=2, device=["cpu", "cpu"]), single, atol=1e-6)
    pool = ours.start_multi_process_pool(["cpu", "cpu"])
    try:
        pooled = ours.encode(TEXTS * 3, pool=pool, batch_size=2, chunk_size=4, normalize_embeddings=True)
        query = ours.encode(TEXTS, pool=pool, prompt_name="query")
    finally:
        ours.stop_multi_process_pool(pool)
    np.testing.assert_allclose(pooled, ours.encode(TEXTS * 3, normalize_embeddings=True), atol=1e-6)
    np.testing.assert_allclose(query, ours.encode(TEXTS, prompt_name="query"), atol=1e-6)
