"""The server's limits under denial-of-service attacks, against a real uvicorn on localhost with
short timeouts: idle and slow sockets are closed, a connection cap keeps the server answering, a refused
upload is not read to its end, a flood of large requests cannot queue in front of a small one, a request
refused for its size is not tokenised whole, and one message cannot flood the log."""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress

import httpx
import numpy as np
import pytest
import uvicorn

from sentcl.serving.connections import RateLimitedLog, protocol_class
from sentcl.serving.server import ServerLimits, create_app, token_counter
from tests.serving.conftest import free_port


class SlowEmbedder:
    """Takes ``seconds_per_char`` per character and records the order it served requests in."""

    def __init__(self, seconds_per_char: float = 0.0):
        self.seconds_per_char, self.served = seconds_per_char, []

    def encode(self, texts):
        time.sleep(self.seconds_per_char * sum(len(t) for t in texts))
        self.served.append(texts[0][:10])
        rng = np.random.default_rng(len(texts))
        return rng.normal(size=(len(texts), 4)).astype(np.float32)


@contextmanager
def running(embedder, limits: ServerLimits, count_tokens=None):
    app = create_app(embedder, model_name="fake", dimension=4, limits=limits, count_tokens=count_tokens)
    protocol = protocol_class(
        limits.max_connections, limits.header_timeout_s, limits.body_timeout_s, limits.write_timeout_s
    )
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=protocol, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}", port, protocol.connections_state
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (what it sends before is read and dropped)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


QUICK = ServerLimits(header_timeout_s=0.5, body_timeout_s=0.5, max_connections=16)


def test_a_socket_that_sends_nothing_or_its_headers_slowly_is_closed():
    with running(SlowEmbedder(), QUICK) as (url, port, _):
        idle = socket.create_connection(("127.0.0.1", port))
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /health HTTP/1.1\r\n")
        for _ in range(3):  # a byte of header every 0.2 s never completes them
            time.sleep(0.2)
            slow.sendall(b"X")
        assert closed_within(idle, 3) and closed_within(slow, 3)
        assert httpx.get(f"{url}/health").status_code == 200


def test_a_body_that_does_not_arrive_is_closed():
    with running(SlowEmbedder(), QUICK) as (_, port, _):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"input"'
        )
        assert closed_within(sock, 3)


def test_idle_connections_beyond_the_cap_go_and_a_client_with_a_request_is_served():
    limits = ServerLimits(header_timeout_s=30, max_connections=8)
    with running(SlowEmbedder(), limits) as (url, port, state):
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
        time.sleep(0.3)
        assert state.open <= 8
        assert httpx.post(f"{url}/v1/embeddings", json={"input": "a dog"}).status_code == 200
        closed = sum(closed_within(sock, 0.5) for sock in idle)
        assert closed >= 40 - 8
        for sock in idle:
            sock.close()


def test_a_refused_chunked_upload_is_not_read_to_its_end():
    limits = ServerLimits(max_body_bytes=10_000, header_timeout_s=5)
    with running(SlowEmbedder(), limits) as (_, port, _):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"1000\r\n" + b"a" * 0x1000 + b"\r\n"
        sent, answer = 0, b""
        sock.settimeout(0.05)
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(25_000):  # 100 MB, if the server kept reading
                sock.sendall(chunk)
                sent += len(chunk)
                with suppress(TimeoutError):
                    answer += sock.recv(65536)
        assert sent < 20_000_000, f"the server read {sent} bytes after refusing the body"
        assert answer.startswith(b"HTTP/1.1 413") and b"connection: close" in answer.lower()


