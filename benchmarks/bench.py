"""`make bench`: sentcl against sentence-transformers on the same machine, data, model and settings.

    python benchmarks/bench.py [--device cpu|cuda] [--out docs/benchmarks.md] [--repeats 3] [--sts7-stand-in]

Every measurement runs in a process of its own (its peak RSS is that process's), peers alternating so
that load on the machine hits both alike; each number is the median of ``--repeats`` runs.

* **matmul ceiling**: fp32 GFLOP/s of transformer-shaped products ([B·L, d] × [d, 4d] and back) — the
  machine's FLOP limit for this model, measured in the same run;
* **training**: unsupervised SimCSE on all-MiniLM-L6-v2 (mean pooling, batch 64, max length 32, lr 3e-5,
  τ = 0.05 ↔ scale 20), the same sentence pool from ../shared/data for both. sentcl: its ``train()`` (the
  loop the CLI runs; per-step times and real tokens from metrics.jsonl). sentence-transformers: its
  trainer with MultipleNegativesRankingLoss on (s, s) pairs, timed by a callback, real tokens counted in
  its collator; and, once, sentcl's padded pass with torch's dropout masks (its state before unpadding).
  Steps after ``WARMUP`` warm-up steps; FLOPs counted by ``torch.utils.flop_counter`` on one step, padded
  and on the real tokens only (the useful work: the FLOP-limit column counts real tokens);
* **encode**: 10,000 real sentences, batch 64, each library's ``encode``;
* **STS**: STS-B dev, each library's evaluator, end to end from a loaded model; and sentcl's 7-task
  evaluation on the test sets present under $SENTCL_DATA (none in ../shared/data) or, with
  ``--sts7-stand-in``, on stand-ins with the real sizes (``write_sts7_stand_in``), with the FLOP floor
  of the full evaluation at the run's best ceiling;
* **int8**: sentcl's dynamic-int8 encode path, speed and STS-B dev cost; and the int8 kernels against fp32
  on the same products (in the ceiling part): the most any int8 path can gain on this machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP, STEPS, BATCH, MAX_LENGTH, LR = 2, 6, 64, 32, 3e-5
ENCODE_SENTENCES = 10_000
if os.environ.get("SENTCL_BENCH_QUICK"):  # a smoke test of the harness, not a measurement
    WARMUP, STEPS, ENCODE_SENTENCES = 1, 2, 300
ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    return Path(os.environ.get("SENTCL_DATA", ROOT.parent / "shared" / "data"))


def wiki(start: int, count: int) -> list[str]:
    with gzip.open(data_dir() / "wiki" / "sentences.txt.gz", "rt", encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    return lines[start : start + count]


def model_path() -> str:
    """The packaged all-MiniLM-L6-v2, or a copy of it at $SENTCL_BENCH_MODEL (e.g. on a GPU machine)."""
    from sentcl.model.backbone import resolve_model_path

    return os.environ.get("SENTCL_BENCH_MODEL") or resolve_model_path(
        "sentence-transformers/all-MiniLM-L6-v2"
    )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------------------ parts
def part_ceiling(device: str, int8: bool = False, dtype: str | None = None) -> dict:
    """The matmul ceiling in ``dtype`` ("bf16" / "fp32"; default: what each device trains in by default
    here); the ``ceiling`` part also measures bf16 on a CPU that multiplies it natively, and int8."""
    import torch

    from sentcl.hardware import detect

    results = {}
    tokens = BATCH * 2 * MAX_LENGTH
    if dtype is None:
        dtype = "bf16" if device == "cuda" else "fp32"
    if int8 and device == "cpu" and dtype == "fp32" and detect("cpu").native_bf16:
        bf16 = part_ceiling(device, dtype="bf16")
        extra = {"bf16_gflops": bf16["gflops"], "bf16_gflops_by_shape": bf16["gflops_by_shape"]}
    else:
        extra = {}
    dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    for m, k, n in ((tokens, 384, 1536), (tokens, 1536, 384), (tokens, 384, 384)):
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        times = []
        for _ in range(15 if device == "cpu" else 200):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            a @ b
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        results[f"{m}x{k}x{n}"] = 2 * m * k * n / statistics.median(times[5:]) / 1e9
    result = {"gflops_by_shape": results, "gflops": max(results.values()), "dtype": str(dtype)} | extra
    if int8 and device == "cpu":
        result |= int8_ceiling(tokens)
    return result


def int8_ceiling(rows: int) -> dict:
    """torch's dynamic-int8 Linear kernels on the same shapes (per-channel weights, activations quantised
    per call) against the fp32 Linear, both with bias, timed alike: a proxy for what int8 products can gain
    on this CPU. sentcl's int8 path itself runs in ONNX Runtime (model/onnx.py), whose kernels differ."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    ratios, int8 = {}, {}
    for k, n in ((384, 1536), (1536, 384), (384, 384)):
        linear = torch.nn.Sequential(torch.nn.Linear(k, n))
        with warnings.catch_warnings():  # torch marks its quantised types as deprecated
            warnings.simplefilter("ignore")
            quantized = quantize_dynamic(linear, {torch.nn.Linear: per_channel_dynamic_qconfig}, torch.qint8)
        x = torch.randn(rows, k)
        times: dict[str, list[float]] = {"fp32": [], "int8": []}
        with torch.inference_mode():
            for _ in range(15):  # interleaved, so that a drifting load hits both alike
                for name, layer in (("fp32", linear), ("int8", quantized)):
                    start = time.perf_counter()
                    layer(x)
                    times[name].append(time.perf_counter() - start)
        speeds = {name: 2 * rows * k * n / statistics.median(t[5:]) / 1e9 for name, t in times.items()}
        int8[f"{rows}x{k}x{n}"] = speeds["int8"]
        ratios[f"{rows}x{k}x{n}"] = speeds["int8"] / speeds["fp32"]
    engine = torch.backends.quantized.engine
    return {"int8_gops_by_shape": int8, "int8_over_fp32_by_shape": ratios,
            "int8_over_fp32": max(ratios.values()), "quantized_engine": engine}  # fmt: skip


def count_step_flops(device: str) -> dict:
    """FLOPs of one SimCSE step (forward + backward) of MiniLM on a batch of the pool, counted by
    ``torch.utils.flop_counter``: the padded pass, and the unpadded one sentcl runs by default on the CPU
    (the same products on the real tokens only; attention still per padded sentence)."""
    from torch.utils.flop_counter import FlopCounterMode

    from sentcl.data import ContrastiveDataset, Records
    from sentcl.model import ModelConfig, SentenceEncoder
    from sentcl.objectives import SimCSE, SimCSEConfig

    result = {}
    for unpad in (False, True):
        config = ModelConfig(name_or_path=model_path(), pooler="avg", unpad=unpad)
        encoder = SentenceEncoder.from_config(config).to(device)
        sentences = wiki(0, BATCH)
        records = Records("pool", [(s,) for s in sentences], list(range(1, BATCH + 1)))
        dataset = ContrastiveDataset(records, encoder.tokenizer, MAX_LENGTH)
        batch = dataset.collate([dataset[i] for i in range(BATCH)]).to(device)
        objective = SimCSE(SimCSEConfig(temperature=0.05), encoder)
        with FlopCounterMode(display=False) as counter:
            objective(batch).loss.backward()
        result["unpadded_flops" if unpad else "flops"] = counter.get_total_flops()
    return result | {
        "padded_tokens": int(batch.attention_mask.numel()),
        "real_tokens": int(batch.attention_mask.sum()),
    }


