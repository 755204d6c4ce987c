"""The CPU speed–quality frontier of sentcl's students against their teacher and anchors (docs/students.md).

In one run on one machine: trains sentcl's static student (configs/students/static_minilm.yaml) and its
3-layer student (configs/students/minilm_l3.yaml), makes the anchors (model2vec's ``distill`` of the same
teacher, in the peers' environment; a sentence-transformers ``StaticEmbedding`` from that start trained with
its own
``MultipleNegativesRankingLoss`` on the NLI triplets for as many steps of the same batch as sentcl's static
student, its learning rate the better on STS-B dev of 0.01 and 0.2), then measures every point in one process:
STS-B dev (where models were chosen), STS-B train and paraphrase retrieval on STS-B train (nDCG@10,
evaluation/retrieval.py; neither ever used for a choice), sentences/s encoding 10,000 wiki sentences (batch
64, the median of 3 runs, the points alternating, a run at least 2 s of repeated passes), the weights' size
on disk and the training wall time. Each student, and the sentence-transformers anchor at its chosen
learning rate, is trained with every seed of ``--seeds``: the quality columns are mean ± std over them, the
speed and size the first seed's model's. Writes a markdown table, the JSON and a figure (sentences/s on a
log axis against STS-B dev).

    python benchmarks/students.py --out runs/bench/students.md --json runs/bench/students.json \\
        --figure docs/images/students_frontier.png
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import PEERS_PYTHON, ROOT, data_dir, model_path, wiki

STUDENTS = {
    "static": ROOT / "configs" / "students" / "static_minilm.yaml",
    "3-layer": ROOT / "configs" / "students" / "minilm_l3.yaml",
}
ENCODE_SENTENCES = 10_000
BATCH = 64
#: one timed run of a point lasts at least this long (passes over the 10k sentences repeated): a single
#: 0.3 s pass of a static model is at the mercy of one hiccup of a shared machine
MIN_SECONDS = 2.0
#: what tokenises in sentence-transformers' StaticEmbedding (sentcl's static models read the ids from tokie
#: where tokie gives the same, src/sentcl/model/token_ids.py)
ST_TOKENIZERS = "Hugging Face tokenizers"


def train_student(name: str, output: Path, overrides: list[str]) -> float:
    """``sentcl train`` of the student's recipe into ``output``; the wall time (the teacher's table, cached in
    $SENTCL_CACHE after its first run, is part of the first student's time on a fresh machine)."""
    start = time.perf_counter()
    sentcl = Path(sys.executable).parent / "sentcl"
    command = [str(sentcl), "train", str(STUDENTS[name]), "--output", str(output), "--overwrite"]
    subprocess.run(command + overrides, check=True, cwd=ROOT)
    return time.perf_counter() - start


