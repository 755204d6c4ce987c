"""A broken model folder is refused with one line naming what is wrong, in every
command that loads one; it never loads silently on random, missing or NaN weights. A model whose files are
complete but carry more than the backbone (a masked-LM head, no pooler layer) still loads."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from sentcl.cli.main import main
from sentcl.model import ModelConfig, ModelLoadError, SentenceEncoder
from tests.conftest import SENTENCES

WEIGHTS = "model.safetensors"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _rewrite_weights(folder, change):
    weights = {k: v.clone() for k, v in load_file(str(folder / WEIGHTS)).items()}
    save_file(change(weights), str(folder / WEIGHTS))


def _nan(weights):
    weights["encoder.layer.0.attention.self.query.weight"][0, 0] = float("nan")
    return weights


def _extra_layer(weights):
    weights["encoder.layer.2.output.dense.weight"] = weights["encoder.layer.1.output.dense.weight"].clone()
    return weights


def _reshaped(weights):
    weights["encoder.layer.0.output.dense.weight"] = torch.zeros(32, 7)
    return weights


def _no_tokenizer(folder):
    for name in TOKENIZER_FILES:
        (folder / name).unlink(missing_ok=True)


def _sentcl_folder(folder, pooler="cls"):
    """A folder sentcl saved, with the MLP head: where sentcl.json and sentcl_head.safetensors live."""
    encoder = SentenceEncoder.from_config(ModelConfig(str(folder), pooler=pooler))
    shutil.rmtree(folder)
    encoder.save(folder)


def _edit_json(path, **changes):
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


FAULTS = {  # name: (how the folder is broken, what the one line says)
    "renamed weights": (
        lambda f: _rewrite_weights(f, lambda w: {"foo." + k: v for k, v in w.items()}),
        r"weights the model needs are missing from its files \(embeddings\.",
    ),
    "layer 1 missing": (
        lambda f: _rewrite_weights(f, lambda w: {k: v for k, v in w.items() if "layer.1." not in k}),
        r"16 weights the model needs are missing from its files \(encoder\.layer\.1\.",
    ),
    "no tokenizer": (_no_tokenizer, r"no tokenizer files"),
    "corrupt safetensors": (
        lambda f: (f / WEIGHTS).write_bytes(b"\x00" * 64),
        r"its weights cannot be read \(Error while deserializing header",
    ),
    "corrupt config.json": (
        lambda f: (f / "config.json").write_text("{not json"),
        r"config\.json: not a config this model can load \(.*not a valid JSON",
    ),
    "a config field of the wrong type": (
        lambda f: _edit_json(f / "config.json", hidden_size="big"),
        # transformers' strict config classes refuse it as it loads; older ones load it and sentcl does
        r"config\.json: (not a config this model can load \(Validation error for field 'hidden_size'.*got str"
        r"|hidden_size is 'big', not a positive integer)",
    ),
    "an unknown model type": (
        lambda f: _edit_json(f / "config.json", model_type="nonsense"),
        r"config\.json: not a config this model can load \(.*model type `nonsense`",
    ),
    "no model type": (
        lambda f: (f / "config.json").write_text(json.dumps({"hidden_size": 32})),
        r"config\.json: not a config this model can load \(Unrecognized model",
    ),
    "a size below 1": (
        lambda f: _edit_json(f / "config.json", num_attention_heads=-1),
        r"config\.json: num_attention_heads is -1, not a positive integer",
    ),
    "heads that do not divide the width": (
        lambda f: _edit_json(f / "config.json", num_attention_heads=3),
        r"config\.json: hidden_size 32 is not a multiple of num_attention_heads 3",
    ),
    "NaN weights": (
        lambda f: _rewrite_weights(f, _nan),
        r"encoder\.layer\.0\.attention\.self\.query\.weight holds NaN or infinite values",
    ),
    "a layer the config lacks": (
        lambda f: _rewrite_weights(f, _extra_layer),
        r"weights of the backbone that its config.json has no place for \(encoder\.layer\.2\.",
    ),
    "a weight of another shape": (
        lambda f: _rewrite_weights(f, _reshaped),
        r"another shape than its config.json gives \(encoder\.layer\.0\.output\.dense\.weight "
        r"\(file \[32, 7\]",
    ),
    "corrupt sentcl.json": (
        lambda f: (_sentcl_folder(f), (f / "sentcl.json").write_text('{"pooler": ')),
        r"sentcl\.json:1: invalid JSON",
    ),
    "sentcl.json not an object": (
        lambda f: (_sentcl_folder(f), (f / "sentcl.json").write_text("[1, 2]")),
        r"sentcl\.json: expected a JSON object, found list",
    ),
    "a length beyond its positions": (
        lambda f: (_sentcl_folder(f), _edit_json(f / "sentcl.json", max_seq_length=200)),
        r"max_seq_length 200 is beyond the model's 64 positions",
    ),
    "corrupt MLP head": (
        lambda f: (_sentcl_folder(f), (f / "sentcl_head.safetensors").write_bytes(b"\x01" * 40)),
        r"sentcl_head\.safetensors: the MLP head cannot be read",
    ),
}


@pytest.fixture
def broken(tiny_model_dir, tmp_path):
    def make(fault: str):
        folder = tmp_path / "broken"
        shutil.copytree(tiny_model_dir, folder)
        FAULTS[fault][0](folder)
        return folder

    return make


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_broken_model_is_refused_by_name(fault, broken):
    with pytest.raises(ModelLoadError, match=FAULTS[fault][1]) as error:
        SentenceEncoder.load(str(broken(fault)))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("command", ["evaluate", "encode", "index", "serve", "export"])
@pytest.mark.parametrize(
    "fault",
    ["renamed weights", "layer 1 missing", "no tokenizer", "NaN weights", "a config field of the wrong type"],
)
def test_every_command_refuses_a_broken_model_with_one_line(
    command, fault, broken, stsb_data_dir, tmp_path, capsys, monkeypatch
):
    import sentcl.serving.server as server

    monkeypatch.setattr(server, "serve", lambda *a, **k: pytest.fail("a broken model was served"))
    model, corpus = str(broken(fault)), tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    argv = {
        "evaluate": ["evaluate", model, "--tasks", "stsb-dev", "--data-dir", str(stsb_data_dir)],
        "encode": ["encode", model, str(corpus), "--out", str(tmp_path / "e.npy")],
        "index": ["index", model, str(corpus), "--out", str(tmp_path / "idx")],
        "serve": ["serve", model, "--port", "0"],
        "export": ["export", model, "--onnx", str(tmp_path / "onnx")],
    }[command]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()  # progress bars aside, one line: the error
    assert [line for line in lines if "error" in line.lower()] == lines[
        -1:
    ] and "Traceback" not in captured.err
    assert lines[-1].startswith(
        (f"sentcl {command}: error: {model}: ", f"sentcl {command}: error: {model}/config.json: ")
    )
    assert "Spearman" not in captured.out
    assert not any((tmp_path / name).exists() for name in ("e.npy", "idx", "onnx"))


def test_a_masked_lm_checkpoint_without_pooler_layer_still_loads(tiny_model_dir, tmp_path):
    """What sentcl pretrain saves: the backbone under ``bert.``, a ``cls.`` head, no pooler layer. The head
    is not the backbone's and no sentcl pooler reads the pooler layer: both are expected, not refused."""
    config = BertConfig.from_pretrained(str(tiny_model_dir))
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(str(tmp_path / "mlm"))
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(str(tmp_path / "mlm"))
    assert any(k.startswith("cls.") for k in load_file(str(tmp_path / "mlm" / WEIGHTS)))
    vectors = SentenceEncoder.load(str(tmp_path / "mlm")).encode(SENTENCES[:3])
    assert vectors.shape == (3, 32) and np.isfinite(vectors).all()


