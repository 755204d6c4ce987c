"""Search latency of `sentcl serve --writable` while its index changes.

    python benchmarks/serve_update.py [--index runs/index-update/flat] [--documents 1000] [--clients 4]

Serves a copy of an index of documents (by default the one `benchmarks/index_update.py` builds: 100,000
documents, all-MiniLM-L6-v2), then: ``--clients`` threads search it for ``--seconds`` (one query each, top
10, after 20 warm-up searches); then the same while one more client POSTs ``--documents`` new documents in
requests of 100. Prints the searches' p50 / p99 in each phase, how many ran, and each POST's seconds, as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def searching(
    url: str, queries: list[str], stop: threading.Event, latencies: list[float], offset: int
) -> None:
    with httpx.Client(timeout=120) as client:
        i = offset
        while not stop.is_set():
            started = time.perf_counter()
            answer = client.post(f"{url}/search", json={"query": queries[i % len(queries)], "top_k": 10})
            if answer.status_code == 200:
                latencies.append(time.perf_counter() - started)
            i += 7


def phase(url: str, queries: list[str], clients: int, during) -> tuple[list[float], object]:
    """Searches by ``clients`` threads while ``during()`` runs; their latencies and its result."""
    stop, latencies = threading.Event(), []
    threads = [
        threading.Thread(target=searching, args=(url, queries, stop, latencies, k)) for k in range(clients)
    ]
    for thread in threads:
        thread.start()
    try:
        result = during()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return latencies, result


def summary(latencies: list[float]) -> dict:
    ms = np.asarray(latencies) * 1000
    if not len(ms):  # --documents 0: no change, so no searches during one
        return {"searches": 0}
    return {
        "searches": len(ms),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="runs/index-update/flat")
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    from sentcl.hardware import describe_machine

    texts = [json.loads(line) for line in (Path(args.index) / "texts.jsonl").read_text().splitlines()]
    queries = texts[::997][:200]
    with tempfile.TemporaryDirectory(prefix="sentcl-serve-update-") as folder:
        copy = Path(folder) / "index"
        shutil.copytree(args.index, copy)
        port = free_port()
        sentcl = str(Path(sys.executable).parent / "sentcl")
        command = [sentcl, "-q", "serve", args.model, "--index", str(copy), "--writable", "--port", str(port)]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                if server.poll() is not None:
                    raise SystemExit(f"sentcl serve exited with {server.returncode}: {' '.join(command)}")
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.5)
            for query in queries[:20]:  # warm: the first searches pay one-time costs
                httpx.post(f"{url}/search", json={"query": query, "top_k": 10}, timeout=120)
            idle, _ = phase(url, queries, args.clients, lambda: time.sleep(args.seconds))

            def write() -> list[float]:
                seconds = []
                with httpx.Client(timeout=600) as client:
                    for start in range(0, args.documents, 100):
                        batch = [{"id": f"new-{i}", "text": f"{texts[i]} (a new document {i})"}
                                 for i in range(start, min(start + 100, args.documents))]  # fmt: skip
                        began = time.perf_counter()
                        answer = client.post(f"{url}/documents", json={"documents": batch})
                        answer.raise_for_status()
                        seconds.append(time.perf_counter() - began)
                return seconds

            busy, posts = phase(url, queries, args.clients, write)
            size = httpx.get(f"{url}/health").json()["index_size"]
        finally:
            server.terminate()
            server.wait(timeout=60)
    record = {"machine": describe_machine(), "index": args.index, "index_size_after": size,
              "clients": args.clients, "idle": summary(idle), "while_updating": summary(busy),
              "post_seconds": posts}  # fmt: skip
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
