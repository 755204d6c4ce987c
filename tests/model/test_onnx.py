"""The ONNX path: the exported embedding path equals the PyTorch one, int8 stays close, and every command
that loads a model takes the export."""

import json

import numpy as np
import pytest
import torch

from sentcl.cli.main import main
from sentcl.model import ModelConfig, ModelLoadError, SentenceEncoder, load_encoder
from sentcl.model.onnx import ONNX_FILE, OnnxEncoder, export_onnx

TEXTS = ["a man plays the guitar", "the dog runs on the street", "a woman reads a book", "red"]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("pooler", ["avg", "cls", "avg_first_last", "ditto-1-0"])
def test_fp32_export_equals_the_encoder_and_int8_stays_close(tmp_path, tiny_model_dir, pooler):
    torch.manual_seed(0)
    encoder = SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler=pooler)).eval()
    expected = encoder.encode(TEXTS)
    fp32 = OnnxEncoder.load(export_onnx(encoder, tmp_path / "fp32"))
    np.testing.assert_allclose(fp32.encode(TEXTS, batch_size=3), expected, atol=1e-5)
    fp32.max_batch_tokens = 12  # batches bounded by tokens: other batches, the same vectors
    np.testing.assert_allclose(fp32.encode(TEXTS, batch_size=3), expected, atol=1e-5)
    assert (fp32.pooler, fp32.dimension, fp32.precision) == (pooler, encoder.dimension, "fp32")
    assert encoder.training is False and encoder.device.type == "cpu"  # the export leaves it as it was
    int8 = OnnxEncoder.load(export_onnx(encoder, tmp_path / "int8", int8=True))
    got = int8.encode(TEXTS)
    assert int8.precision == "int8" and not np.allclose(got, expected, atol=1e-5)  # int8 products
    assert cosines(got, expected).min() > 0.98
    assert int8_matrices(tmp_path / "int8") == matmul_weights(tmp_path / "fp32") > 0  # every Linear in int8


def test_load_encoder_picks_the_export_and_says_what_is_missing(tmp_path, tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir), pooler="avg")
    export_onnx(encoder, tmp_path / "onnx")
    assert isinstance(load_encoder(str(tmp_path / "onnx")), OnnxEncoder)
    assert isinstance(load_encoder(str(tiny_model_dir)), SentenceEncoder)
    with pytest.raises(ModelLoadError, match="keeps the pooler"):
        load_encoder(str(tmp_path / "onnx"), pooler="cls")
    (tmp_path / "onnx" / "sentcl_onnx.json").unlink()
    with pytest.raises(ModelLoadError, match=r"sentcl_onnx\.json"):
        OnnxEncoder.load(tmp_path / "onnx")


def test_cli_exports_and_the_export_encodes_like_the_model(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    assert main(["export", str(tiny_model_dir), "--onnx", str(tmp_path / "onnx"), "--pooler", "avg"]) == 0
    assert "largest difference" in capsys.readouterr().out
    assert main(["encode", str(tmp_path / "onnx"), str(corpus), "--out", str(tmp_path / "a.npy")]) == 0
    torch_fp32 = [
        "encode",
        str(tiny_model_dir),
        str(corpus),
        "--out",
        str(tmp_path / "b.npy"),
        "--dtype",
        "fp32",
    ]
    assert main(torch_fp32) == 0
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"), atol=1e-5)
    assert (
        main(
            [
                "encode",
                str(tmp_path / "onnx"),
                str(corpus),
                "--out",
                str(tmp_path / "c.npy"),
                "--dtype",
                "bf16",
            ]
        )
        == 2
    )
    assert "ONNX export in fp32" in capsys.readouterr().err
    assert json.loads((tmp_path / "onnx" / "sentcl_onnx.json").read_text())["pooler"] == "avg"


def _export(tmp_path, tiny_model_dir, name="onnx"):
    return export_onnx(SentenceEncoder.load(str(tiny_model_dir), pooler="avg"), tmp_path / name)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            "wrong dimension",
            r"the graph gives vectors of shape \[32\], but sentcl_onnx.json says 16 dimensions",
        ),
        ("no tokenizer", r"no tokenizer files beside model.onnx"),
        ("corrupt graph", r"the ONNX export cannot be loaded \(.*INVALID_PROTOBUF"),
        ("corrupt meta", r"sentcl_onnx.json:1: invalid JSON"),
        ("meta without dimension", r"sentcl_onnx.json: dimension is None, not a valid int"),
    ],
)
def test_a_broken_onnx_folder_is_refused_by_name_in_every_command(
    fault, message, tmp_path, tiny_model_dir, capsys, monkeypatch
):
    import sentcl.serving.server as server

    folder = _export(tmp_path, tiny_model_dir)
    meta = json.loads((folder / "sentcl_onnx.json").read_text())
    if fault == "wrong dimension":
        (folder / "sentcl_onnx.json").write_text(json.dumps(meta | {"dimension": 16}))
    elif fault == "no tokenizer":
        for name in ("tokenizer.json", "vocab.txt"):
            (folder / name).unlink(missing_ok=True)
    elif fault == "corrupt graph":
        (folder / ONNX_FILE).write_bytes((folder / ONNX_FILE).read_bytes()[:500])
    elif fault == "corrupt meta":
        (folder / "sentcl_onnx.json").write_text("{")
    else:
        (folder / "sentcl_onnx.json").write_text(
            json.dumps({k: v for k, v in meta.items() if k != "dimension"})
        )
    with pytest.raises(ModelLoadError, match=message):
        OnnxEncoder.load(folder)
    monkeypatch.setattr(server, "serve", lambda *a, **k: pytest.fail("a broken export was served"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    for argv in (
        ["serve", str(folder)],
        ["encode", str(folder), str(corpus), "--out", str(tmp_path / "e.npy")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"sentcl {argv[0]}: error:")
    assert not (tmp_path / "e.npy").exists()


def test_an_export_that_gives_nan_is_refused(tmp_path, tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir), pooler="avg")
    with torch.no_grad():  # weights broken after loading (the load itself refuses NaN weights)
        encoder.backbone.encoder.layer[0].output.dense.weight[0, 0] = float("nan")
    folder = export_onnx(encoder, tmp_path / "onnx")
    with pytest.raises(ModelLoadError, match="the graph gives NaN or infinite values"):
        OnnxEncoder.load(folder)


def matmul_weights(folder) -> int:
    """How many numbers the fp32 graph's MatMul and Gemm weights hold."""
    import onnx

    graph = onnx.load(str(folder / ONNX_FILE)).graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    used = {
        node.input[1]
        for node in graph.node
        if node.op_type in ("MatMul", "Gemm") and node.input[1] in weights
    }
    return int(sum(np.prod(weights[name].dims) for name in used))


def int8_matrices(folder) -> int:
    """How many numbers the int8 graph's int8 matrices hold (its per-channel zero points are vectors)."""
    import onnx

    graph = onnx.load(str(folder / ONNX_FILE)).graph
    int8 = [t for t in graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2]
    return int(sum(np.prod(tensor.dims) for tensor in int8))
