"""The denial-of-service attacks on `sentcl serve` over loopback, and what a small request meets meanwhile.

    python benchmarks/serve_load.py --attacks [--server-src OLD_CHECKOUT/src] [--phase-seconds 30]

Phases, each bounded in time and each measuring a victim (one short sentence to /v1/embeddings on a fresh
connection, one after the other) and the server's peak RSS (/proc/PID/status, polled every 50 ms):

- unloaded: the victim alone; and one maximal valid request alone (32 texts × 256 tokens = the 8,192-token
  budget), its service time, median of 3;
- idle sockets: 20,050 connections that send nothing, opened by two helper processes (each process has its
  own open-file limit), held for the phase;
- refused flood: 2 attackers sending, back to back, requests refused for their size (256 texts × 8,192
  characters of words, 2 MB; 256 texts of 512 punctuation marks), then 64 such requests at once;
- maximal wave: 64 maximal valid requests at once;
- resent maximal requests: 32 clients, each sending the maximal valid request again at once after every
  answer (a 503 included, its Retry-After ignored), for the phase;
- refused upload: a 100 MB chunked upload over the body limit: how much the server reads after its 413.

The target: under every attack the victim's p99 < 2 × its unloaded p99 + one maximal request's
service time, and the server's RSS < 2 GB. ``--server-src`` runs the server from another checkout (the code
before the fix) with this interpreter, for the before/after table.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

VICTIM = {"input": "A man is playing a guitar."}
WORD = "alpha "  # one token for MiniLM's WordPiece, 6 characters


def maximal_request() -> dict:
    """32 texts of 254 words: 256 tokens each with [CLS] and [SEP] (MiniLM's max_seq_length), 8,192 all."""
    return {"input": [(WORD * 254).strip()] * 32}


def refused_requests() -> list[bytes]:
    """Two requests refused for their size: 256 texts of 8,192 characters of words (2 MB: the issue's, each
    text within the limits), and 256 texts of 512 punctuation marks (a token each, no word to bound them
    by: the tokenizer must count)."""
    return [
        json.dumps({"input": [("a beta " * 1200)[:8192]] * 256}).encode(),
        json.dumps({"input": ["!" * 512] * 256}).encode(),
    ]


@dataclass
class Phase:
    name: str
    victim: list[float] = field(default_factory=list)  # seconds
    victim_failures: int = 0
    peak_rss_mb: float = 0.0
    notes: list[str] = field(default_factory=list)

    def p(self, q: int) -> float:
        values = sorted(self.victim)
        if not values:
            return float("nan")
        return (
            statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]
        )


