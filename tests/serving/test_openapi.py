"""The HTTP API keeps its OpenAPI document: schemathesis, an independent property-based API tester,
finds no request the document allows that the server refuses, no answer the document does not declare, no
schema-breaking request accepted; and docs/serving.md says what the server does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sentcl.cli.main import main
from sentcl.serving.server import ServerLimits
from tests.conftest import SENTENCES
from tests.serving.conftest import start_server

DOCS = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


@pytest.fixture(scope="module")
def contract_server(tiny_model_dir, tmp_path_factory):
    """A server whose budgets follow from its schema: 8 texts × 200 characters = the 1,600-character budget,
    8 texts × the tiny model's 64 positions = the 512-token budget; so every request the document allows
    must be answered 200 (or 409/5xx where the document says)."""
    folder = tmp_path_factory.mktemp("contract")
    corpus = folder / "corpus.jsonl"  # documents, so the server is writable: every route is under test
    corpus.write_text(
        "".join(json.dumps({"_id": f"s{i}", "text": s}) + "\n" for i, s in enumerate(SENTENCES))
    )
    assert (
        main(["index", str(tiny_model_dir), str(corpus), "--out", str(folder / "index"), "--dtype", "fp32"])
        == 0
    )
    args = [str(tiny_model_dir), "--index", str(folder / "index"), "--max-inputs", "8", "--max-chars", "200",
            "--max-tokens", "512", "--max-request-chars", "1600", "--dtype", "fp32",
            "--writable"]  # fmt: skip
    process, url = start_server(args, folder / "server.log")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_schemathesis_finds_no_failure(contract_server, tmp_path):
    schemathesis = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert schemathesis, "schemathesis is in the dev extra"
    result = subprocess.run(
        [schemathesis, "run", f"{contract_server}/openapi.json", "--checks", "all", "--seed", "1",
         "--max-examples", "60", "--workers", "1"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    summary = result.stdout[-3000:]
    assert result.returncode == 0, summary
    tested = re.search(r"(\d+) generated, (\d+) passed", summary)
    assert tested and tested.group(1) == tested.group(2) and int(tested.group(1)) > 100, summary
    assert "Unsupported regex" not in result.stdout and "validation skipped" not in result.stdout, summary


def test_an_undeclared_method_gets_405_with_allow(contract_server):
    answer = httpx.request("TRACE", f"{contract_server}/v1/embeddings")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert httpx.delete(f"{contract_server}/health").headers["allow"] == "GET, HEAD"


def test_the_document_states_the_limits_and_every_status(contract_server):
    document = httpx.get(f"{contract_server}/openapi.json").json()
    request = document["components"]["schemas"]["EmbeddingsRequest"]["properties"]["input"]["anyOf"]
    assert request[0]["maxLength"] == 200 and request[1]["maxItems"] == 8 and request[1]["minItems"] == 1
    assert document["info"]["x-sentcl-budgets"] == {"max_request_chars": 1600, "max_tokens": 512}
    for path in ("/v1/embeddings", "/similarity", "/search"):
        statuses = set(document["paths"][path]["post"]["responses"])
        assert {"200", "400", "413", "422", "500", "503"} <= statuses, path
    assert "409" in document["paths"]["/search"]["post"]["responses"]
    operation_ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))


def test_docs_serving_md_says_what_the_server_does(contract_server):
    """The endpoint table lists exactly the document's operations, and every default limit quoted in the
    prose is the server's."""
    text = DOCS.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(GET|POST|HEAD|DELETE) (/[^`]*)` \|", text, flags=re.M)
    document = httpx.get(f"{contract_server}/openapi.json").json()
    served = {(m.upper(), p) for p, item in document["paths"].items() for m in item if m != "head"}
    assert set(rows) == served
    limits = ServerLimits()
    quoted = {
        r"`--max-inputs` texts \((\d+)\)": limits.max_inputs,
        r"`--max-chars`\s+characters \((\d+)\)": limits.max_chars,
        r"`--max-request-chars` characters in all \(16 per token of `--max-tokens`:\s+([\d,]+);":
            16 * limits.max_tokens,
        r"`--max-tokens` tokens in all \((\d+):": limits.max_tokens,
        r"`top_k` ≤ (\d+)": limits.max_top_k,
        r"a body ≤ (\d+) MiB": limits.max_body_bytes // 2**20,
        r"all bodies held at once have a (\d+) MiB budget": limits.max_bodies_bytes // 2**20,
        r"At most `--max-waiting` \((\d+)\) wait": limits.max_waiting,
        r"waited over (\d+) s": limits.max_wait_s,
        r"headers must be complete within (\d+) s": limits.header_timeout_s,
        r"a body\s+must arrive within (\d+) s": limits.body_timeout_s,
        r"a response must be read within (\d+) s": limits.write_timeout_s,
        r"at most `--max-connections` \(([\d,]+)\)": limits.max_connections,
    }  # fmt: skip
    for pattern, value in quoted.items():
        found = re.search(pattern, text)
        assert found, f"docs/serving.md no longer says {pattern!r}"
        assert float(found.group(1).replace(",", "")) == value, pattern
