import base64
import json
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from sentcl.model import ModelLoadError, SentenceEncoder
from tests.conftest import SENTENCES
from tests.serving.conftest import start_server


def unit(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_health(served):
    body = httpx.get(f"{served.url}/health").json()
    assert body["status"] == "ok"
    assert body["dimension"] == served.encoder.dimension
    assert body["index_size"] == len(SENTENCES)
    assert body["limits"]["max_inputs"] == 8
    # the budgets the server enforces, never null where the OpenAPI document gives a number
    budgets = httpx.get(f"{served.url}/openapi.json").json()["info"]["x-sentcl-budgets"]
    assert body["limits"]["max_request_chars"] == budgets["max_request_chars"] > 0


def test_openai_embeddings_match_the_encoder(served):
    texts = SENTENCES[:3]
    body = httpx.post(f"{served.url}/v1/embeddings", json={"input": texts, "model": "x"}).json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1, 2]
    got = np.array([d["embedding"] for d in body["data"]])
    np.testing.assert_allclose(got, unit(served.encoder.encode(texts)), atol=1e-5)
    tokens = sum(len(served.encoder.tokenizer(t)["input_ids"]) for t in texts)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    single = httpx.post(f"{served.url}/v1/embeddings", json={"input": texts[0]}).json()
    np.testing.assert_allclose(single["data"][0]["embedding"], got[0], atol=1e-6)


