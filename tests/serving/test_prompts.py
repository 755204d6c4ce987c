"""A model's prompts in the index and the server: documents indexed with the document prompt, searches
encoded with the query prompt, an embeddings request naming a prompt (the schema lists the model's)."""

import numpy as np
from fastapi.testclient import TestClient

from sentcl.embedder import unit_rows
from sentcl.search import SentenceIndex
from sentcl.serving.server import create_app

PROMPTS = {"query": "q: ", "document": "d: "}


class Recording:
    """A fixed random vector per text; remembers every text it encoded."""

    def __init__(self, prompts=None):
        self.prompts = prompts or {}
        self.seen: list[str] = []

    def encode(self, sentences, **kwargs):
        self.seen += list(sentences)
        return np.stack([np.random.default_rng(list(s.encode())).normal(size=4) for s in sentences])


def test_the_index_encodes_documents_and_queries_with_their_prompts():
    embedder = Recording(PROMPTS)
    index = SentenceIndex.of_corpus(embedder, ["a cat", "a dog"])
    assert embedder.seen == ["d: a cat", "d: a dog"]
    hits = index.query(embedder, ["a cat"], top_k=1)
    assert embedder.seen[-1] == "q: a cat"
    scores = unit_rows(embedder.encode(["q: a cat"])) @ unit_rows(embedder.encode(["d: a cat", "d: a dog"])).T
    best = int(np.argmax(scores[0]))
    assert hits[0][0].text == ["a cat", "a dog"][best]
    assert abs(hits[0][0].score - float(scores[0, best])) < 1e-5


def test_a_model_without_prompts_is_indexed_as_it_is():
    embedder = Recording()
    SentenceIndex.of_corpus(embedder, ["a cat"]).query(embedder, ["a dog"], top_k=1)
    assert embedder.seen == ["a cat", "a dog"]


def test_the_server_applies_the_models_prompts():
    embedder = Recording(PROMPTS)
    index = SentenceIndex.of_corpus(embedder, ["a cat", "a dog"])
    client = TestClient(
        create_app(embedder, model_name="m", dimension=4, index=index), base_url="http://localhost"
    )
    named = client.post("/v1/embeddings", json={"input": ["x"], "prompt_name": "query"})
    assert named.status_code == 200, named.text
    np.testing.assert_allclose(
        named.json()["data"][0]["embedding"], unit_rows(embedder.encode(["q: x"]))[0], atol=1e-6
    )
    plain = client.post("/v1/embeddings", json={"input": ["x"]}).json()["data"][0]["embedding"]
    np.testing.assert_allclose(plain, unit_rows(embedder.encode(["x"]))[0], atol=1e-6)
    unknown = client.post("/v1/embeddings", json={"input": ["x"], "prompt_name": "passage"})
    assert unknown.status_code == 422 and "prompt_name" in unknown.text
    schema = client.get("/openapi.json").json()["components"]["schemas"]["EmbeddingsRequest"]
    assert "document" in str(schema["properties"]["prompt_name"]) and "query" in str(
        schema["properties"]["prompt_name"]
    )
    embedder.seen.clear()
    assert client.post("/search", json={"query": "a cat", "top_k": 1}).status_code == 200
    assert embedder.seen == ["q: a cat"]


def test_a_server_without_prompts_refuses_prompt_name():
    client = TestClient(create_app(Recording(), model_name="m", dimension=4), base_url="http://localhost")
    response = client.post("/v1/embeddings", json={"input": ["x"], "prompt_name": "query"})
    assert response.status_code == 422


def test_a_prompted_embedder_copies_and_passes_attributes_through():
    import copy
    import pickle

    from sentcl.embedder import Prompted

    prompted = Prompted(Recording(PROMPTS), "q: ")
    assert prompted.prompts == PROMPTS  # the wrapped embedder's, passed through
    for twin in (copy.deepcopy(prompted), pickle.loads(pickle.dumps(prompted))):
        twin.encode(["x"])
        assert twin.embedder.seen == ["q: x"]
