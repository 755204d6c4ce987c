"""``sentcl train`` and ``sentcl pretrain``: one recipe loader and one runner keyed by the run kind
(training/kinds.py); ``--seeds`` is training's (one run per seed, then mean ± std)."""

from __future__ import annotations

import argparse

from sentcl.config import ConfigError
from sentcl.training.kinds import load_run_recipe, replace_training, run, summary
from sentcl.training.seeds import format_aggregate, train_seeds

NAMES = ("train", "pretrain")


def add_parser(commands) -> None:
    from sentcl.objectives import REGISTRY  # with the installed packages' objectives (entry points)

    objectives = f"objectives (objective.name): {', '.join(REGISTRY)}"
    for name, help_text, example, override in (
        ("train", "train a sentence encoder from a YAML recipe", "configs/simcse_unsup_minilm_cpu.yaml",
         "training.learning_rate=1e-5"),
        ("pretrain", "masked-LM pre-training: a raw encoder from scratch, or continued",
         "configs/pretrain/raw_bert_4l_256.yaml", "training.max_steps=100"),
    ):  # fmt: skip
        p = commands.add_parser(name, help=help_text, epilog=objectives if name == "train" else None)
        p.add_argument("config", help=f"recipe, e.g. {example}")
        p.add_argument("overrides", nargs="*", metavar="key=value", help=f"e.g. {override}")
        p.add_argument("--output", help="output folder (overrides training.output_dir)")
        p.add_argument(
            "--overwrite", action="store_true",
            help="start again in a non-empty output folder: a previous run's entries go, your own files stay",
        )  # fmt: skip
        p.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint, exactly")
        if name == "train":
            p.add_argument(
                "--seeds", help="comma-separated seeds: one run each, then mean ± std of every metric"
            )


def run_command(args: argparse.Namespace) -> int:
    kind = args.command
    config = load_run_recipe(kind, args.config, args.overrides)
    changes = {"output_dir": args.output} if args.output else {}
    if args.overwrite:
        changes["overwrite_output_dir"] = True
    if args.resume:
        changes["resume"] = True
    config = replace_training(config, **changes) if changes else config
    if getattr(args, "seeds", None):
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise ConfigError(f"--seeds {args.seeds!r}: expected comma-separated integers") from None
        results, aggregate = train_seeds(config, seeds)
        for seed, result in zip(seeds, results, strict=True):
            print(f"seed {seed}: " + summary(kind, result).replace("\n", "; "))
        print(format_aggregate(aggregate))
        return 0
    print(summary(kind, run(kind, config)))
    return 0
