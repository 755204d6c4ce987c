"""Prompts saved with a model: applied by encode / encode_query / encode_document, kept by save, load, the
ONNX export and a recipe, and read by sentence-transformers from the export as its own prompts."""

import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from sentcl.config import ConfigError
from sentcl.embedder import PromptError
from sentcl.model import ModelConfig, ModelLoadError, SentenceEncoder
from tests.conftest import SENTENCES

PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def prompted(tiny_model_dir, tmp_path_factory):
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), "avg", prompts=PROMPTS))
    return encoder.save(tmp_path_factory.mktemp("prompted") / "model")


def test_prompts_go_before_every_sentence(prompted):
    encoder = SentenceEncoder.load(str(prompted))
    assert encoder.prompts == PROMPTS
    texts = SENTENCES[:3]
    with_prompt = encoder.encode(["query: " + t for t in texts])
    np.testing.assert_array_equal(encoder.encode_query(texts), with_prompt)
    np.testing.assert_array_equal(encoder.encode(texts, prompt_name="query"), with_prompt)
    np.testing.assert_array_equal(encoder.encode(texts, prompt="query: "), with_prompt)
    np.testing.assert_array_equal(
        encoder.encode_document(texts), encoder.encode(["passage: " + t for t in texts])
    )
    assert not np.allclose(encoder.encode(texts), with_prompt)  # plain encode adds nothing
    with pytest.raises(PromptError, match=r"no prompt 'doc' \(its prompts: document, query\)"):
        encoder.encode(texts, prompt_name="doc")


def test_a_model_without_prompts_encodes_queries_as_they_are(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir))
    assert encoder.prompts == {"query": "", "document": ""}  # as sentence-transformers has them
    np.testing.assert_array_equal(encoder.encode_query(SENTENCES[:2]), encoder.encode(SENTENCES[:2]))


def test_sentence_transformers_loads_the_same_prompts(prompted):
    ours = SentenceEncoder.load(str(prompted))
    theirs = SentenceTransformer(str(prompted), device="cpu")
    assert theirs.prompts == PROMPTS
    texts = SENTENCES[:4]
    np.testing.assert_allclose(theirs.encode_query(texts), ours.encode_query(texts), atol=1e-5)
    np.testing.assert_allclose(theirs.encode_document(texts), ours.encode_document(texts), atol=1e-5)


def test_a_sentence_transformers_folder_brings_its_prompts(prompted, tmp_path):
    import shutil

    folder = tmp_path / "st"
    shutil.copytree(prompted, folder)
    (folder / "sentcl.json").unlink()
    assert SentenceEncoder.load(str(folder)).prompts == PROMPTS


@pytest.mark.parametrize(
    ("file", "value", "message"),
    [
        ("sentcl.json", ["query: "], r"sentcl\.json: prompts are a mapping of name → text, not list"),
        ("sentcl.json", {"query": 3}, r"sentcl\.json: prompt 'query': a non-empty name and a text"),
        ("config_sentence_transformers.json", {"": "x"}, r"config_sentence_transformers\.json: prompt ''"),
    ],
)
def test_malformed_saved_prompts_are_refused_naming_the_file(prompted, tmp_path, file, value, message):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(prompted, folder)
    if file != "sentcl.json":
        (folder / "sentcl.json").unlink()
    data = json.loads((folder / file).read_text())
    data["prompts"] = value
    (folder / file).write_text(json.dumps(data))
    with pytest.raises(ModelLoadError, match=message):
        SentenceEncoder.load(str(folder))


def test_recipe_prompts_are_checked():
    with pytest.raises(ConfigError, match=r"prompts: prompt 'query': a non-empty name and a text"):
        ModelConfig("m", prompts={"query": 1}).validate()


def test_the_onnx_export_keeps_the_prompts(prompted, tmp_path):
    from sentcl.model.onnx import OnnxEncoder, export_onnx

    encoder = SentenceEncoder.load(str(prompted))
    exported = OnnxEncoder.load(export_onnx(encoder, tmp_path / "onnx"))
    assert exported.prompts == PROMPTS
    np.testing.assert_allclose(
        exported.encode_query(SENTENCES[:2]), encoder.encode_query(SENTENCES[:2]), atol=1e-4
    )
