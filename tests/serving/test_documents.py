"""`sentcl serve --writable`: POST /documents adds or replaces documents, DELETE /documents/{id} removes one;
the served index and its folder change together and equal a clean build; refusals change nothing; a kill -9
during a POST leaves the folder's previous index, and sending the change again converges."""

import contextlib
import json
import signal
import threading
import time

import httpx
import numpy as np
import pytest

from sentcl.cli.main import main
from sentcl.search import load_index
from tests.cli.test_index_update import corpus_rows, folder_bytes
from tests.cli.test_main import write_documents
from tests.serving.conftest import start_server


def start_writable(tiny_model_dir, tmp_path):
    """A writable server on an index of 10 documents keeping their url."""
    out = tmp_path / "idx"
    corpus = write_documents(tmp_path / "docs.jsonl", corpus_rows(10))
    build = [
        "index",
        str(tiny_model_dir),
        str(corpus),
        "--out",
        str(out),
        "--field",
        "url",
        "--dtype",
        "fp32",
    ]
    assert main(build) == 0
    log = tmp_path / "server.log"
    process, url = start_server([str(tiny_model_dir), "--index", str(out), "--writable"], log)
    return url, out, process


def stop(process) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def shared(tiny_model_dir, tmp_path_factory):
    """One writable server for the two tests below, in order: the refusals first (they change nothing)."""
    url, out, process = start_writable(tiny_model_dir, tmp_path_factory.mktemp("writable"))
    yield url, out, process
    stop(process)


@pytest.fixture
def writable(tiny_model_dir, tmp_path):
    url, out, process = start_writable(tiny_model_dir, tmp_path)
    yield url, out, process
    stop(process)


def send_quietly(url: str, body: dict) -> None:
    with contextlib.suppress(httpx.TransportError):
        httpx.post(url, json=body, timeout=60)


def posted(rows: list[dict]) -> dict:
    return {"documents": [{"id": r["_id"], "text": f"{r['title']} {r['text']}", "fields": {"url": r["url"]}}
                          for r in rows]}  # fmt: skip


def test_refused_changes_are_one_answer_and_change_nothing(shared):
    url, out, _ = shared
    before = folder_bytes(out)
    row = corpus_rows(1, start=20)[0]
    cases = [
        ({"documents": [*posted([row])["documents"]] * 2}, 409, "is also documents[0]"),
        (
            {"documents": [{"id": "x", "text": "a dog", "fields": {"title": "t"}}]},
            422,
            "keeps no field 'title'",
        ),
        ({"documents": [{"id": "", "text": "a dog"}]}, 422, "id"),
        ({"documents": [{"id": "x", "text": "   "}]}, 422, "empty"),
        ({"documents": []}, 422, "documents"),
    ]
    for body, status, message in cases:
        answer = httpx.post(f"{url}/documents", json=body, timeout=60)
        assert answer.status_code == status and message in answer.text, (body, answer.text)
    assert folder_bytes(out) == before and httpx.get(f"{url}/health").json()["index_size"] == 10


def test_documents_added_changed_and_deleted_equal_a_clean_build(shared, tiny_model_dir, tmp_path):
    url, out, _ = shared
    rows = corpus_rows(10)
    rows[2]["text"] += " edited"
    new = corpus_rows(3, start=10)
    answer = httpx.post(f"{url}/documents", json=posted([rows[1], rows[2], *new]), timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"added": 3, "changed": 1, "unchanged": 1, "index_size": 13}
    hits = httpx.post(f"{url}/search", json={"query": "edited", "top_k": 13}).json()["results"][0]
    assert {h["key"] for h in hits} == {f"d{i}" for i in range(13)}
    assert next(h for h in hits if h["key"] == "d10")["fields"] == {"url": "u10"}
    deleted = httpx.delete(f"{url}/documents/d4", timeout=60)
    assert deleted.status_code == 200 and deleted.json() == {"deleted": "d4", "index_size": 12}
    missing = httpx.delete(f"{url}/documents/d4", timeout=60)
    assert missing.status_code == 404 and "no document has the id 'd4'" in missing.json()["error"]["message"]
    assert httpx.get(f"{url}/health").json()["index_size"] == 12
    # the folder now holds what a clean build of the same documents, in the same order, holds
    final = [r for r in rows if r["_id"] != "d4"] + new
    clean = tmp_path / "clean"
    corpus = write_documents(tmp_path / "final.jsonl", final)
    assert (
        main(
            [
                "index",
                str(tiny_model_dir),
                str(corpus),
                "--out",
                str(clean),
                "--field",
                "url",
                "--dtype",
                "fp32",
            ]
        )
        == 0
    )
    served, built = load_index(out), load_index(clean)
    assert served.documents.ids == built.documents.ids and served.texts == built.texts
    assert served.documents.kept == built.documents.kept and served.documents.hashes == built.documents.hashes
    np.testing.assert_allclose(served.stored_vectors(), built.stored_vectors(), atol=1e-5)


