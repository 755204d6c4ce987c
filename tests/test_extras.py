"""Heavy optional parts are extras: the core imports and trains without them, and a feature whose
extra is missing is one line naming the pip command."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from sentcl.cli.main import main
from tests.conftest import SENTENCES

EXTRAS = {  # module → the extra that installs it
    "onnx": "onnx", "onnxruntime": "onnx", "onnxscript": "onnx", "pyarrow": "parquet", "datasets": "datasets",
    "faiss": "index", "fastapi": "serve", "uvicorn": "serve", "pydantic": "serve", "starlette": "serve",
    "nltk": "cline", "mteb": "mteb", "ray": "ray", "lancedb": "lance",
}  # fmt: skip

BLOCK = """
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec


class Missing(Loader):  # found (so libraries probing with find_spec go on), but importing it fails
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {{spec.name!r}}", name=spec.name)

    def exec_module(self, module):
        pass


class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            return ModuleSpec(name, Missing())
        return None


sys.meta_path.insert(0, Absent())
"""


def test_the_core_trains_and_evaluates_without_any_extra(tiny_model_dir, stsb_data_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\ndata: {{train_file: {corpus}}}\n"
        f"training: {{batch_size: 4, max_steps: 2, eval_steps: 2, eval_data_dir: {stsb_data_dir}}}\n"
    )
    code = BLOCK.format(blocked=set(EXTRAS)) + textwrap.dedent(f"""
        from sentcl.cli.main import main
        assert main(["train", {str(recipe)!r}, "--output", {str(tmp_path / "run")!r}]) == 0
        assert main(["evaluate", {str(tmp_path / "run")!r}, "--tasks", "stsb-dev",
                     "--data-dir", {str(stsb_data_dir)!r}]) == 0
        assert main(["encode", {str(tmp_path / "run")!r}, {str(corpus)!r},
                     "--out", {str(tmp_path / "e.npy")!r}, "--dtype", "fp32"]) == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {set(EXTRAS)!r})
        assert not loaded, loaded
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        ("faiss", ["index", "{model}", "{corpus}", "--out", "{tmp}/idx"], "index"),
        ("onnx", ["export", "{model}", "--onnx", "{tmp}/onnx"], "onnx"),
        ("onnxruntime", ["encode", "{model}", "{corpus}", "--out", "{tmp}/e.npy", "--dtype", "int8"], "onnx"),
        ("fastapi", ["serve", "{model}"], "serve"),
        ("pyarrow", ["train", "{parquet_recipe}", "--output", "{tmp}/run"], "parquet"),
        ("ray", ["encode", "{model}", "{corpus}", "--out", "{tmp}/shards", "--engine", "ray"], "ray"),
        ("lancedb", ["index", "{model}", "{corpus}", "--out", "{tmp}/idx", "--backend", "lance"], "lance"),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_install(
    blocked, argv, extra, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    (tmp_path / "data.parquet").write_bytes(b"PAR1")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\ndata: {{train_file: {tmp_path}/data.parquet}}\n"
    )
    for name in [m for m in sys.modules if m.split(".")[0] == blocked]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)  # `import blocked` now raises ModuleNotFoundError
    values = {
        "model": str(tiny_model_dir),
        "corpus": str(corpus),
        "tmp": str(tmp_path),
        "parquet_recipe": str(recipe),
    }
    assert main([a.format(**values) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"which is not installed: pip install 'sentcl[{extra}]'"), err
    assert f"needs {blocked}," in err


def test_the_mteb_encoder_without_mteb_is_one_line(tiny_model_dir, monkeypatch):
    from sentcl.extras import MissingExtraError
    from sentcl.integrations.mteb import MTEBEncoder

    for name in [m for m in sys.modules if m.split(".")[0] == "mteb"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mteb", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'sentcl\[mteb\]'"):
        MTEBEncoder(str(tiny_model_dir))