def test_a_tokenizer_larger_than_the_embedding_table_is_refused(tiny_model_dir, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_model_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_tokens([f"newword{i}" for i in range(5)])
    tokenizer.save_pretrained(str(folder))
    with pytest.raises(ModelLoadError, match=r"the tokenizer has \d+ tokens but the model embeds only \d+"):
        SentenceEncoder.load(str(folder))


def test_roberta_positions_start_after_the_padding_index():
    from transformers import RobertaConfig

    from sentcl.model.backbone import position_limit

    assert position_limit(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == 512
    assert position_limit(BertConfig(max_position_embeddings=512)) == 512


def test_a_missing_folder_beside_its_parent_is_no_such_folder(tmp_path, monkeypatch):
    """Issue 55: ``runs/nope`` (with a runs/ folder here) was asked of the hub, and the error was a connection
    error."""
    from sentcl.model.backbone import resolve_model_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(
        ModelLoadError, match=r"^runs/nope: no such folder \(and not a hub id: runs/ is a folder"
    ):
        resolve_model_path("runs/nope")
    with pytest.raises(ModelLoadError, match=r"^a/b/c: no such folder, and not a hub id"):
        resolve_model_path("a/b/c")
    assert resolve_model_path("owner/name") == "owner/name"  # a hub id stays one