def test_a_small_request_overtakes_a_queue_of_large_ones_and_the_overflow_is_503():
    embedder = SlowEmbedder(seconds_per_char=0.0002)  # 8 texts of 200 characters: 0.32 s
    limits = ServerLimits(max_waiting=3, max_chars=200)
    large = {"input": ["x" * 200] * 8}
    with (
        running(embedder, limits) as (url, _, _),
        httpx.Client(base_url=url, timeout=30) as http,
        ThreadPoolExecutor(12) as pool,
    ):
        floods = [pool.submit(http.post, "/v1/embeddings", json=large) for _ in range(10)]
        time.sleep(0.4)  # one runs, three wait, the rest are refused
        small = http.post("/v1/embeddings", json={"input": "small dog"})
        answers = [f.result() for f in floods]
    assert small.status_code == 200
    statuses = sorted(a.status_code for a in answers)
    assert 200 in statuses and 503 in statuses and set(statuses) <= {200, 503}
    busy = next(a for a in answers if a.status_code == 503)
    assert int(busy.headers["retry-after"]) >= 1 and busy.json()["error"]["type"] == "server_error"
    served = embedder.served  # after at most the large request already running, not the queue
    assert len(served) - served.index("small dog") - 1 >= 2, served


def test_a_request_refused_for_its_tokens_is_not_tokenised_whole(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    seen = []

    def tokenise(texts, **kwargs):
        seen.append(len(texts))
        return tokenizer(texts, **kwargs)

    count = token_counter(tokenise, max_length=64, chunk=4)
    wordy = ["the dog runs " * 30] * 64  # words alone prove it is over: nothing is tokenised
    assert count(wordy, 100) > 100 and seen == []
    long_words = ["".join(["abcdefghij"] * 20) + " x"] * 64  # few words, many tokens: stop once over
    assert count(long_words, 100) > 100 and sum(seen) < 64
    seen.clear()
    exact = count(["a man plays", "the dog"], 100)
    assert exact == sum(len(x) for x in tokenizer(["a man plays", "the dog"])["input_ids"])


def test_an_unexpected_error_is_a_json_500():
    class Broken:
        def encode(self, texts):
            raise RuntimeError("a bug")

    with running(Broken(), ServerLimits()) as (url, _, _):
        answer = httpx.post(f"{url}/v1/embeddings", json={"input": "a dog"})
    assert answer.status_code == 500
    assert answer.json()["error"]["message"].startswith("internal error")


def test_one_message_cannot_flood_the_log(caplog):
    now = [0.0]
    quieter = RateLimitedLog(burst=3, period_s=60, clock=lambda: now[0])
    log = logging.getLogger("sentcl.test.flood")
    log.addFilter(quieter)
    with caplog.at_level(logging.WARNING, logger="sentcl.test.flood"):
        for i in range(1000):
            log.warning("too many open files (%d)", i)
        now[0] = 61
        log.warning("too many open files (%d)", 1000)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4
    assert messages[-1].endswith("[997 like it dropped in the last 60 s]")


def test_a_request_over_the_character_budget_is_413_before_any_model_work():
    embedder = SlowEmbedder()
    limits = ServerLimits(max_tokens=100, max_chars=400)  # 1,600 characters per request
    with running(embedder, limits, count_tokens=lambda texts, limit: 0) as (url, _, _):
        answer = httpx.post(f"{url}/v1/embeddings", json={"input": ["word " * 70] * 5})
        fits = httpx.post(f"{url}/v1/embeddings", json={"input": ["word " * 70] * 4})
    assert answer.status_code == 413 and fits.status_code == 200
    assert answer.json()["error"]["message"] == "'input' has 1750 characters in all; at most 1600 per request"
    assert len(embedder.served) == 1


def test_the_open_file_limit_is_raised_to_the_hard_limit_and_logged(monkeypatch, caplog):
    import resource

    from sentcl.serving import connections

    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (1280, 20000))
    monkeypatch.setattr(resource, "setrlimit", lambda kind, limits: calls.append(limits))
    with caplog.at_level("INFO", logger="sentcl.serve"):
        assert connections.fit_open_file_limit(1024) == 1024
    assert calls == [(20000, 20000)]  # not just max_connections + 256 = 1,280, which a burst overran
    assert "open-file limit: 20000 (hard 20000)" in caplog.text
    calls.clear()
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (512, 512))  # cannot be raised: the cap falls
    assert connections.fit_open_file_limit(1024) == 256 and calls == []