def test_a_read_only_server_has_no_write_routes_and_writable_needs_documents(
    tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "idx"
    corpus = write_documents(tmp_path / "docs.jsonl", corpus_rows(4))
    assert main(["index", str(tiny_model_dir), str(corpus), "--out", str(out), "--dtype", "fp32"]) == 0
    from fastapi.testclient import TestClient

    from sentcl.serving.server import create_app

    class Ones:
        def encode(self, texts, **_):
            return np.ones((len(texts), 32), dtype=np.float32)

    app = create_app(Ones(), model_name="m", dimension=32, index=load_index(out))
    client = TestClient(app, base_url="http://localhost")
    assert client.post("/documents", json=posted(corpus_rows(1))).status_code == 404
    assert "/documents" not in client.get("/openapi.json").json()["paths"]
    sentences = tmp_path / "lines.txt"
    sentences.write_text("a dog\n")
    assert main(["index", str(tiny_model_dir), str(sentences), "--out", str(tmp_path / "lines")]) == 0
    capsys.readouterr()
    assert main(["serve", str(tiny_model_dir), "--index", str(tmp_path / "lines"), "--writable"]) == 2
    assert "is not a faiss index of documents" in capsys.readouterr().err
    assert main(["serve", str(tiny_model_dir), "--index", str(out), "--writable", "--pooler", "max"]) == 2
    assert "was built with weights" in capsys.readouterr().err


def test_a_kill_during_a_post_leaves_the_previous_index_and_a_resend_converges(
    writable, tiny_model_dir, tmp_path
):
    url, out, process = writable
    before = folder_bytes(out)
    body = posted(corpus_rows(200, start=100))
    sender = threading.Thread(target=lambda: send_quietly(f"{url}/documents", body), daemon=True)
    sender.start()
    time.sleep(0.3)  # the request is in: the server reads, encodes or writes it
    process.send_signal(signal.SIGKILL)
    process.wait()
    sender.join(timeout=30)
    after = folder_bytes(out)
    assert after == before or len(load_index(out)) == 210  # the previous index, or the whole change
    assert len(load_index(out)) in (10, 210)
    again, url = start_server(
        [str(tiny_model_dir), "--index", str(out), "--writable"], tmp_path / "again.log"
    )
    try:
        answer = httpx.post(f"{url}/documents", json=body, timeout=120)
        assert answer.status_code == 200 and answer.json()["index_size"] == 210
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=30)
    clean = tmp_path / "clean"
    corpus = write_documents(tmp_path / "all.jsonl", corpus_rows(10) + corpus_rows(200, start=100))
    assert (
        main(
            [
                "index",
                str(tiny_model_dir),
                str(corpus),
                "--out",
                str(clean),
                "--field",
                "url",
                "--dtype",
                "fp32",
            ]
        )
        == 0
    )
    served, built = load_index(out), load_index(clean)
    assert served.documents.ids == built.documents.ids
    np.testing.assert_allclose(served.stored_vectors(), built.stored_vectors(), atol=1e-5)
    assert json.loads((out / "index.json").read_text())["size"] == 210
