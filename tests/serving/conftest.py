"""A real ``sentcl serve`` process on a free localhost port, with a tiny model and an index of SENTENCES."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sentcl.model import SentenceEncoder
from sentcl.search import SentenceIndex
from tests.conftest import SENTENCES


@dataclass
class Served:
    url: str
    encoder: SentenceEncoder
    index_dir: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    code = "import sys; from sentcl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    handle = log.open("w")
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", *args, "--port", str(port)],
        stdout=handle, stderr=subprocess.STDOUT, env=os.environ.copy(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sentcl serve exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"sentcl serve did not answer within 90 s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    encoder = SentenceEncoder.load(str(tiny_model_dir))
    index_dir = folder / "index"
    # fp32: these tests compare the served vectors with the fp32 encoder's to 1e-5, which bf16 (what
    # auto picks on a CPU with native bf16) does not meet.
    SentenceIndex.of_corpus(encoder, SENTENCES, model=encoder.source).save(index_dir)
    args = [str(tiny_model_dir), "--index", str(index_dir), "--max-inputs", "8", "--max-chars", "200",
            "--max-tokens", "400", "--dtype", "fp32"]  # fmt: skip
    process, url = start_server(args, folder / "server.log")
    try:
        yield Served(url, encoder, index_dir)
    finally:
        process.terminate()
        process.wait(timeout=30)