def peer(python: Path | str, *arguments: str) -> dict:
    """One anchor (benchmarks/peers/students_peer.py) in ``python``'s environment: its JSON line; a failure
    ends the run with the anchor's own error."""
    script = ROOT / "benchmarks" / "peers" / "students_peer.py"
    done = subprocess.run([str(python), str(script), *arguments], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"anchor {arguments[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def size_on_disk(folder: Path | None) -> int | None:
    if folder is None:
        return None
    return sum(path.stat().st_size for path in folder.rglob("*") if path.suffix in (".safetensors", ".onnx"))


def measure(points: dict[str, tuple], repeats: int, speed_only: dict | None = None) -> dict[str, dict]:
    """Every point's scores (mean ± std over its seeds' models) and speed (its first model's), in this
    process, the speed runs alternating; ``speed_only``: name → (loader, the point whose model it is), a
    model timed in another library's encode, its scores that point's. Every tokenizer may use both cores
    (``TOKENIZERS_PARALLELISM``, which ``make`` turns off, is on here): a static model's speed is its
    tokenizer's."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from sentcl.evaluation import STSEvaluator
    from sentcl.evaluation.retrieval import RetrievalEvaluator

    data = data_dir()
    dev, train = STSEvaluator(data, "stsb-dev"), STSEvaluator(data, "stsb-train")
    retrieval = RetrievalEvaluator(data, split="train")
    sentences = wiki(20_000, ENCODE_SENTENCES)
    models = {name: make() for name, (make, *_) in points.items()}
    rows = {}
    for name, model in models.items():
        _, folder, seconds, *more = points[name]  # more: the other seeds' loaders, where trained
        others = more[0] if more else []
        scores = [score(model, dev, train, retrieval)] + [
            score(make(), dev, train, retrieval) for make in others
        ]
        rows[name] = {
            **{key: statistics.mean(s[key] for s in scores) for key in scores[0]},
            **{
                f"{key}_std": statistics.stdev(s[key] for s in scores) for key in scores[0] if len(scores) > 1
            },
            "seeds": len(scores),
            "bytes": size_on_disk(folder),
            "train_seconds": seconds,
            "times": [],
        }
        model.encode(sentences[:256], batch_size=BATCH)  # warm-up
    for name, (make, same) in (speed_only or {}).items():
        models[name] = make()
        rows[name] = {**rows[same], "times": [], "speed_only": same}
        models[name].encode(sentences[:256], batch_size=BATCH)
    for _ in range(repeats):
        for name, model in models.items():
            start, passes = time.perf_counter(), 0
            while passes == 0 or time.perf_counter() - start < MIN_SECONDS:  # a static pass takes 0.3 s
                model.encode(sentences, batch_size=BATCH)
                passes += 1
            rows[name]["times"].append((time.perf_counter() - start) / passes)
    for row in rows.values():
        row["sentences_per_s"] = len(sentences) / statistics.median(row["times"])
    return rows


def score(model, dev, train, retrieval) -> dict[str, float]:
    return {
        "stsb_dev": dev(model)["stsb_dev_spearman"],
        "stsb_train": train(model)["stsb_train_spearman"],
        "retrieval_ndcg10": retrieval(model)[retrieval.primary],
    }


def with_std(row: dict, key: str) -> str:
    return f"{row[key]:.2f} ± {row[key + '_std']:.2f}" if key + "_std" in row else f"{row[key]:.2f}"


def table(rows: dict[str, dict], machine: str) -> str:
    base = rows["teacher fp32"]["sentences_per_s"]
    lines = [
        f"Machine: {machine}; {time.strftime('%Y-%m-%d')}; `python benchmarks/students.py` (make bench).",
        "",
        "| point | seeds | STS-B dev | STS-B train | retrieval nDCG@10 (STS-B train) | sentences/s | "
        "× teacher fp32 | weights on disk | training |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        size = f"{row['bytes'] / 1e6:.1f} MB" if row["bytes"] else ""
        trained = f"{row['train_seconds']:.0f} s" if row["train_seconds"] else ""
        lines.append(
            f"| {name} | {row['seeds']} | {with_std(row, 'stsb_dev')} | {with_std(row, 'stsb_train')} | "
            f"{with_std(row, 'retrieval_ndcg10')} | {row['sentences_per_s']:,.1f} | "
            f"{row['sentences_per_s'] / base:.2f}× | {size} | {trained} |"
        )
    return "\n".join(lines) + "\n"


def figure(rows: dict[str, dict], path: Path) -> None:
    from sentcl.analysis.plots import plot_frontier

    plot_frontier(
        [(name, row["sentences_per_s"], row["stsb_dev"]) for name, row in rows.items()], {}, path,
        "sentences/s encoding 10k wiki sentences (log)", "STS-B dev Spearman ×100",
        "Students of all-MiniLM-L6-v2 on this CPU",
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="runs/bench/students", help="where the students and anchors go")
    parser.add_argument("--out", help="the markdown table")
    parser.add_argument("--json", help="every measurement")
    parser.add_argument("--figure", help="the frontier as a PNG")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", default="42,43,44", help="the students' and the trained anchor's seeds")
    parser.add_argument("--quick", action="store_true", help="a few steps each: checks the harness only")
    args = parser.parse_args()
    from sentcl.hardware import describe_machine
    from sentcl.model import SentenceEncoder, for_inference, load_encoder

    work = ROOT / args.work
    work.mkdir(parents=True, exist_ok=True)
    quick = ["training.max_steps=4", "training.eval_steps=2"] if args.quick else []
    steps = 4 if args.quick else 2000  # the static student's recipe: 2,000 steps of 256
    seeds = [int(seed) for seed in args.seeds.split(",")]
    sentences = ROOT / "runs" / "data" / "student_sentences.txt"  # the recipes' training sentences
    if not sentences.is_file():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "student_sentences.py"), str(sentences)], check=True
        )
    seconds = {
        name: train_student(name, work / name, [*quick, f"training.seed={seeds[0]}"]) for name in STUDENTS
    }
    for name in STUDENTS:  # the other seeds: their scores join the first's (the time is the first's)
        for seed in seeds[1:]:
            train_student(name, work / f"{name}-seed-{seed}", [*quick, f"training.seed={seed}"])
    anchors: dict[str, dict] = {}
    if PEERS_PYTHON.exists():
        # model2vec's distill needs transformers < 5.4: the peers' environment; sentence-transformers' trainer
        # (datasets, accelerate) is in sentcl's, as the bench's training peer
        anchors["model2vec"] = peer(PEERS_PYTHON, "distill", model_path(), str(work / "model2vec"))
        start, data = str(work / "model2vec"), str(data_dir())
        tried = [peer(sys.executable, "mnrl", start, data, lr, str(steps), str(work / f"st-{lr}"))
                 for lr in ("0.01", "0.2")]  # fmt: skip
        anchors["st"] = max(tried, key=lambda result: result["stsb_dev"])
        chosen = f"{anchors['st']['lr']:g}"
        for seed in seeds[1:]:  # the chosen learning rate again with the other seeds
            out = str(work / f"st-{chosen}-seed-{seed}")
            peer(sys.executable, "mnrl", start, data, chosen, str(steps), out, str(seed))
    teacher = model_path()

    def others(folder: str, dtype: str | None = None) -> list:
        """Loaders of ``folder``'s other seeds' models (``folder-seed-N``), in ``dtype`` where given."""

        def make(path: Path):
            return lambda: for_inference(load_encoder(str(path)), dtype) if dtype else load_encoder(str(path))

        return [make(work / f"{folder}-seed-{seed}") for seed in seeds[1:]]

    points: dict[str, tuple] = {
        "teacher fp32": (lambda: for_inference(SentenceEncoder.load(teacher), "fp32"), Path(teacher), None),
        "teacher, sentcl's default (auto)": (
            lambda: for_inference(SentenceEncoder.load(teacher), "auto"), Path(teacher), None
        ),
        "teacher int8": (lambda: for_inference(SentenceEncoder.load(teacher), "int8"), None, None),
        "3-layer student fp32": (
            lambda: for_inference(load_encoder(str(work / "3-layer")), "fp32"), work / "3-layer" / "model",
            seconds["3-layer"], others("3-layer", "fp32"),
        ),
        "3-layer student (auto)": (
            lambda: for_inference(load_encoder(str(work / "3-layer")), "auto"), work / "3-layer" / "model",
            seconds["3-layer"], others("3-layer", "auto"),
        ),
        "static student (sentcl)": (
            lambda: load_encoder(str(work / "static")), work / "static" / "model", seconds["static"],
            others("static"),
        ),
    }  # fmt: skip
    speed_only: dict[str, tuple] = {}
    if anchors:
        points["model2vec distill (anchor)"] = (
            lambda: load_encoder(str(work / "model2vec")),
            work / "model2vec",
            anchors["model2vec"]["train_seconds"],
        )
        best = work / f"st-{anchors['st']['lr']:g}"
        st_name = f"sentence-transformers static, MNRL on NLI, lr {anchors['st']['lr']:g} (anchor)"
        points[st_name] = (
            lambda: load_encoder(str(best)),
            best,
            anchors["st"]["train_seconds"],
            others(best.name),
        )

        def st_own():
            from sentence_transformers import SentenceTransformer

            return SentenceTransformer(str(best), device="cpu")

        speed_only[f"the same, in sentence-transformers' own encode ({ST_TOKENIZERS})"] = (st_own, st_name)
    rows = measure(points, args.repeats, speed_only)
    text = table(rows, describe_machine())
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "anchors": anchors}, indent=1) + "\n", encoding="utf-8"
        )
    if args.figure:
        figure(rows, Path(args.figure))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
