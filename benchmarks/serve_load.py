"""Load test of `sentcl serve` on localhost: C concurrent clients × N requests each, mixed endpoints.

    python benchmarks/serve_load.py [--model all-MiniLM-L6-v2] [--corpus ../shared/data/wiki/sentences.txt.gz]
        [--corpus-size 5000] [--clients 8] [--requests 50] [--screenshot docs/images/search_page.png]
    python benchmarks/serve_load.py --attacks [--server-src OTHER_CHECKOUT/src] [--phase-seconds 30]

Builds an index of the first --corpus-size sentences, starts `sentcl serve` in its own process (so
clients and server do not share a GIL), runs the clients, and prints a Markdown table: requests,
errors, requests/s, latency p50/p95/p99 per endpoint. With --screenshot it also opens the page in
Debian's headless Chromium, searches, and saves a PNG. With --attacks it runs the attacks of
benchmarks/serve_attacks.py instead (idle sockets, floods of refused and of maximal requests, a refused
upload) and prints what a small request met meanwhile.
"""

from __future__ import annotations

import argparse
import gzip
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

QUERIES = [
    "A man is playing a guitar.",
    "The city council approved the new budget.",
    "Children are swimming in a lake.",
    "The company reported record profits this year.",
    "A dog chases a ball across the field.",
]


def read_corpus(path: Path, size: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    return lines[:size]


def launch(
    model: str, index: Path, server_src: Path | None = None, log: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """Start `sentcl serve` on a free port; its log (stderr) goes to ``log`` where given."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "sentcl.cli.main", "-q", "serve", model, "--index", str(index)]
    env = os.environ.copy()
    if server_src is not None:  # the server from another checkout (e.g. before a fix), this interpreter
        env["PYTHONPATH"] = str(server_src.resolve())
    errors = log.open("wb") if log is not None else subprocess.DEVNULL
    server = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=errors, env=env
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            httpx.get(f"{url}/health", timeout=1).raise_for_status()
            return server, url
        except httpx.HTTPError:
            if server.poll() is not None:
                sys.exit(f"sentcl serve exited with {server.returncode}")
            time.sleep(0.2)
    server.kill()
    sys.exit("sentcl serve did not start within 120 s")


def run_clients(url: str, clients: int, requests: int) -> tuple[dict[str, list[float]], list[str], float]:
    jobs = [
        ("/v1/embeddings", lambda i: {"input": [QUERIES[i % 5], QUERIES[(i + 1) % 5]]}),
        ("/similarity", lambda i: {"a": QUERIES[i % 5], "b": QUERIES}),
        ("/search", lambda i: {"query": QUERIES[i % 5], "top_k": 10}),
    ]
    latencies: dict[str, list[float]] = {path: [] for path, _ in jobs}
    errors: list[str] = []
    lock = threading.Lock()

    def client(worker: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            for i in range(requests):
                path, payload = jobs[(worker + i) % len(jobs)]
                start = time.perf_counter()
                try:
                    response = http.post(path, json=payload(worker + i))
                    problem = None if response.status_code == 200 else f"{path}: HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    problem = f"{path}: {exc!r}"
                with lock:
                    latencies[path].append(time.perf_counter() - start)
                    if problem:
                        errors.append(problem)

    threads = [threading.Thread(target=client, args=(w,)) for w in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def screenshot(url: str, path: Path) -> None:
    from playwright.sync_api import sync_playwright

    flags = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=flags)
        page = browser.new_page(viewport={"width": 900, "height": 720})
        page.goto(url)
        page.wait_for_function("document.getElementById('about').textContent.includes('indexed')")
        page.fill("#query", QUERIES[0])
        page.click("#go")
        page.wait_for_selector("#results li.hit")
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    data = Path(os.environ.get("SENTCL_DATA", "../shared/data"))
    parser.add_argument("--corpus", type=Path, default=data / "wiki" / "sentences.txt.gz")
    parser.add_argument("--corpus-size", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--screenshot", type=Path)
    parser.add_argument("--attacks", action="store_true", help="the attacks of serve_attacks.py instead")
    parser.add_argument("--server-src", type=Path, help="run the server from this src folder")
    parser.add_argument("--phase-seconds", type=float, default=30.0)
    args = parser.parse_args()

    from sentcl.model import SentenceEncoder
    from sentcl.search import SentenceIndex

    with tempfile.TemporaryDirectory() as tmp:
        corpus = read_corpus(args.corpus, args.corpus_size)
        index = Path(tmp) / "index"
        encoder = SentenceEncoder.load(args.model)
        SentenceIndex.of_corpus(encoder, corpus, model=encoder.source).save(index)
        log = Path(tmp) / "server.log"
        server, url = launch(args.model, index, args.server_src, log)
        if args.attacks:
            from serve_attacks import run_attacks

            try:
                print(f"`python {' '.join(sys.argv)}`, server from {args.server_src or 'this checkout'}\n")
                run_attacks(url, int(url.rsplit(":", 1)[1]), server.pid, args.phase_seconds)
            finally:
                server.terminate()
                server.wait(timeout=30)
            text = log.read_text(encoding="utf-8", errors="replace")
            print(f"server log: {len(text.splitlines())} lines, {text.count('Traceback')} tracebacks")
            for line in [line for line in text.splitlines() if "Error" in line or "Traceback" in line][:5]:
                print(f"  {line[:200]}")
            return
        try:
            latencies, errors, wall = run_clients(url, args.clients, args.requests)
            if args.screenshot:
                screenshot(url, args.screenshot)
        finally:
            server.terminate()
            server.wait(timeout=30)

    total = sum(len(v) for v in latencies.values())
    print(f"`python {' '.join(sys.argv)}`: {len(corpus)} indexed sentences, {args.clients} clients\n")
    print("| endpoint | requests | p50 ms | p95 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path, values in latencies.items():
        cells = " | ".join(f"{1000 * percentile(values, q):.0f}" for q in (50, 95, 99))
        print(f"| {path} | {len(values)} | {cells} |")
    print(f"\n{total} requests in {wall:.1f} s = {total / wall:.1f} requests/s; errors: {len(errors)}")
    for problem in errors[:10]:
        print(f"  {problem}")
    if args.screenshot:
        print(f"screenshot: {args.screenshot}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
