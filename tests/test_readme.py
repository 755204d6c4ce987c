"""The README cannot drift: its objectives table comes from the code, and its quick start runs as written
(on the tiny model: the training line gets overrides appended that swap MiniLM for it and shorten the run)."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from sentcl.objectives import REGISTRY
from tests.conftest import SENTENCES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def test_the_readme_is_made_for_the_first_minute():
    assert len(README.splitlines()) <= 120
    assert "make demo" in section("The two commands") and "make test" in section("The two commands")


def test_every_registered_objective_is_a_row_of_the_table_with_its_pages():
    table = [line for line in section("Objectives").splitlines() if line.startswith("| ")]
    rows = table[1:]  # not the header
    named = {m.group(1) for row in rows if (m := re.match(r"\| `([a-z_]+)` \|", row))}
    assert set(REGISTRY) == named, f"table vs registry: {sorted(set(REGISTRY) ^ named)}"
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 5 and all(cells), row
        for link in re.findall(r"\]\(([^)]+)\)", row):
            assert (ROOT / link).is_file(), f"{link} in: {row}"
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / link).is_file(), link


def quick_start() -> list[str]:
    block = section("Quick start").split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith(("sentcl ", "curl "))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_quick_start_runs_as_written(tmp_path, tiny_model_dir, stsb_data_dir, monkeypatch, capsys):
    from sentcl.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SENTCL_DATA", str(stsb_data_dir))
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    Path("my_sentences.txt").write_text("\n".join(SENTENCES * 3) + "\n", encoding="utf-8")
    commands = quick_start()
    assert [shlex.split(c)[1] for c in commands if c.startswith("sentcl")] == [
        "train", "evaluate", "encode", "index", "search", "serve",
    ]  # fmt: skip
    tiny = [f"model.name_or_path={tiny_model_dir}", "training.max_steps=4", "training.eval_steps=2",
            "training.batch_size=8", "data.max_length=16"]  # fmt: skip
    server, port = None, free_port()
    try:
        for command in commands:
            argv = shlex.split(command, comments=True)
            if argv[0] == "curl":
                argv = [a.replace("localhost:8000", f"127.0.0.1:{port}") for a in argv]
                answer = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
                assert len(answer["data"][0]["embedding"]) == 32
                continue
            argv = argv[1:]
            if argv[0] == "train":
                argv += tiny
            if argv[0] == "serve":
                argv[argv.index("--port") + 1] = str(port)
                server = subprocess.Popen([sys.executable, "-m", "sentcl.cli.main", *argv], cwd=tmp_path)
                wait_for(f"http://127.0.0.1:{port}/health", server)
                continue
            assert main(argv) == 0, command
            printed = capsys.readouterr().out
            if argv[0] == "evaluate":
                assert re.search(r"STS-B dev +Spearman -?\d", printed), printed
            if argv[0] == "search":
                assert printed.count("\n") >= 3, printed
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    assert np.load("vectors.npy").shape == (len(SENTENCES) * 3, 32)
    assert (tmp_path / "runs" / "mine" / "model" / "model.safetensors").is_file()


def wait_for(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    pytest.fail(f"no answer from {url} in {timeout} s")