def part_train_sentcl(device: str, padded: bool = False) -> dict:
    """``padded``: the backbone on padded batches with torch's dropout masks (sentcl before unpadding)."""
    from sentcl.training import recipe_from_dict, train

    with tempfile.TemporaryDirectory() as tmp:
        pool = Path(tmp) / "pool.txt"
        pool.write_text("\n".join(wiki(0, BATCH * (WARMUP + STEPS) * 2)) + "\n", encoding="utf-8")
        config = recipe_from_dict(
            {
                "model": {"name_or_path": model_path(), "pooler": "avg",
                          "unpad": not padded, "fast_dropout": not padded},
                "data": {"train_file": str(pool), "max_length": MAX_LENGTH},
                "objective": {"name": "simcse", "temperature": 0.05},
                "training": {
                    "output_dir": f"{tmp}/run", "batch_size": BATCH, "learning_rate": LR,
                    "max_steps": WARMUP + STEPS, "eval_steps": 0, "logging_steps": 1, "seed": 42,
                    # on the CPU the default (auto: bf16 where the CPU multiplies it natively)
                    "device": device, "autocast": "bf16" if device == "cuda" else "auto",
                },
            }
        )  # fmt: skip
        precision = "bf16" if device == "cuda" or _auto_picks_bf16(device) else "fp32"
        # in this process, just before (load drifts on shared CPUs), in the precision the run trains in
        ceiling = part_ceiling(device, dtype=precision)["gflops"]
        train(config)
        records = [
            json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()
        ]
    seconds = {r["step"]: r["seconds"] for r in records}
    tokens = {r["step"]: r["tokens"] for r in records}
    measured = range(WARMUP + 1, WARMUP + STEPS + 1)
    elapsed = seconds[WARMUP + STEPS] - seconds[WARMUP]
    return {
        "sentences_per_s": BATCH * STEPS / elapsed,
        "tokens_per_s": sum(tokens[s] for s in measured) / elapsed,
        "ceiling_gflops": ceiling,
        "precision": precision,
    }


def _auto_picks_bf16(device: str) -> bool:
    from sentcl import precision

    return precision.decide("auto", device) == "bf16"


