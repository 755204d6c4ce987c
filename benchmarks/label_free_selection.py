"""Label-free checkpoint selection against STS-B dev selection on the CPU reproduction's encoders and methods.

    python benchmarks/label_free_selection.py [--plan configs/reproduce/cpu.yaml] [--out runs/label_free]
                                              [--eval-steps 10] [--cases unsup-minilm,...]

Needs the reproduction's encoders (``make reproduce``, cached in runs/reproduce/encoders) and, for DCLR,
its chosen unsupervised SimCSE run. The protocol, fixed before any run:

* each case is one encoder and one method at the setting the reproduction's STS-B dev search chose
  (pooler, learning rate), under the plan's budget (60 steps of 32, fp32), seeds 42, 43 and 44;
* every run holds out ``training.select_holdout`` (1,000) training examples and evaluates every
  ``--eval-steps`` steps, step 0 included: STS-B dev, ℓ_align + ℓ_uniform and the objective's loss on the
  held-out examples — all three on the same trajectory, so only the choice differs;
* each evaluated model is kept on disk; after the run, STS-B train (never used for a choice) is scored for
  every step one of the rules chose and for every other step too (the oracle's choice);
* per case and rule: STS-B train of the chosen checkpoint, mean ± std over the seeds, and its difference
  from STS-B dev selection, seed by seed.

Results are cached per run in OUT/<case>/seed-N/result.json, so an interrupted study resumes. Prints a
Markdown table; writes OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from sentcl.config import apply_overrides, load_yaml
from sentcl.evaluation import STSEvaluator, resolve_data_dir
from sentcl.model import SentenceEncoder
from sentcl.training import recipe_from_dict, train
from sentcl_reproduction.plan import as_overrides, load_plan

RULES = {"stsb-dev": ("stsb_dev_spearman", max), "align_uniform": ("heldout_align_uniform", min),
         "loss": ("heldout_loss", min)}  # fmt: skip
REPRO = Path("runs/reproduce")
# case: (encoder, method, the setting the reproduction chose: docs/reports/reproduction.md, "The search …")
CASES = {
    "unsup-minilm": ("minilm-mlm", "unsup SimCSE", "cls+mlp", 1e-4),
    "sup-minilm": ("minilm-mlm", "sup SimCSE", "avg", 1e-4),
    "unsup-raw": ("raw-4L-256", "unsup SimCSE", "avg", 1e-5),
    "dclr-minilm": ("minilm-mlm", "DCLR", "cls+mlp", 1e-4),
    "tacl-minilm": ("minilm-mlm", "TaCL", "avg", 1e-5),
}
COMPLEMENTARY = REPRO / "runs/minilm-mlm/unsup-simcse/cls-mlp-lr-0-0001/seed-42"  # DCLR's, as in the plan


def recipe(plan, case: str, seed: int, folder: Path, eval_steps: int, data_dir: Path) -> dict:
    encoder, method_name, pooler, lr = CASES[case]
    method = plan.methods[method_name]
    data = load_yaml(method.recipe)
    settings = {**plan.budget, **plan.poolers[pooler], "training.learning_rate": lr, "training.seed": seed}
    if method_name == "DCLR":
        settings["objective.complementary_model"] = str(COMPLEMENTARY)
    settings |= {
        "training.eval_steps": eval_steps,
        "training.select_by": "align_uniform",  # the held-out set exists; every rule is logged
        "training.output_dir": str(folder),
        "training.overwrite_output_dir": True,
        "training.eval_data_dir": str(data_dir),
    }
    apply_overrides(data, as_overrides(settings))
    data.setdefault("model", {})["name_or_path"] = str(REPRO / "encoders" / encoder.lower() / "model")
    return data


def run_case(plan, case: str, seed: int, out: Path, eval_steps: int, data_dir: Path, train_eval) -> dict:
    folder = out / case / f"seed-{seed}"
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    kept = folder / "kept"
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()

    def keep(embedder) -> dict:  # called at every evaluation: keep this moment's model for STS-B train
        encoder = embedder.embedder
        step = len(list(kept.glob("step-*"))) if kept.exists() else 0
        encoder.save(kept / f"step-{step:03d}")
        return {}

    train(recipe_from_dict(recipe(plan, case, seed, folder / "run", eval_steps, data_dir)), also_measure=keep)
    log = [json.loads(x) for x in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in log if "eval" in r]
    steps = [r["step"] for r in evals]
    metrics = {r["step"]: r["eval"] for r in evals}
    stsb_train = {}
    for index, step in enumerate(steps):
        encoder = SentenceEncoder.load(str(kept / f"step-{index:03d}"))
        stsb_train[step] = train_eval(encoder)["stsb_train_spearman"]
    shutil.rmtree(kept)
    result = {"case": case, "seed": seed, "steps": steps, "metrics": metrics, "stsb_train": stsb_train,
              "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    done.write_text(json.dumps(result, indent=1))
    return result


def chosen_step(result: dict, rule: str) -> int:
    key, pick = RULES[rule]
    metrics = {int(k): v for k, v in result["metrics"].items()}
    return pick(metrics, key=lambda step: (metrics[step][key], -step if pick is max else step))


def summarize(results: list[dict]) -> tuple[str, dict]:
    table = ["| case | rule | chosen steps (per seed) | STS-B train | vs stsb-dev selection (per seed) |",
             "|---|---|---|---:|---:|"]  # fmt: skip
    summary = {}
    for case in dict.fromkeys(r["case"] for r in results):
        runs = [r for r in results if r["case"] == case]
        train_at = [{int(k): v for k, v in r["stsb_train"].items()} for r in runs]
        reference = [t[chosen_step(r, "stsb-dev")] for r, t in zip(runs, train_at, strict=True)]
        rows = {}
        for rule in [*RULES, "oracle"]:
            if rule == "oracle":
                steps = [max(t, key=t.get) for t in train_at]
            else:
                steps = [chosen_step(r, rule) for r in runs]
            scores = [t[s] for t, s in zip(train_at, steps, strict=True)]
            gaps = [s - ref for s, ref in zip(scores, reference, strict=True)]
            rows[rule] = {"steps": steps, "stsb_train": scores, "gap": gaps}
            spread = f" ± {statistics.stdev(scores):.2f}" if len(scores) > 1 else ""
            gap = f"{statistics.mean(gaps):+.2f}" + (
                f" ± {statistics.stdev(gaps):.2f}" if len(gaps) > 1 else ""
            )
            label = "oracle (STS-B train itself)" if rule == "oracle" else rule
            table.append(f"| {case} | {label} | {', '.join(map(str, steps))} | "
                         f"{statistics.mean(scores):.2f}{spread} | {gap} |")  # fmt: skip
        summary[case] = rows
    return "\n".join(table), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", default="configs/reproduce/cpu.yaml")
    parser.add_argument("--out", default="runs/label_free")
    parser.add_argument("--eval-steps", type=int, default=10)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seeds", default="42,43,44")
    args = parser.parse_args(argv)
    plan = load_plan(args.plan)
    data_dir = resolve_data_dir(None)
    train_eval = STSEvaluator(data_dir, "stsb-train")
    out = Path(args.out)
    results = []
    for case in args.cases.split(","):
        for seed in map(int, args.seeds.split(",")):
            result = run_case(plan, case, seed, out, args.eval_steps, data_dir, train_eval)
            print(f"{case} seed {seed}: {result['seconds']} s", file=sys.stderr, flush=True)
            results.append(result)
    table, summary = summarize(results)
    (out / "results.json").write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