def rss_mb(pid: int) -> float:
    try:
        with Path(f"/proc/{pid}/status").open(encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def open_fds(pid: int) -> int:
    try:
        return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return -1


class Watch:
    """Polls the server's RSS while a phase runs and keeps the peak."""

    def __init__(self, pid: int, phase: Phase):
        self.pid, self.phase, self.stop = pid, phase, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.phase.peak_rss_mb = max(self.phase.peak_rss_mb, rss_mb(self.pid))
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def victim(url: str, phase: Phase, until: float, timeout: float = 60.0) -> None:
    """Small requests one after another, each on a fresh connection, until ``until``."""
    while time.monotonic() < until:
        start = time.perf_counter()
        try:
            answer = httpx.post(f"{url}/v1/embeddings", json=VICTIM, timeout=timeout)
            ok = answer.status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            phase.victim.append(time.perf_counter() - start)
        else:
            phase.victim_failures += 1
            time.sleep(0.05)


def service_time(url: str, payload: dict, runs: int = 3) -> float:
    times = []
    with httpx.Client(base_url=url, timeout=300) as http:
        for _ in range(runs):
            start = time.perf_counter()
            http.post("/v1/embeddings", json=payload).raise_for_status()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


HOLDER = """
import resource, socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, failed = [], 0
for _ in range(count):
    try:
        s = socket.socket(); s.setblocking(False)
        s.connect_ex(("127.0.0.1", port)); held.append(s)
    except OSError:
        failed += 1
print(len(held), failed, flush=True)
time.sleep(seconds)
"""


def idle_sockets(url: str, port: int, pid: int, seconds: float, total: int = 20_050) -> Phase:
    phase = Phase(f"{total:,} idle sockets")
    helpers = []
    for i in range(2):  # two processes: each has its own open-file limit
        count = total // 2 + i * (total % 2)
        command = [sys.executable, "-c", HOLDER, str(port), str(count), str(seconds + 5)]
        helpers.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    opened = [h.stdout.readline().split() for h in helpers]
    phase.notes.append(f"opened {sum(int(o[0]) for o in opened if o)}")
    with Watch(pid, phase):
        time.sleep(1)
        victim(url, phase, time.monotonic() + seconds - 1, timeout=10)
        phase.notes.append(f"server fds at the end {open_fds(pid)}")
    for helper in helpers:
        helper.kill()
        helper.wait()
    return phase


def send_until(url: str, body: bytes, stop: threading.Event, statuses: list[int]) -> None:
    """Post ``body`` to /v1/embeddings again as soon as each answer comes (a 503's Retry-After ignored)
    until ``stop``; every answer's status in ``statuses`` (-1: no answer)."""
    with httpx.Client(base_url=url, timeout=300) as http:
        while not stop.is_set():
            try:
                statuses.append(
                    http.post(
                        "/v1/embeddings", content=body, headers={"content-type": "application/json"}
                    ).status_code
                )
            except httpx.HTTPError:
                statuses.append(-1)


def refused_flood(url: str, pid: int, seconds: float) -> Phase:
    phase = Phase("2 attackers of refused requests, then 64 at once")
    bodies = refused_requests()
    stop = threading.Event()
    statuses: list[int] = []

    with Watch(pid, phase):
        attackers = [
            threading.Thread(target=send_until, args=(url, body, stop, statuses), daemon=True)
            for body in bodies
        ]
        for thread in attackers:
            thread.start()
        victim(url, phase, time.monotonic() + seconds)
        stop.set()
        for thread in attackers:
            thread.join()
        wave = ThreadPoolExecutor(64)

        def post(i):
            headers = {"content-type": "application/json"}
            body = bodies[i % 2]
            return httpx.post(f"{url}/v1/embeddings", content=body, headers=headers, timeout=300).status_code

        futures = [wave.submit(post, i) for i in range(64)]
        victim(url, phase, time.monotonic() + min(seconds, 15))
        wave_statuses = [f.result() for f in futures]
        wave.shutdown()
    phase.notes.append(f"attackers' answers {summarize(statuses)}; the wave's {summarize(wave_statuses)}")
    return phase


def maximal_wave(url: str, pid: int, seconds: float) -> Phase:
    phase = Phase("64 maximal valid requests at once")
    payload = json.dumps(maximal_request()).encode()
    answered: list[tuple[int, float]] = []
    start = time.perf_counter()

    def post(_):
        try:
            status = httpx.post(
                f"{url}/v1/embeddings", content=payload, headers={"content-type": "application/json"},
                timeout=600,
            ).status_code  # fmt: skip
        except httpx.HTTPError:
            status = -1
        answered.append((status, time.perf_counter() - start))

    with Watch(pid, phase), ThreadPoolExecutor(64) as wave:
        futures = [wave.submit(post, i) for i in range(64)]
        victim(url, phase, time.monotonic() + seconds)
        for future in futures:
            future.result()
    last = max(t for _, t in answered)
    phase.notes.append(f"answers {summarize([s for s, _ in answered])}, the last after {last:.1f} s")
    return phase


def resent_maximal(url: str, pid: int, seconds: float, clients: int = 32) -> Phase:
    phase = Phase(f"{clients} clients resending maximal requests at once")
    payload = json.dumps(maximal_request()).encode()
    stop = threading.Event()
    statuses: list[int] = []

    with Watch(pid, phase):
        threads = [
            threading.Thread(target=send_until, args=(url, payload, stop, statuses), daemon=True)
            for _ in range(clients)
        ]
        for thread in threads:
            thread.start()
        time.sleep(2)  # the queue fills first
        victim(url, phase, time.monotonic() + seconds)
        stop.set()
        for thread in threads:
            thread.join()
    phase.notes.append(f"attackers' answers {summarize(statuses)}")
    return phase


def refused_upload(port: int, limit_mb: int = 100) -> str:
    """A chunked upload of ``limit_mb`` MB to a server whose body limit is 4 MB: MB accepted in total."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    sent, status = 0, "no answer"
    sock.settimeout(10)
    start = time.monotonic()
    try:
        while sent < limit_mb * 2**20 and time.monotonic() - start < 60:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError as exc:
        status = f"closed by the server ({type(exc).__name__})"
    else:
        status = "read to the end"
    sock.close()
    return f"{sent / 2**20:.1f} MB sent before the upload ended: {status}"


def summarize(statuses: list[int]) -> str:
    counts: dict[int, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n}× {s if s > 0 else 'failed'}" for s, n in sorted(counts.items()))


def run_attacks(url: str, port: int, pid: int, seconds: float) -> None:
    unloaded = Phase("unloaded")
    with Watch(pid, unloaded):
        victim(url, unloaded, time.monotonic() + min(seconds, 15))
    maximal = service_time(url, maximal_request())
    phases = [unloaded]
    phases.append(idle_sockets(url, port, pid, seconds))
    phases.append(refused_flood(url, pid, seconds))
    phases.append(maximal_wave(url, pid, seconds))
    phases.append(resent_maximal(url, pid, seconds))
    upload = refused_upload(port)
    bound = 2 * unloaded.p(99) + maximal
    ms = {"maximal": 1000 * maximal, "p99": 1000 * unloaded.p(99), "bound": 1000 * bound}
    print(
        f"one maximal request (8,192 tokens) alone: {ms['maximal']:.0f} ms; "
        f"target p99 < 2 × {ms['p99']:.0f} + {ms['maximal']:.0f} = {ms['bound']:.0f} ms\n"
    )
    print("| phase | victim requests | failed | p50 ms | p99 ms | within target | peak RSS MB | notes |")
    print("| --- | ---: | ---: | ---: | ---: | :---: | ---: | --- |")
    for phase in phases:
        within = phase.p(99) < bound and phase.peak_rss_mb < 2048 and not phase.victim_failures
        print(
            f"| {phase.name} | {len(phase.victim)} | {phase.victim_failures} | {1000 * phase.p(50):.0f} | "
            f"{1000 * phase.p(99):.0f} | {'yes' if within or phase is unloaded else 'no'} | "
            f"{phase.peak_rss_mb:.0f} | {'; '.join(phase.notes)} |"
        )
    print(f"\nrefused upload: {upload}")
