"""``sentcl card``: ``sentcl evaluate --json`` results into a trained model's card."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sentcl.config import ConfigError
from sentcl.model.backbone import run_model_folder
from sentcl.training.model_card import add_evaluation

NAMES = ("card",)


def add_parser(commands) -> None:
    p = commands.add_parser("card", help="add sentcl evaluate --json results to a trained model's card")
    p.add_argument("model", help="a model folder saved by sentcl train (it has README.md)")
    p.add_argument(
        "--add", nargs="+", required=True, metavar="RESULTS", help="files of sentcl evaluate --json"
    )


def run_command(args: argparse.Namespace) -> int:
    folder = run_model_folder(args.model)  # a run folder: its kept model
    for name in args.add:
        try:
            results = json.loads(Path(name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{name}: no such file") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        try:
            path = add_evaluation(folder, results, Path(name).name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    print(f"{path}: {len(args.add)} result file(s) added")
    return 0