def test_base64_encoding_is_openais(served):
    texts = SENTENCES[:2]
    floats = httpx.post(f"{served.url}/v1/embeddings", json={"input": texts}).json()
    packed = httpx.post(
        f"{served.url}/v1/embeddings", json={"input": texts, "encoding_format": "base64"}
    ).json()
    for f, p in zip(floats["data"], packed["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(p["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.asarray(f["embedding"], dtype=np.float32))


def test_similarity_matches_the_encoder(served):
    a, b = SENTENCES[:2], SENTENCES[2:5]
    body = httpx.post(f"{served.url}/similarity", json={"a": a, "b": b}).json()
    np.testing.assert_allclose(body["scores"], served.encoder.similarity(a, b), atol=1e-5)


def test_search_matches_the_index(served):
    from sentcl.search import SentenceIndex

    index = SentenceIndex.load(served.index_dir)
    query = "a dog runs in the park"
    body = httpx.post(f"{served.url}/search", json={"query": query, "top_k": 4}).json()
    expected = index.query(served.encoder, query, top_k=4)[0]
    assert [h["id"] for h in body["results"][0]] == [h.id for h in expected]
    np.testing.assert_allclose(
        [h["score"] for h in body["results"][0]], [h.score for h in expected], atol=1e-5
    )
    assert body["results"][0][0]["text"] == SENTENCES[expected[0].id]
    cut = httpx.post(f"{served.url}/search", json={"query": [query, query], "top_k": 12, "threshold": 0.99})
    assert all(h["score"] >= 0.99 for row in cut.json()["results"] for h in row)


def test_hybrid_search_matches_the_index(served):
    from sentcl.search import SentenceIndex

    index = SentenceIndex.load(served.index_dir)
    query = "the dog runs on the street"
    body = httpx.post(f"{served.url}/search/hybrid", json={"query": query, "top_k": 4}).json()
    vectors = served.encoder.encode([query])
    expected = index.hybrid_search(vectors, [query], top_k=4)[0]
    assert [h["id"] for h in body["results"][0]] == [h.id for h in expected]
    np.testing.assert_allclose(
        [h["score"] for h in body["results"][0]], [h.score for h in expected], atol=1e-9
    )
    both = httpx.post(f"{served.url}/search/hybrid", json={"query": query, "threshold": 0.5})
    assert both.status_code == 422 and "threshold" in both.text  # fused ranks take no cosine threshold


BAD = [
    ("/v1/embeddings", {"input": []}, 422, "'input' is empty"),
    ("/v1/embeddings", {"input": ["x"] * 9}, 422, "'input' has 9 texts; at most 8"),
    ("/v1/embeddings", {"input": "x" * 201}, 422, "'input' has 201 characters; at most 200"),
    ("/v1/embeddings", {"input": ["ok", "  "]}, 422, "'input[1]' is an empty string"),
    ("/v1/embeddings", {"input": [101, 2023]}, 422, "token-id"),
    ("/v1/embeddings", {"input": 5}, 422, "input"),
    ("/v1/embeddings", {}, 422, "input"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 422, "encoding_format"),
    (
        "/v1/embeddings",
        {"input": "x", "dimensions": 33},
        422,
        "dimensions: Input should be less than or equal to 32",
    ),
    ("/v1/embeddings", {"input": "x", "dimensions": 0}, 422, "dimensions"),
    ("/similarity", {"a": "x"}, 422, "b"),
    ("/similarity", {"a": "x", "b": "y", "c": 1}, 422, "c"),
    ("/search", {"query": "x", "top_k": 0}, 422, "top_k"),
    ("/search", {"query": "x", "top_k": 101}, 422, "top_k: Input should be less than or equal to 100"),
    ("/search", {"query": "x", "threshold": 2}, 422, "threshold"),
    ("/search", {"query": ""}, 422, "empty string"),
    ("/v1/embeddings", {"input": "a\ud800"}, 422, "U+D800"),  # a lone surrogate: not text
    ("/similarity", {"a": "x", "b": ["ok", "a\udfffb"]}, 422, "'b[1]' holds the invalid character U+DFFF"),
    ("/search", {"query": "a\x00b"}, 422, "U+0000"),
    ("/search", {"query": "x", "top_k": True}, 422, "top_k"),  # strict types: no coercion
    ("/search", {"query": "x", "top_k": "5"}, 422, "top_k"),
    ("/v1/embeddings", {"input": "x", "dimensions": "32"}, 422, "dimensions"),
    ("/v1/embeddings", {"input": ["a b c d e f g h i j " * 9] * 7}, 413, "448 tokens; at most 400"),
]


@pytest.mark.parametrize(("path", "payload", "status", "words"), BAD)
def test_bad_requests_get_one_clear_4xx(served, path, payload, status, words):
    body = json.dumps(payload).encode("ascii")  # \uXXXX escapes: a lone surrogate travels as JSON allows
    response = httpx.post(f"{served.url}{path}", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]


def test_malformed_bodies_and_routes(served):
    broken = httpx.post(
        f"{served.url}/search", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert broken.status_code == 422 and broken.json()["error"]["param"] is None
    assert broken.json()["error"]["message"].startswith("the body is not valid JSON")
    twice = httpx.post(
        f"{served.url}/search", content=b'{"query": "a", "top_k": 1, "top_k": 5}',
        headers={"content-type": "application/json"},
    )  # fmt: skip
    assert twice.status_code == 422, twice.text  # not "the last wins"
    assert "the key 'top_k' appears twice" in twice.json()["error"]["message"]
    assert httpx.post(f"{served.url}/search", content=b"x" * (4 * 1024 * 1024 + 1)).status_code == 413

    def chunks():  # no Content-Length: 40 MB sent chunked must be cut at the limit, not read whole
        for _ in range(40):
            yield b"[" * (1024 * 1024)

    chunked = httpx.post(
        f"{served.url}/v1/embeddings", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413 and "over 4194304 bytes" in chunked.json()["error"]["message"]
    assert httpx.head(f"{served.url}/health").status_code == 200
    assert httpx.get(f"{served.url}/search").status_code == 405
    assert httpx.get(f"{served.url}/nothing").status_code == 404
    assert httpx.get(f"{served.url}/health").status_code == 200  # still alive


def test_page_is_served(served):
    page = httpx.get(f"{served.url}/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert 'id="query"' in page.text and 'fetch("search"' in page.text


def test_load_8_clients_50_requests_each_no_errors(served):
    errors, latencies, lock = [], [], threading.Lock()
    payloads = [
        ("/v1/embeddings", {"input": SENTENCES[:4]}),
        ("/similarity", {"a": SENTENCES[0], "b": SENTENCES[1:3]}),
        ("/search", {"query": SENTENCES[5], "top_k": 3}),
    ]

    def client(worker: int):
        with httpx.Client(base_url=served.url, timeout=60) as http:
            for i in range(50):
                path, payload = payloads[(worker + i) % len(payloads)]
                start = time.perf_counter()
                try:
                    response = http.post(path, json=payload)
                    ok = response.status_code == 200 and "error" not in response.json()
                except httpx.HTTPError as exc:
                    ok, response = False, exc
                with lock:
                    latencies.append(time.perf_counter() - start)
                    if not ok:
                        errors.append(str(response))

    threads = [threading.Thread(target=client, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(latencies) == 400


def test_server_without_index_refuses_search_with_409(tiny_model_dir, tmp_path):
    process, url = start_server([str(tiny_model_dir)], tmp_path / "log")
    try:
        response = httpx.post(f"{url}/search", json={"query": "x"})
        assert response.status_code == 409 and "--index" in response.json()["error"]["message"]
        assert httpx.get(f"{url}/health").json()["index_size"] is None
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_lance_index_is_served_with_each_hits_key(tiny_model_dir, tmp_path):
    pytest.importorskip("lancedb")
    from sentcl.search import LanceIndex

    encoder = SentenceEncoder.load(str(tiny_model_dir))
    index = LanceIndex.of_corpus(tmp_path / "lance", encoder, SENTENCES, model=str(tiny_model_dir))
    args = [str(tiny_model_dir), "--index", str(tmp_path / "lance"), "--dtype", "fp32"]  # compared with fp32
    process, url = start_server(args, tmp_path / "log")
    try:
        query = "a dog runs in the park"
        body = httpx.post(f"{url}/search", json={"query": query, "top_k": 3}).json()
        expected = index.query(encoder, query, top_k=3)[0]
        assert [(h["id"], h["key"], h["text"]) for h in body["results"][0]] == [
            (h.id, str(h.id), SENTENCES[h.id]) for h in expected
        ]
        hybrid = httpx.post(f"{url}/search/hybrid", json={"query": query})
        assert hybrid.status_code == 409 and "in-memory index" in hybrid.json()["error"]["message"]
        assert httpx.get(f"{url}/health").json()["index_size"] == len(SENTENCES)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_an_index_of_documents_is_served_with_each_hits_id_and_fields(tiny_model_dir, tmp_path):
    """Results of a corpus of documents carry the user's ids and the fields kept, in /search and hybrid."""
    from sentcl.search import SentenceIndex
    from sentcl.search.index import DocumentRows

    encoder = SentenceEncoder.load(str(tiny_model_dir))
    ids = [f"doc-{i}" for i in range(len(SENTENCES))]
    kept = [{"title": f"title {i}", "rank": i} for i in range(len(SENTENCES))]
    rows = DocumentRows(ids, kept, {"id": "_id", "text": ["title", "text"], "keep": ["title", "rank"]})
    index = SentenceIndex.of_corpus(encoder, SENTENCES, model=str(tiny_model_dir), documents=rows)
    index.save(tmp_path / "idx")
    args = [str(tiny_model_dir), "--index", str(tmp_path / "idx"), "--dtype", "fp32"]
    process, url = start_server(args, tmp_path / "log")
    try:
        query = "a dog runs in the park"
        body = httpx.post(f"{url}/search", json={"query": query, "top_k": 3}).json()
        expected = index.query(encoder, query, top_k=3)[0]
        assert [(h["key"], h["fields"], h["text"]) for h in body["results"][0]] == [
            (f"doc-{h.id}", {"title": f"title {h.id}", "rank": h.id}, SENTENCES[h.id]) for h in expected
        ]
        hybrid = httpx.post(f"{url}/search/hybrid", json={"query": query, "top_k": 2}).json()
        assert all(
            h["key"] == f"doc-{h['id']}" and h["fields"]["rank"] == h["id"] for h in hybrid["results"][0]
        )
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_pickled_weights_are_refused_when_serving(tiny_model_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    pickled = tmp_path / "pickled"
    model = AutoModel.from_pretrained(str(tiny_model_dir))
    model.save_pretrained(str(pickled))
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(str(pickled))
    (pickled / "model.safetensors").unlink()  # the same weights, as an old pickled checkpoint
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    assert (pickled / "pytorch_model.bin").is_file() and not (pickled / "model.safetensors").exists()
    with pytest.raises(ModelLoadError, match=r"only a pickle \(pytorch_model.bin\).*--allow-pickle"):
        SentenceEncoder.load(str(pickled))
    assert SentenceEncoder.load(str(pickled), allow_pickle=True).dimension == 32  # asked for by name


def test_health_json_is_stable(served):
    assert json.loads(httpx.get(f"{served.url}/health").text).keys() >= {"model", "dimension", "index_size"}


def test_the_openai_client_reads_our_embeddings(served):
    from openai import OpenAI

    client = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0)
    texts = SENTENCES[:3]
    answer = client.embeddings.create(model="sentcl", input=texts)  # the client asks for base64
    got = np.array([d.embedding for d in answer.data])
    np.testing.assert_allclose(got, unit(served.encoder.encode(texts)), atol=1e-5)
    assert answer.usage.prompt_tokens > 0


def test_an_onnx_export_serves_the_same_embeddings(tiny_model_dir, tmp_path):
    """``sentcl serve`` loads an ONNX export (sentcl export --onnx) like a model folder."""
    from sentcl.model import SentenceEncoder
    from sentcl.model.onnx import export_onnx
    from tests.serving.conftest import start_server

    encoder = SentenceEncoder.load(str(tiny_model_dir))
    export_onnx(encoder, tmp_path / "onnx")
    process, url = start_server([str(tmp_path / "onnx")], tmp_path / "server.log")
    try:
        texts = ["a dog runs", "two people talk"]
        response = httpx.post(f"{url}/v1/embeddings", json={"input": texts, "model": "m"}, timeout=30)
        assert response.status_code == 200
        got = np.array([row["embedding"] for row in response.json()["data"]])
        np.testing.assert_allclose(got, unit(encoder.encode(texts)), atol=1e-5)  # unit vectors, as OpenAI
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_openai_dimensions_truncate_to_a_unit_prefix(served):
    body = httpx.post(f"{served.url}/v1/embeddings", json={"input": SENTENCES[:2], "dimensions": 8}).json()
    got = np.array([d["embedding"] for d in body["data"]])
    full = served.encoder.encode(SENTENCES[:2])[:, :8]
    assert got.shape == (2, 8)
    np.testing.assert_allclose(got, unit(full), atol=1e-5)


def test_nan_vectors_are_never_served_as_null():
    """An embedder that turns NaN on some input (weights broken at run time, an overflow): a 500 with one
    message, never ``"embedding": [null, ...]`` in a 200."""
    from fastapi.testclient import TestClient

    from sentcl.serving.server import create_app

    class Broken:
        def encode(self, sentences):
            vectors = np.ones((len(sentences), 4), np.float32)
            vectors[:, 0] = [np.nan if "boom" in s else 1.0 for s in sentences]
            return vectors

    app = create_app(Broken(), model_name="broken", dimension=4)
    client = TestClient(app, base_url="http://localhost", raise_server_exceptions=False)
    assert client.post("/v1/embeddings", json={"input": ["fine"]}).status_code == 200
    for path, body in (
        ("/v1/embeddings", {"input": ["fine", "boom"]}),
        ("/similarity", {"a": "boom", "b": "x"}),
    ):
        response = client.post(path, json=body)
        assert response.status_code == 500, response.text
        assert "NaN or infinite" in response.json()["error"]["message"] and "data" not in response.json()


def test_only_the_bound_host_names_are_answered():
    """DNS rebinding: a page on evil.example resolves its name to 127.0.0.1 and its script reads the API;
    the Host header still says evil.example, and is refused."""
    from fastapi.testclient import TestClient

    from sentcl.serving.server import create_app, default_allowed_hosts

    class Ones:
        def encode(self, sentences):
            return np.ones((len(sentences), 4), np.float32)

    app = create_app(Ones(), model_name="m", dimension=4, allowed_hosts=default_allowed_hosts("127.0.0.1"))
    client = TestClient(app, base_url="http://localhost:8000")
    assert client.get("/health").status_code == 200
    for host in ("127.0.0.1:8000", "[::1]:8000", "LOCALHOST"):
        assert client.get("/health", headers={"host": host}).status_code == 200, host
    for host in ("evil.example", "evil.example:8000", "localhost.evil.example", ""):
        response = client.post("/v1/embeddings", json={"input": ["x"]}, headers={"host": host})
        assert response.status_code == 400 and "--allowed-hosts" in response.json()["error"]["message"], host
    assert default_allowed_hosts("0.0.0.0") == ["*"] and default_allowed_hosts("example.org") == [
        "example.org"
    ]
    anywhere = TestClient(
        create_app(Ones(), model_name="m", dimension=4, allowed_hosts=["*"]), base_url="http://x"
    )
    assert anywhere.get("/health").status_code == 200


def test_unknown_fields_are_refused_and_no_page_loads_a_cdn():
    from fastapi.testclient import TestClient

    from sentcl.serving.server import create_app

    class Ones:
        def encode(self, sentences):
            return np.ones((len(sentences), 4), np.float32)

    client = TestClient(create_app(Ones(), model_name="m", dimension=4), base_url="http://localhost")
    typo = client.post("/v1/embeddings", json={"input": ["x"], "dimension": 2})  # once 200 with 4 dims
    assert typo.status_code == 422 and "dimension" in typo.json()["error"]["message"]
    assert client.post("/v1/embeddings", json={"input": ["x"], "user": "u", "model": "m"}).status_code == 200
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").status_code == 200


def test_the_queued_paths_are_the_model_endpoints_of_the_route_table():
    """The early 503 of the body limit is keyed on MODEL_PATHS: it is the table's queued routes, and every
    POST route of the app is one (a new endpoint that runs the model cannot be left out)."""
    from fastapi.routing import APIRoute

    from sentcl.serving.documents import DocumentWriter
    from sentcl.serving.server import ENDPOINTS, MODEL_PATHS, WRITE_ENDPOINTS, create_app

    class Constant:
        def encode(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32)

    app = create_app(Constant(), model_name="m", dimension=4, writer=DocumentWriter(Path("unused"), ()))
    posts = {route.path for route in app.routes if isinstance(route, APIRoute) and "POST" in route.methods}
    assert (
        MODEL_PATHS
        == {e.path for e in ENDPOINTS + WRITE_ENDPOINTS if e.queued}
        == posts
        == {"/v1/embeddings", "/similarity", "/search", "/search/hybrid", "/documents"}
    )
