"""Does mining hard negatives help supervised SimCSE? (docs/training.md, "Mined hard negatives")

From the shared NLI triplets (premise, entailment, contradiction), three training sets of the same pairs:
* in-batch negatives only: (premise, entailment);
* the NLI contradictions as hard negatives: (premise, entailment, contradiction), SimCSE's supervised setting;
* mined negatives: `sentcl mine` with the starting model over the entailments (ranks 10–50, cosine ≤ 0.8,
  5 % relative margin to the positive, one drawn at random: sentence-transformers' documented recipe).
Each trained from all-MiniLM-L6-v2 with configs/simcse_sup_minilm_cpu.yaml for --steps steps, 3 seeds;
STS-B dev (Spearman × 100) of the final model, mean ± std.

    python benchmarks/mining.py --steps 60 --out runs/mining
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RECIPE = "configs/simcse_sup_minilm_cpu.yaml"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SEEDS = (42, 43, 44)


def sentcl(*args: str) -> str:
    command = [str(Path(sys.executable).parent / "sentcl"), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def stsb_dev(model: str, json_path: Path) -> float:
    sentcl("evaluate", model, "--tasks", "stsb-dev", "--json", str(json_path), "--overwrite")
    return json.loads(json_path.read_text())["metrics"]["stsb_dev_spearman"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path("runs/mining"))
    parser.add_argument("--remine", action="store_true", help="mine again though OUT/mined.tsv is there")
    args = parser.parse_args()
    data = Path(os.environ["SENTCL_DATA"])
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(data / "nli" / "triplets.csv.gz", "rt", encoding="utf-8", newline="") as handle:
        triplets = list(csv.DictReader(handle))
    pairs, nli = args.out / "pairs.tsv", args.out / "nli.tsv"
    for path, columns in ((pairs, ("sent0", "sent1")), (nli, ("sent0", "sent1", "hard_neg"))):
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(columns)
            writer.writerows([row[c] for c in columns] for row in triplets)
    mined, record = args.out / "mined.tsv", args.out / "mined.json"
    if args.remine or not record.is_file():
        start = time.perf_counter()
        summary = sentcl("mine", MODEL, str(pairs), "--out", str(mined), "--overwrite", "--range-min", "10",
                         "--range-max", "50", "--max-score", "0.8", "--relative-margin", "0.05",
                         "--num-negatives", "1", "--sampling", "random",
                         "--dtype", "fp32").strip()  # fmt: skip
        record.write_text(json.dumps({"summary": summary, "seconds": time.perf_counter() - start}))
    summary, mining_s = json.loads(record.read_text()).values()
    print(summary, f"({mining_s:.0f} s)")
    results: dict[str, list[float]] = {}
    for name, train_file in (("in-batch only", pairs), ("NLI contradictions", nli), ("mined", mined)):
        for seed in SEEDS:
            run = args.out / f"{name.split()[0].lower()}-{seed}"
            sentcl("train", RECIPE, f"data.train_file={train_file}", f"training.max_steps={args.steps}",
                   f"training.seed={seed}", "training.eval_steps=0", "training.eval_at_start=false",
                   "--output", str(run), "--overwrite")  # fmt: skip
            value = stsb_dev(str(run), run / "stsb-dev.json")
            results.setdefault(name, []).append(value)
            print(f"{name} seed {seed}: {value:.2f}", flush=True)
    base = stsb_dev(MODEL, args.out / "base.json")
    lines = [
        f"Supervised SimCSE from {MODEL}, {len(triplets):,} NLI pairs, {args.steps} steps of batch 64 "
        f"({RECIPE}); STS-B dev Spearman × 100 of the final model, seeds {', '.join(map(str, SEEDS))}; "
        f"the starting model: {base:.2f}. Mining: {summary.split(': ', 1)[1]} in {mining_s:.0f} s.",
        "",
        "| negatives | STS-B dev (mean ± std) | per seed |",
        "|---|---:|---|",
    ]
    for name, values in results.items():
        lines.append(f"| {name} | {statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} | "
                     f"{', '.join(f'{v:.2f}' for v in values)} |")  # fmt: skip
    table = "\n".join(lines)
    print(table)
    (args.out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
