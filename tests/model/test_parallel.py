"""Encoding over several worker processes (two CPU processes here; GPUs where a machine has them): the same
vectors in the same order as one process; devices this machine lacks are one error naming --device."""

import numpy as np
import pytest
import torch

from sentcl.cli.main import main
from sentcl.config import ConfigError
from sentcl.hardware import resolve_device
from sentcl.model import SentenceEncoder
from sentcl.model.inference import for_inference
from sentcl.model.parallel import encode_on_devices
from tests.conftest import SENTENCES


def test_two_cpu_processes_give_one_process_vectors_in_order(tiny_model_dir):  # and a token budget
    sentences = [f"{s} number {i}" for i, s in enumerate(SENTENCES * 25)]  # 300, in several chunks
    alone = SentenceEncoder.load(str(tiny_model_dir)).encode(sentences)
    spread = encode_on_devices(str(tiny_model_dir), sentences, ["cpu", "cpu"], dtype="fp32", batch_size=16,
                               show_progress=False, batch_tokens=40)  # fmt: skip
    assert spread.shape == alone.shape
    np.testing.assert_allclose(spread, alone, atol=1e-5)


def test_the_cli_spreads_encode_over_a_device_list(tiny_model_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    one, two = tmp_path / "one.npy", tmp_path / "two.npy"
    common = ["encode", str(tiny_model_dir), str(corpus), "--dtype", "fp32", "--prompt", "x: "]
    assert main([*common, "--out", str(one), "--device", "cpu"]) == 0
    assert main([*common, "--out", str(two), "--device", "cpu,cpu", "--dim", "16"]) == 0
    np.testing.assert_allclose(np.load(two), np.load(one)[:, :16], atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_devices_this_machine_lacks_are_refused_naming_the_option(tiny_model_dir, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"--device: cuda:1, but"):
        resolve_device("cuda:1", "--device")
    with pytest.raises(ConfigError, match=r"--device: 'gpu' is not a device"):
        resolve_device("gpu", "--device")
    assert resolve_device("auto", "--device") == torch.device("cpu")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    assert (
        main(
            ["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "e.npy"), "--device", "cuda"]
        )
        == 2
    )
    assert "--device: cuda, but" in capsys.readouterr().err and not (tmp_path / "e.npy").exists()


def test_onnx_runs_on_the_cpu_only(tiny_model_dir):
    with pytest.raises(ConfigError, match=r"--device cuda: ONNX Runtime runs .* on the CPU"):
        for_inference(SentenceEncoder.load(str(tiny_model_dir)), "int8", device="cuda")
