"""``sentcl reproduce``: a reproduction plan (cached stages) and its report (docs/reports/reproduction.md)."""

from __future__ import annotations

import argparse

from sentcl.cli.common import DATA_DIR_HELP

NAMES = ("reproduce",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "reproduce",
        help="run a reproduction plan (cached stages) and write its report (docs/reports/reproduction.md)",
    )
    p.add_argument("plan", help="YAML plan, e.g. configs/reproduce/cpu.yaml")
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run no stage: write the report from the stages done so far, naming what is not run yet",
    )


def run_command(args: argparse.Namespace) -> int:
    from sentcl_reproduction import reproduce

    report, outcomes = reproduce(args.plan, args.data_dir, report_only=args.report_only)
    for outcome in outcomes:
        print(f"{outcome.action:>8}  {outcome.seconds:8.0f} s  {outcome.name}")
    print(f"report: {report}")
    return 0