def part_train_st(device: str, bf16: bool = False) -> dict:
    """sentence-transformers' trainer; ``bf16``: ``bf16=True`` in its training arguments (its documented
    fast path; on a CPU it runs where the CPU multiplies bf16 natively)."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from transformers import TrainerCallback

    stamps: dict[int, float] = {}

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if device == "cuda":
                import torch

                torch.cuda.synchronize()
            stamps[state.global_step] = time.perf_counter()

    precision = "bf16" if bf16 or device == "cuda" else "fp32"
    ceiling = part_ceiling(device, dtype=precision)["gflops"]  # in this process, just before training
    model = SentenceTransformer(model_path(), device=device)
    model.max_seq_length = MAX_LENGTH
    pool = wiki(0, BATCH * (WARMUP + STEPS) * 2)
    dataset = Dataset.from_dict({"anchor": pool, "positive": pool})
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, per_device_train_batch_size=BATCH, learning_rate=LR, max_steps=WARMUP + STEPS,
            logging_steps=10_000, save_strategy="no", report_to=[], seed=42, warmup_steps=0,
            use_cpu=device == "cpu", bf16=precision == "bf16", dataloader_drop_last=True,
        )  # fmt: skip
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            loss=losses.MultipleNegativesRankingLoss(model, scale=20.0),
            callbacks=[Clock()],
        )
        counts: list[int] = []

        class Counting:  # its own collator, counting the real tokens of every batch it makes
            def __init__(self, inner):
                self.inner = inner

            def __getattr__(self, name):
                return getattr(self.inner, name)

            def __call__(self, features):
                batch = self.inner(features)
                counts.append(int(sum(v.sum() for k, v in batch.items() if k.endswith("attention_mask"))))
                return batch

        trainer.data_collator = Counting(trainer.data_collator)
        trainer.train()
    elapsed = stamps[WARMUP + STEPS] - stamps[WARMUP]
    return {
        "sentences_per_s": BATCH * STEPS / elapsed,
        "tokens_per_s": sum(counts[WARMUP : WARMUP + STEPS]) / elapsed,
        "ceiling_gflops": ceiling,
        "precision": precision,
    }


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def part_encode_sentcl(device: str, dtype: str = "fp32") -> dict:
    """sentcl's encode in ``dtype``: fp32; auto (``sentcl encode``'s default: on a CPU the fastest path
    measured there, model/auto_precision.py); int8 (ONNX Runtime's dynamic int8). Other than fp32: STS-B dev
    in it too."""
    from sentcl.evaluation import STSEvaluator
    from sentcl.model import SentenceEncoder, for_inference

    # int8: the model exported to ONNX and quantised by ONNX Runtime (what `sentcl encode --dtype int8` runs)
    encoder = for_inference(SentenceEncoder.load(model_path()), dtype, device=device)
    result = {"dtype": dtype, "stsb_dev": STSEvaluator(data_dir(), "stsb-dev")(encoder)["stsb_dev_spearman"]}
    onnx = not hasattr(encoder, "inference_autocast")  # auto may have chosen int8 (model/auto_precision.py)
    if dtype == "auto":
        result["chosen"] = "int8" if onnx else "bf16" if encoder.inference_autocast is not None else "fp32"
    sentences = wiki(20_000, ENCODE_SENTENCES)
    encoder.encode(sentences[:256], batch_size=BATCH)  # warm-up
    if not onnx:  # the work of the pass and the ceiling of its precision, both in this process
        from sentcl.data.collate import tokenize_texts

        lengths = tokenize_texts(encoder.tokenizer, sentences, encoder.max_length, desc=None).lengths()
        chosen = "bf16" if encoder.inference_autocast is not None else "fp32"
        result |= {"gflop": encode_flops(encoder, lengths) / 1e9, "precision": chosen}
        result["ceiling_gflops"] = part_ceiling(device, dtype=chosen)["gflops"]
    seconds = _timed(lambda: encoder.encode(sentences, batch_size=BATCH))
    return result | {"sentences_per_s": len(sentences) / seconds}


def part_cli_help(device: str) -> dict:
    """``sentcl --help`` in fresh processes, what a user waits for before any command: the median of 5 (the
    console script beside this Python; the top help imports no command, torch or transformers)."""
    script = Path(sys.executable).parent / "sentcl"
    command = (
        [str(script), "--help"] if script.exists() else [sys.executable, "-m", "sentcl.cli.main", "--help"]
    )
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        seconds.append(time.perf_counter() - start)
    return {"seconds": statistics.median(seconds), "runs": seconds}


def part_encode_st(device: str, bf16: bool = False) -> dict:
    """sentence-transformers' encode; ``bf16``: the model loaded in bf16 (``model_kwargs={"torch_dtype":
    torch.bfloat16}``, its documented reduced-precision path), with its STS-B dev."""
    import torch
    from sentence_transformers import SentenceTransformer

    kwargs = {"model_kwargs": {"torch_dtype": torch.bfloat16}} if bf16 else {}
    model = SentenceTransformer(model_path(), device=device, **kwargs)
    result = {"stsb_dev": _st_stsb_dev(model)} if bf16 else {}
    sentences = wiki(20_000, ENCODE_SENTENCES)
    model.encode(sentences[:256], batch_size=BATCH)
    seconds = _timed(lambda: model.encode(sentences, batch_size=BATCH))
    return result | {"sentences_per_s": len(sentences) / seconds}


def _stsb_dev_rows() -> list[list[str]]:
    import csv

    path = data_dir() / "stsb" / "senteval" / "sts-dev.csv"
    rows = csv.reader(path.read_text(encoding="utf-8").splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    return [r for r in rows if len(r) >= 7]


def _st_stsb_dev(model) -> float:
    import numpy as np
    from scipy.stats import spearmanr

    rows = _stsb_dev_rows()
    a = model.encode([r[5] for r in rows], batch_size=BATCH, normalize_embeddings=True)
    b = model.encode([r[6] for r in rows], batch_size=BATCH, normalize_embeddings=True)
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return float(spearmanr((a * b).sum(1), [float(r[4]) for r in rows])[0]) * 100


#: sentence-transformers 5.x in its own environment (make bench builds it): the backends its onnx and
#: openvino extras give, which cannot install beside sentcl's transformers 5
PEERS_PYTHON = ROOT / "benchmarks" / "peers" / ".venv" / "bin" / "python"
PEER_BACKENDS = ("onnx-int8", "openvino")


def part_encode_peer(device: str, backend: str) -> dict:
    """An encode measurement of benchmarks/peers/encode_peer.py in the peers' environment."""
    with tempfile.TemporaryDirectory() as tmp:
        sentences = Path(tmp) / "sentences.txt"
        sentences.write_text("\n".join(wiki(20_000, ENCODE_SENTENCES)), encoding="utf-8")
        stsb = data_dir() / "stsb" / "senteval" / "sts-dev.csv"
        script = ROOT / "benchmarks" / "peers" / "encode_peer.py"
        command = [
            str(PEERS_PYTHON),
            str(script),
            backend,
            model_path(),
            str(sentences),
            str(stsb),
            str(BATCH),
        ]
        offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ | offline)
    if done.returncode != 0:
        raise RuntimeError(f"peer {backend} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def part_sts_sentcl(device: str) -> dict:
    from sentcl.evaluation import STSEvaluator
    from sentcl.model import SentenceEncoder

    start = time.perf_counter()
    encoder = SentenceEncoder.load(model_path()).to(device)
    scores = STSEvaluator(data_dir(), "stsb-dev")(encoder)
    return {"seconds": time.perf_counter() - start, "scores": scores}


def part_sts_st(device: str) -> dict:
    import csv

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    start = time.perf_counter()
    model = SentenceTransformer(model_path(), device=device)
    scores = {}
    for split in ("dev",):
        path = data_dir() / "stsb" / "senteval" / f"sts-{split}.csv"
        rows = list(csv.reader(path.open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
        rows = [r for r in rows if len(r) >= 7]
        evaluator = EmbeddingSimilarityEvaluator(
            [r[5] for r in rows], [r[6] for r in rows], [float(r[4]) for r in rows], name=f"stsb-{split}"
        )
        scores |= evaluator(model)
    return {"seconds": time.perf_counter() - start, "scores": scores}


#: pair counts of the seven test sets of SimCSE's table (STS12–16 per file, STS-B test, SICK-R test)
STS7_PAIRS = {
    "STS12": {"MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750,
              "surprise.SMTnews": 399},
    "STS13": {"FNWN": 189, "headlines": 750, "OnWN": 561},
    "STS14": {"deft-forum": 450, "deft-news": 300, "headlines": 750, "images": 750, "OnWN": 750,
              "tweet-news": 750},
    "STS15": {"answers-forums": 375, "answers-students": 750, "belief": 375, "headlines": 750, "images": 750},
    "STS16": {"answer-answer": 254, "headlines": 249, "plagiarism": 230, "postediting": 244,
              "question-question": 209},
    "STSBenchmark": {"test": 1379},
    "SICKRelatedness": {"test": 4927},
}  # fmt: skip


def write_sts7_stand_in(folder: Path) -> None:
    """The seven STS test sets are not in ../shared/data; for *timing* the 7-task evaluation, write
    stand-ins in their real file layouts with their real pair counts (18,850 pairs), made of real pairs
    of the same kind (STS-B train + dev, then NLI premise/hypothesis pairs) with random gold scores."""
    import csv
    import random

    stsb = data_dir() / "stsb" / "senteval"
    rows = [
        r
        for split in ("train", "dev")
        for r in csv.reader(
            (stsb / f"sts-{split}.csv").open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE
        )
    ]
    pairs = [(r[5], r[6]) for r in rows if len(r) >= 7]
    with gzip.open(data_dir() / "nli" / "triplets.csv.gz", "rt", encoding="utf-8") as handle:
        triplets = list(csv.reader(handle))[1:]
    pairs += [(t[0], t[1]) for t in triplets] + [(t[0], t[2]) for t in triplets]
    pairs = [(a.replace("\t", " "), b.replace("\t", " ")) for a, b in pairs]
    randomness, used = random.Random(0), 0
    shrink = 20 if os.environ.get("SENTCL_BENCH_QUICK") else 1

    def take(count: int, low: float = 0.0) -> list[tuple[str, str, str]]:
        """``count`` pairs with random gold on the task's scale (STS 0–5, SICK 1–5: the readers check it)."""
        nonlocal used
        count = max(1, count // shrink)
        chunk = pairs[used : used + count]
        used += count
        return [(a, b, f"{randomness.uniform(low, 5):.2f}") for a, b in chunk]

    for task, files in STS7_PAIRS.items():
        if task == "STSBenchmark":
            (folder / "STSBenchmark").mkdir(parents=True)
            lines = [
                f"stand-in\tfile\t2017\t{i}\t{s}\t{a}\t{b}" for i, (a, b, s) in enumerate(take(files["test"]))
            ]
            (folder / "STSBenchmark" / "sts-test.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        elif task == "SICKRelatedness":
            (folder / "SICK").mkdir(parents=True)
            lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
            lines += [f"{i}\t{a}\t{b}\t{s}\tNEUTRAL" for i, (a, b, s) in enumerate(take(files["test"], 1.0))]
            (folder / "SICK" / "SICK_test_annotated.txt").write_text(
                "\n".join(lines) + "\n", encoding="utf-8"
            )
        else:
            (folder / f"{task}-en-test").mkdir(parents=True)
            for name, count in files.items():
                chunk = take(count)
                base = folder / f"{task}-en-test"
                (base / f"STS.input.{name}.txt").write_text(
                    "".join(f"{a}\t{b}\n" for a, b, _ in chunk), encoding="utf-8"
                )
                (base / f"STS.gs.{name}.txt").write_text(
                    "".join(f"{s}\n" for *_, s in chunk), encoding="utf-8"
                )
    if used > len(pairs):
        raise RuntimeError(f"only {len(pairs)} pairs for the {used} of the stand-in")


def part_sts7_sentcl(device: str, stand_in: bool = False, dtype: str = "fp32") -> dict:
    """The full 7-task STS evaluation (SimCSE's protocol): load, encode, score, timed on the test sets
    present under $SENTCL_DATA — or, with ``stand_in``, on stand-ins with the real sizes. Either way the
    FLOPs of its forward passes (of the stand-ins where no test set is present) over the best ceiling
    measured in this process: the time no implementation can beat on this machine."""
    from sentcl.evaluation import STSEvaluator
    from sentcl.model import SentenceEncoder

    ceiling = part_ceiling(device)["gflops"]
    with tempfile.TemporaryDirectory() as tmp:
        if stand_in:
            write_sts7_stand_in(Path(tmp))
        start = time.perf_counter()
        encoder = SentenceEncoder.load(model_path()).to(device).with_dtype(dtype)
        evaluator = STSEvaluator(tmp if stand_in else data_dir(), "sts")
        report = evaluator.report(encoder)
        seconds = time.perf_counter() - start
        chosen = "bf16" if encoder.inference_autocast is not None else "fp32"
        result = {"seconds": seconds, "tasks": len(report.scores), "stand_in": stand_in, "chosen": chosen}
        if not report.scores:  # nothing present: bound the full evaluation on the stand-ins
            write_sts7_stand_in(Path(tmp))
            evaluator = STSEvaluator(tmp, "sts")
        result |= sts7_work(encoder, evaluator)
    return result | {"ceiling_gflops": max(ceiling, part_ceiling(device)["gflops"])}


def sts7_work(encoder, evaluator) -> dict:
    """Pairs, distinct sentences, real tokens and forward-pass FLOPs of an STS evaluator's sets."""
    from sentcl.data.collate import tokenize_texts

    datasets = [d for task in evaluator.tasks for d in task.datasets.values()]
    sentences = sorted({s for d in datasets for s in d.sentences1 + d.sentences2})
    lengths = tokenize_texts(encoder.tokenizer, sentences, encoder.max_length, desc=None).lengths()
    return {
        "pairs": sum(len(d.sentences1) for d in datasets),
        "unique_sentences": len(sentences),
        "real_tokens": int(lengths.sum()),
        "encode_gflop": encode_flops(encoder, lengths) / 1e9,
    }


def encode_flops(encoder, lengths) -> float:
    """FLOPs of one forward pass over sentences of these token lengths, each without padding. Per
    sentence they are a·L + b·L² (products linear in L, attention maps quadratic): a and b fitted on
    ``torch.utils.flop_counter`` counts of one sentence at three lengths (exact, not estimated)."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    points = (8, 16, 32)
    counts = []
    for length in points:
        ids = torch.full((1, length), 1000, dtype=torch.long, device=encoder.device)
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            encoder.encode_tokens(ids, torch.ones_like(ids))
        counts.append(counter.get_total_flops())
    b, a, c = np.polyfit(points, counts, 2)
    lengths = np.asarray(lengths, dtype=np.float64)
    return float((a * lengths + b * lengths**2 + c).sum())


#: the matrix products in a profile (forward and backward, any precision)
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")
PROFILED_STEPS, PROFILED_BATCHES = 3, 4


def _profile_shares(profiler, wall: float, gflop: float, ceiling: float) -> dict:
    """From a ``torch.profiler`` run of ``wall`` seconds: the products' share of the time and the GFLOP/s
    they reach (all of ``gflop`` is theirs), the five heaviest other ops, and the share outside any op
    (Python, the loop, tokenisation, collation: the wall time no op accounts for)."""
    events = profiler.key_averages()
    ops = sum(e.self_cpu_time_total for e in events) / 1e6
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS) / 1e6
    rest = sorted((e for e in events if e.key not in MATMULS), key=lambda e: -e.self_cpu_time_total)
    return {
        "wall_s": wall,
        "matmul_share": matmul / wall,
        "outside_ops_share": max(0.0, 1 - ops / wall),
        "matmul_gflops": gflop / matmul,
        "matmul_of_ceiling": gflop / matmul / ceiling,
        "top_other_ops": [(e.key, e.self_cpu_time_total / 1e6 / wall) for e in rest[:5]],
    }


def part_profile(device: str) -> dict:
    """Where the time of the default training step and of the default encode goes (profile
    first), under ``torch.profiler``: ``PROFILED_STEPS`` SimCSE steps as the loop runs them (sentcl's
    default model options, ``training.autocast`` auto, its AdamW; collation inside the timed loop) after
    two unprofiled ones, and ``PROFILED_BATCHES`` batches of ``encode`` with ``--dtype auto`` (tokenisation
    inside). FLOPs counted by ``torch.utils.flop_counter`` on the same batches, outside the profile."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    from sentcl import precision
    from sentcl.data import ContrastiveDataset, Records
    from sentcl.model import ModelConfig, SentenceEncoder, for_inference
    from sentcl.objectives import SimCSE, SimCSEConfig
    from sentcl.training.optim import build_optimizer

    chosen = precision.decide("auto", device)
    encoder = SentenceEncoder.from_config(ModelConfig(name_or_path=model_path(), pooler="avg")).to(device)
    encoder.train()
    sentences = wiki(0, BATCH * (PROFILED_STEPS + 2))
    records = Records("pool", [(s,) for s in sentences], list(range(1, len(sentences) + 1)))
    dataset = ContrastiveDataset(records, encoder.tokenizer, MAX_LENGTH)
    objective = SimCSE(SimCSEConfig(temperature=0.05), encoder)
    optimizer = build_optimizer(objective, LR, 0.0)

    def step(index: int) -> None:
        batch = dataset.collate([dataset[i] for i in range(BATCH * index, BATCH * (index + 1))]).to(device)
        with precision.autocast("auto", device):
            loss = objective(batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for index in range(2):  # warm-up, unprofiled
        step(index)
    flops = 0
    for index in range(2, PROFILED_STEPS + 2):  # counted outside the profile: the counter slows steps
        batch = dataset.collate([dataset[i] for i in range(BATCH * index, BATCH * (index + 1))]).to(device)
        with FlopCounterMode(display=False) as counter, precision.autocast("auto", device):
            loss = objective(batch).loss
        with FlopCounterMode(display=False) as backward:
            loss.backward()
        optimizer.zero_grad(set_to_none=True)
        flops += counter.get_total_flops() + backward.get_total_flops()
    ceiling = part_ceiling(device, dtype=chosen)["gflops"]
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        for index in range(2, PROFILED_STEPS + 2):
            step(index)
        wall = time.perf_counter() - start
    train = _profile_shares(profiler, wall, flops / 1e9, ceiling) | {"precision": chosen}

    model = for_inference(SentenceEncoder.load(model_path()), "auto", device=device)
    texts = wiki(20_000, BATCH * PROFILED_BATCHES)
    model.encode(texts[:BATCH], batch_size=BATCH)  # warm-up
    from sentcl.data.collate import tokenize_texts

    lengths = tokenize_texts(model.tokenizer, texts, model.max_length, desc=None).lengths()
    gflop = encode_flops(model, lengths) / 1e9
    inference = "bf16" if model.inference_autocast is not None else "fp32"
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        model.encode(texts, batch_size=BATCH)
        wall = time.perf_counter() - start
    ceiling = part_ceiling(device, dtype=inference)["gflops"]
    encode = _profile_shares(profiler, wall, gflop, ceiling) | {"precision": inference}
    return {"train": train, "encode": encode}


PARTS = {
    "ceiling": lambda device: part_ceiling(device, int8=True),
    "cli-help": part_cli_help,
    "flops": count_step_flops,
    "profile": part_profile,
    "train-sentcl": part_train_sentcl,
    "train-sentcl-padded": lambda device: part_train_sentcl(device, padded=True),
    "train-st": part_train_st,
    "train-st-bf16": lambda device: part_train_st(device, bf16=True),
    "encode-sentcl": part_encode_sentcl,
    "encode-sentcl-auto": lambda device: part_encode_sentcl(device, "auto"),
    "encode-sentcl-int8": lambda device: part_encode_sentcl(device, "int8"),
    "encode-st": part_encode_st,
    "encode-st-bf16": lambda device: part_encode_st(device, bf16=True),
    "encode-st-onnx-int8": lambda device: part_encode_peer(device, "onnx-int8"),
    "encode-st-openvino": lambda device: part_encode_peer(device, "openvino"),
    "sts-sentcl": part_sts_sentcl,
    "sts-st": part_sts_st,
    "sts7-sentcl": part_sts7_sentcl,
    "sts7-stand-in": lambda device: part_sts7_sentcl(device, stand_in=True),
    "sts7-stand-in-auto": lambda device: part_sts7_sentcl(device, stand_in=True, dtype="auto"),
}


class PartFailedError(RuntimeError):
    """A part's process failed: the bench reports it as a row with its error and goes on."""


def run_part(name: str, device: str) -> dict:
    """One part in a fresh process; its JSON result plus the process's peak RSS."""
    command = [sys.executable, __file__, "--part", name, "--device", device]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if os.environ.get("SENTCL_BENCH_FAIL") == name:  # the harness's own test: this part fails
        command = [sys.executable, "-c", "raise SystemExit('made to fail by SENTCL_BENCH_FAIL')"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        said = [line for line in done.stderr.strip().splitlines() if line.strip()] or [
            f"exit {done.returncode}"
        ]
        raise PartFailedError(said[-1][:300])
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"wall_s": time.perf_counter() - start}


#: ``--parts``: the groups a quick run may pick (the ceiling, the FLOP count and ``sentcl --help`` always run)
GROUPS = {
    "train": ("train-sentcl", "train-sentcl-padded", "train-st", "train-st-bf16"),
    "encode": (
        "encode-sentcl", "encode-sentcl-auto", "encode-sentcl-int8", "encode-st", "encode-st-bf16",
        "encode-st-onnx-int8", "encode-st-openvino",
    ),
    "sts": ("sts-sentcl", "sts-st"),
    "sts7": ("sts7-sentcl", "sts7-stand-in", "sts7-stand-in-auto"),
    "profile": ("profile",),
    "students": ("students",),  # benchmarks/students.py: the students' speed-quality frontier (~15 min)
    "scale": ("scale",),  # benchmarks/scale.py: Ray encode and the lance index at 1M sentences (~2 h)
}  # fmt: skip


def chosen_parts(spec: str) -> set[str]:
    names = [part.strip() for part in spec.split(",") if part.strip()]
    unknown = [n for n in names if n not in GROUPS]
    if unknown or not names:
        raise SystemExit(f"--parts {spec!r}: choose from {', '.join(GROUPS)} (comma-separated)")
    return {"ceiling", "flops", "cli-help"} | {part for name in names for part in GROUPS[name]}


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write every measurement here")
    parser.add_argument("--out", help="write the markdown table here")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness only")
    parser.add_argument(
        "--parts",
        default=",".join(GROUPS),
        help=f"comma-separated groups to run (default: all): {', '.join(GROUPS)}; e.g. --parts encode",
    )
    parser.add_argument(
        "--sts7-stand-in",
        action="store_true",
        help="time the 7-task STS evaluation on stand-ins with the real sizes (+4-5 min on 2 cores) "
        "instead of on the test sets present under $SENTCL_DATA",
    )
    args = parser.parse_args()
    if args.quick:
        os.environ["SENTCL_BENCH_QUICK"] = "1"  # the parts' processes read it; this one too:
        global WARMUP, STEPS, ENCODE_SENTENCES
        WARMUP, STEPS, ENCODE_SENTENCES = 1, 2, 300
    if args.part:
        result = PARTS[args.part](args.device)
        print(json.dumps(result | {"peak_rss_mb": peak_rss_mb()}))
        return 0

    started = time.perf_counter()
    wanted = chosen_parts(args.parts)
    runs: dict[str, list[dict]] = {name: [] for name in PARTS}
    failures: dict[str, str] = {}
    runs["ceiling"].append(run_part("ceiling", args.device))
    runs["flops"].append(run_part("flops", args.device))
    attempt("cli-help", args.device, runs, failures)
    if (
        args.device == "cpu" and "profile" in wanted
    ):  # where the step's and encode's time goes (profile first)
        attempt("profile", args.device, runs, failures)
    for repeat in range(args.repeats):  # peers alternate, so machine load hits both alike
        names = ["train-sentcl", "train-st"] + (["train-sentcl-padded"] if repeat < 1 else [])
        # 10k sentences take minutes: one run per peer, in the first round
        sts7 = "sts7-stand-in" if args.sts7_stand_in else "sts7-sentcl"
        encoding = ["encode-sentcl", "encode-sentcl-auto", "encode-st", "sts-sentcl", "sts-st", sts7]
        if args.sts7_stand_in:
            encoding.append("sts7-stand-in-auto")
        if args.device == "cpu":  # int8 beside its peers: the load of a shared machine drifts over minutes
            encoding.insert(2, "encode-sentcl-int8")
        # the encode ratios' peers (the default path, int8, sentence-transformers) every round: one pass
        # over 10k sentences on a shared machine varies by more than the targets' margins
        if args.device == "cpu" and _auto_picks_bf16(args.device):  # its documented bf16 paths
            names.append("train-st-bf16")
            encoding.append("encode-st-bf16")
        if args.device == "cpu" and PEERS_PYTHON.exists():
            encoding += [f"encode-st-{backend}" for backend in PEER_BACKENDS]
        fast = [
            n for n in encoding if n.startswith(("encode-sentcl-auto", "encode-sentcl-int8", "encode-st"))
        ]
        names += encoding if repeat < 1 else fast
        for name in names:
            if name in wanted and name not in failures:  # a part that failed once is not tried again
                attempt(name, args.device, runs, failures)
    table = report(runs, args.device, time.perf_counter() - started, failures)
    if "students" in wanted and args.device == "cpu":
        table += "\n## Students: the speed-quality frontier\n\n" + students_section(args)
    if "scale" in wanted and args.device == "cpu":
        table += "\n## Scale: Ray encode and an index on disk\n\n" + scale_section(args)
    print(table)
    if args.out:
        Path(args.out).write_text(table, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(runs | {"failed": failures}, indent=2), encoding="utf-8")
    return 0


def students_section(args) -> str:
    """benchmarks/students.py in a process of its own, its table and figure beside ``--out``."""
    folder = Path(args.out).parent if args.out else ROOT / "runs" / "bench"
    options = ["--figure", str(folder / "students_frontier.png")]
    quick = ["--quick", "--repeats", "1"]
    section = script_section("students", args, options, quick)
    return section + (f"\nFigure: {folder / 'students_frontier.png'}\n" if "FAILED" not in section else "")


def scale_section(args) -> str:
    """benchmarks/scale.py (issue 58, docs/scale.md: 1M sentences, about 2 h on 2 cores)."""
    return script_section("scale", args, [], ["--rows", "3000"])


def script_section(name: str, args, options: list[str], quick: list[str]) -> str:
    """benchmarks/NAME.py in a process of its own, writing NAME.md and NAME.json beside ``--out``; its
    table, or one line with its error, as a failed part is a row."""
    folder = Path(args.out).parent if args.out else ROOT / "runs" / "bench"
    command = [
        sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--out", str(folder / f"{name}.md"),
        "--json", str(folder / f"{name}.json"), *options,
    ] + (quick if os.environ.get("SENTCL_BENCH_QUICK") else [])  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        return f"{name}: FAILED: {lines[-1]}\n"
    return (folder / f"{name}.md").read_text(encoding="utf-8")


def attempt(name: str, device: str, runs: dict[str, list[dict]], failures: dict[str, str]) -> None:
    try:
        runs[name].append(run_part(name, device))
        print(f"{name}: {runs[name][-1]}", file=sys.stderr)
    except PartFailedError as failure:
        failures[name] = str(failure)
        print(f"{name}: FAILED: {failure}", file=sys.stderr)


def sts7_lines(runs: dict[str, list[dict]], ceilings: list[float], rss) -> list[str]:
    """The 7-task evaluation: its time where it ran on something, and the FLOP floor of the full one."""
    name = "sts7-stand-in" if runs["sts7-stand-in"] else "sts7-sentcl"
    if not runs[name]:
        return []
    sts7 = runs[name][0]
    best = max([*ceilings, sts7["ceiling_gflops"]])  # the floor: the machine at its best in this run
    size = f"{sts7['pairs']:,} pairs, {sts7['unique_sentences']:,} distinct sentences"
    if sts7["stand_in"]:
        timed = (
            f"on stand-in sets with the real sizes ({size}; a timing, not a score): "
            f"sentcl **{sts7['seconds']:.1f} s** (load, encode, score), peak RSS {rss(name)} MB."
        )
    elif sts7["tasks"]:
        timed = (
            f"on the {sts7['tasks']} of the 7 test sets present under $SENTCL_DATA ({size}): sentcl "
            f"**{sts7['seconds']:.1f} s** (load, encode, score), peak RSS {rss(name)} MB."
        )
    else:
        timed = (
            f"none of the 7 test sets is present under $SENTCL_DATA, so nothing was timed "
            f"(`python benchmarks/bench.py --sts7-stand-in` times stand-ins with their real sizes: {size})."
        )
    whose = "its" if sts7["tasks"] else "the stand-ins'"
    return [
        "",
        f"7-task STS evaluation (SimCSE's protocol, STS12–16 + STS-B test + SICK-R test): {timed} "
        f"The forward passes of {whose} {sts7['unique_sentences']:,} sentences alone are "
        f"{sts7['encode_gflop']:,.0f} GFLOP ({sts7['real_tokens']:,} real tokens, no padding): "
        f"**{sts7['encode_gflop'] / best:.0f} s** at the best ceiling measured in this run "
        f"({best:.1f} GFLOP/s), before loading, tokenising or scoring; 90 s would need "
        f"{sts7['encode_gflop'] / 90:.0f} GFLOP/s.",
    ]


#: STS-B dev within this many points of fp32 counts as equal quality
EQUAL_QUALITY = 0.3
#: the targets, against the peer at its best
TARGETS = {"train": 2.5, "encode": 1.5, "ceiling": 0.8, "sts7_auto_s": 30.0}


def peer_lines(runs: dict[str, list[dict]], fp32_dev: float, per_token: float, rss) -> list[str]:
    """The peer at its best: its fastest trainer, its fastest encode backend at equal quality (STS-B dev
    within EQUAL_QUALITY of fp32), sentcl's defaults against them, and the targets, met or not."""
    labels = {
        "encode-st": "sentence-transformers fp32 (its default)",
        "encode-st-bf16": "sentence-transformers bf16 (`model_kwargs={'torch_dtype': torch.bfloat16}`)",
        "encode-st-onnx-int8": "sentence-transformers ONNX dynamic int8",
        "encode-st-openvino": "sentence-transformers OpenVINO",
        "encode-sentcl-auto": "sentcl default (`--dtype auto`)",
        "encode-sentcl-int8": "sentcl int8 (ONNX Runtime, dynamic)",
    }
    rows = []
    for name, label in labels.items():
        if not runs.get(name):
            continue
        dev = fp32_dev if name == "encode-st" else runs[name][0].get("stsb_dev")
        if name.startswith("encode-st-") and "label" in runs[name][0]:
            label = f"sentence-transformers {runs[name][0]['label']}"
        rate = median_of(runs[name], "sentences_per_s")
        rows.append((name, label, rate, dev))
    if not any(name != "encode-st" and name.startswith("encode-st") for name, *_ in rows):
        return []
    lines = [
        "",
        row("encode against the peer at its best (10k sentences)", "sentences/s", "STS-B dev",
            "Δ to fp32", "equal quality", "peak RSS MB"),
        row("---", "---:", "---:", "---:", ":---:", "---:"),
    ]  # fmt: skip
    for name, label, rate, dev in rows:
        delta = dev - fp32_dev if dev is not None else float("nan")
        equal = "yes" if abs(delta) <= EQUAL_QUALITY else "no"
        lines.append(row(label, f"{rate:.1f}", f"{dev:.2f}", f"{delta:+.2f}", equal, rss(name)))
    peers = [(rate, label) for name, label, rate, dev in rows
             if name.startswith("encode-st") and abs(dev - fp32_dev) <= EQUAL_QUALITY]  # fmt: skip
    if not peers or not runs.get("encode-sentcl-auto"):
        return lines
    best_rate, best_label = max(peers)
    default = median_of(runs["encode-sentcl-auto"], "sentences_per_s")
    encode_ratio = default / best_rate
    encode_share = statistics.median(
        r["gflop"] * r["sentences_per_s"] / ENCODE_SENTENCES / r["ceiling_gflops"]
        for r in runs["encode-sentcl-auto"]
    )
    trainers = [
        (median_of(runs[n], "sentences_per_s"), n) for n in ("train-st", "train-st-bf16") if runs.get(n)
    ]
    sts7 = runs.get("sts7-stand-in-auto") or []

    def verdict(value: float, target: float, more: bool = True) -> str:
        return "**met**" if (value >= target if more else value <= target) else "**not met**"

    lines += ["", f"Fastest peer encode at equal quality: {best_label} ({best_rate:.1f} sentences/s)."]
    targets = [
        f"- default encode ≥ {TARGETS['encode']}× the fastest peer backend at equal quality: "
        f"{encode_ratio:.2f}× — {verdict(encode_ratio, TARGETS['encode'])};",
        f"- default encode at ≥ {TARGETS['ceiling']} of its precision's matmul ceiling: {encode_share:.2f} "
        f"(its forward FLOPs on the real tokens over the ceiling measured in its process) — "
        f"{verdict(encode_share, TARGETS['ceiling'])};",
    ]
    profiled = runs.get("profile") or [{}]
    gaps = [("encode", encode_ratio, TARGETS["encode"], default, encode_share, profiled[0].get("encode"))]
    if trainers and runs.get("train-sentcl"):
        peer_train, peer_name = max(trainers)
        train_rate = median_of(runs["train-sentcl"], "sentences_per_s")
        train_ratio = train_rate / peer_train
        train_share = statistics.median(
            r["tokens_per_s"] * per_token / (r["ceiling_gflops"] * 1e9) for r in runs["train-sentcl"]
        )
        lines.append(
            f"Fastest peer trainer: {'bf16=True' if peer_name.endswith('bf16') else 'fp32'} "
            f"({peer_train:.1f} sentences/s)."
        )
        targets = [
            f"- training with defaults ≥ {TARGETS['train']}× the fastest peer trainer: {train_ratio:.2f}× — "
            f"{verdict(train_ratio, TARGETS['train'])};",
            f"- training at ≥ {TARGETS['ceiling']} of its precision's matmul ceiling: {train_share:.2f} — "
            f"{verdict(train_share, TARGETS['ceiling'])};",
            *targets,
        ]
        gaps.insert(
            0, ("training", train_ratio, TARGETS["train"], train_rate, train_share, profiled[0].get("train"))
        )
    lines += ["", "Targets, against the peer at its best:", *targets]
    if sts7:
        seconds = sts7[0]["seconds"]
        lines.append(
            f"- 7-task STS evaluation ≤ {TARGETS['sts7_auto_s']:.0f} s with `--dtype auto` (stand-ins with "
            f"the real sizes): {seconds:.1f} s — {verdict(seconds, TARGETS['sts7_auto_s'], more=False)}."
        )
    # by how much a ratio target is missed, and whether the ceiling measured in this run
    # allows it (the share of the ceiling it would need, at the FLOPs per sentence measured here)
    for what, ratio, target, rate, share, profile in gaps:
        if ratio < target:
            needed, needed_share = rate * target / ratio, share * target / ratio
            why = (
                "the ceiling allows it, so the gap is how far the step runs below its products' ceiling ("
                + (profile_text(profile) if profile else "not profiled in this run")
                + ")"
                if needed_share < 1
                else "beyond the ceiling: out of reach on this machine"
            )
            lines.append(
                f"- {what} misses its target by {target / ratio:.2f}×: it would need {needed:.0f} "
                f"sentences/s, {needed_share:.2f} of the matmul ceiling measured in this run (now "
                f"{share:.2f}); {why}"
            )
    return lines


def profile_text(profile: dict) -> str:
    """Where the time goes, from the ``profile`` part of the same run."""
    p = profile
    others = ", ".join(f"`{name.removeprefix('aten::')}` {share:.0%}" for name, share in p["top_other_ops"])
    return (
        f"profiled in this run, {p['precision']}: the matrix products take {p['matmul_share']:.0%} of the "
        f"time and run at {p['matmul_gflops']:.0f} GFLOP/s, {p['matmul_of_ceiling']:.2f} of the ceiling; "
        f"the heaviest other ops {others}; outside any op (Python, tokenisation, the loop) "
        f"{p['outside_ops_share']:.0%}. With all of that free it would run at most "
        f"{1 / p['matmul_share']:.2f}× faster, and with the products at the ceiling too "
        f"{1 / (p['matmul_share'] * p['matmul_of_ceiling']):.2f}×"
    )


def row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def report(
    runs: dict[str, list[dict]], device: str, seconds: float, failures: dict[str, str] | None = None
) -> str:
    """The tables of the parts that ran; a part that failed is a row with its error, not a stopped bench."""
    ceiling = runs["ceiling"][0]["gflops"]
    flops = runs["flops"][0]
    # the useful work: the products on the real tokens (the unpadded pass), per real token
    per_token = flops["unpadded_flops"] / flops["real_tokens"]

    def have(*names: str) -> bool:
        return all(runs.get(name) for name in names)

    def rss(name: str) -> str:
        return f"{max(r['peak_rss_mb'] for r in runs[name]):,.0f}"

    def precision(name: str) -> str:
        return runs[name][0].get("precision", "fp32")

    def train_row(label: str, name: str) -> str:
        rate, tokens = median_of(runs[name], "sentences_per_s"), median_of(runs[name], "tokens_per_s")
        # each run against the ceiling measured in its own process just before it
        share = statistics.median(
            r["tokens_per_s"] * per_token / (r["ceiling_gflops"] * 1e9) for r in runs[name]
        )
        return row(label, f"{rate:.1f}", f"{tokens:,.0f}", f"{share:.2f}", rss(name))

    trained = [name for name in ("train-sentcl", "train-st", "train-sentcl-padded") if runs.get(name)]
    measured = [r["ceiling_gflops"] for name in trained for r in runs[name]]
    fp32_measured = [  # the 7-task evaluation encodes in fp32 (evaluate's default --dtype)
        r["ceiling_gflops"] for name in trained for r in runs[name] if r.get("precision", "fp32") == "fp32"
    ]
    from sentcl.hardware import detect

    bf16_ceiling = runs["ceiling"][0].get("bf16_gflops")
    counts = ", ".join(f"{name}: {len(runs[name])}" for name in PARTS if runs.get(name))
    in_runs = (
        f", {min(measured):.1f}–{max(measured):.1f} GFLOP/s (min–max) measured in the training runs "
        f"themselves (transformer-shaped products in the precision each run trains in; the FLOP-limit "
        f"column uses each run's own)"
        if measured
        else ""
    )
    lines = [
        f"Device {device}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{detect(device).describe()}"
        + (f"; bfloat16 matmul ceiling {bf16_ceiling:.1f} GFLOP/s" if bf16_ceiling else "")
        + "; "
        f"{runs['ceiling'][0]['dtype'].removeprefix('torch.')} matmul ceiling {ceiling:.1f} GFLOP/s at the "
        f"start{in_runs}; one SimCSE step ({BATCH} sentences × 2 views) = "
        f"{flops['flops'] / 1e9:.1f} GFLOP padded ({flops['padded_tokens']} tokens), "
        f"{flops['unpadded_flops'] / 1e9:.1f} GFLOP on its {flops['real_tokens']} real tokens "
        f"({per_token / 1e6:.1f} MFLOP per real token: the FLOP-limit column). Runs per part (medians "
        f"reported): {counts}; the benchmark took {seconds / 60:.1f} min.",
    ]
    if have("train-sentcl", "train-st", "train-sentcl-padded"):
        train_ratio = median_of(runs["train-sentcl"], "sentences_per_s") / median_of(
            runs["train-st"], "sentences_per_s"
        )
        padded_ratio = median_of(runs["train-sentcl-padded"], "sentences_per_s") / median_of(
            runs["train-st"], "sentences_per_s"
        )
        lines += [
            "",
            row("training: unsup. SimCSE, MiniLM, batch 64, len 32", "sentences/s", "real tokens/s",
                "of FLOP limit", "peak RSS MB"),
            row("---", "---:", "---:", "---:", "---:"),
            train_row(f"sentcl (default settings: {precision('train-sentcl')})", "train-sentcl"),
            train_row(
                f"sentcl, padded (model.unpad: false, model.fast_dropout: false; "
                f"{precision('train-sentcl-padded')})",
                "train-sentcl-padded",
            ),
            train_row("sentence-transformers (MNRL on (s, s))", "train-st"),
            "",
            f"Training ratio sentcl / sentence-transformers: **{train_ratio:.2f}×** (padded, as before "
            f"unpadding: **{padded_ratio:.2f}×**).",
        ]  # fmt: skip
    fp32_dev = None
    if have("encode-sentcl", "encode-st"):
        encode = {name: median_of(runs[name], "sentences_per_s") for name in ("encode-sentcl", "encode-st")}
        fp32_dev = runs["encode-sentcl"][0].get("stsb_dev")
        lines += [
            "",
            row(f"encode: {ENCODE_SENTENCES:,} wiki sentences, batch {BATCH}", "sentences/s", "ratio",
                "peak RSS MB"),
            row("---", "---:", "---:", "---:"),
            row("sentcl fp32", f"{encode['encode-sentcl']:.1f}",
                f"{encode['encode-sentcl'] / encode['encode-st']:.2f}×", rss("encode-sentcl")),
        ]  # fmt: skip
        if runs.get("encode-sentcl-auto"):
            auto = runs["encode-sentcl-auto"][0]
            auto_rate = median_of(runs["encode-sentcl-auto"], "sentences_per_s")
            lines.append(
                row(
                    f"sentcl default (`sentcl encode`: --dtype auto, {auto['chosen']} here)",
                    f"{auto_rate:.1f}",
                    f"{auto_rate / encode['encode-st']:.2f}×",
                    rss("encode-sentcl-auto"),
                )
            )
        if runs.get("encode-sentcl-int8"):
            int8_rate = median_of(runs["encode-sentcl-int8"], "sentences_per_s")
            lines.append(
                row(
                    "sentcl int8 (ONNX Runtime, dynamic)",
                    f"{int8_rate:.1f}",
                    f"{int8_rate / encode['encode-st']:.2f}×",
                    rss("encode-sentcl-int8"),
                )
            )
        lines.append(row("sentence-transformers", f"{encode['encode-st']:.1f}", "1.00×", rss("encode-st")))
    sts_scores = runs["sts-sentcl"][0]["scores"] if runs.get("sts-sentcl") else None
    if have("sts-sentcl", "sts-st") and sts_scores is not None:
        sts = {name: median_of(runs[name], "seconds") for name in ("sts-sentcl", "sts-st")}
        lines += [
            "",
            row("STS evaluation: STS-B dev, 1,500 pairs (load, encode, score)", "seconds", "peak RSS MB"),
            row("---", "---:", "---:"),
            row("sentcl", f"{sts['sts-sentcl']:.1f}", rss("sts-sentcl")),
            row("sentence-transformers", f"{sts['sts-st']:.1f}", rss("sts-st")),
            "",
            f"sentcl's scores: {json.dumps({k: round(v, 2) for k, v in sts_scores.items()})}.",
        ]
        fp32_dev = fp32_dev if fp32_dev is not None else sts_scores["stsb_dev_spearman"]
    if fp32_dev is not None:
        lines += peer_lines(runs, fp32_dev, per_token, rss)
    if any(runs.get(name) for name in ("sts7-sentcl", "sts7-stand-in")):
        lines += sts7_lines(runs, [*fp32_measured, ceiling], rss)
    if runs.get("sts7-stand-in-auto"):
        auto7 = runs["sts7-stand-in-auto"][0]
        lines.append(
            f"The same stand-in evaluation with `--dtype auto` ({auto7['chosen']} here): "
            f"**{auto7['seconds']:.1f} s**, peak RSS {rss('sts7-stand-in-auto')} MB."
        )
    if fp32_dev is not None:
        for name in ("encode-sentcl-auto", "encode-sentcl-int8"):
            if runs.get(name):
                other = runs[name][0]
                label = f"auto ({other['chosen']})" if other["dtype"] == "auto" else other["dtype"]
                lines.append(f"STS-B dev Spearman, fp32 → {label}: {fp32_dev:.2f} → {other['stsb_dev']:.2f}.")
    kernels = runs["ceiling"][0].get("int8_over_fp32_by_shape")
    if kernels and have("encode-sentcl", "encode-st"):
        shapes = ", ".join(f"{shape} {ratio:.2f}×" for shape, ratio in kernels.items())
        needed = (
            2
            * median_of(runs["encode-st"], "sentences_per_s")
            / median_of(runs["encode-sentcl"], "sentences_per_s")
        )
        lines.append(
            f"torch's int8 kernels against fp32 on the same products (dynamic int8 Linear, engine "
            f"{runs['ceiling'][0]['quantized_engine']}): {shapes} — a proxy for what int8 products gain here "
            f"(sentcl's int8 path runs ONNX Runtime's); 2× sentence-transformers would need {needed:.2f}× "
            f"over sentcl's fp32 encode."
        )
    if have("cli-help"):
        help_s = runs["cli-help"][0]["seconds"]
        verdict = "met" if help_s < 1.0 else "**not met**"
        lines += [
            "",
            f"`sentcl --help`: {help_s:.2f} s (median of 5 fresh processes; target < 1 s: {verdict}).",
        ]
    if failures:
        lines += ["", row("part that failed", "its error (last line)"), row("---", "---")]
        lines += [row(f"`{name}`", error.replace("|", "\\|")) for name, error in failures.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
