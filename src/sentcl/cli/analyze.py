"""``sentcl analyze``: the geometry report (alignment and uniformity, spectrum, figures) of models and their
post-processed variants, side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from sentcl.analysis.report import analyze, markdown_table, read_trajectory, write_report
from sentcl.atomic_write import atomic_folder, check_replaceable
from sentcl.cli.common import DATA_DIR_HELP, PICKLES, add_fit_arguments, add_overwrite_argument, fit
from sentcl.embedder import CachedEmbedder
from sentcl.evaluation import resolve_data_dir
from sentcl.model import SentenceEncoder, pooler_argument
from sentcl.postprocess import POSTPROCESSORS, PostProcessedEmbedder
from sentcl.postprocess.corpus import fit_corpus

NAMES = ("analyze",)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "analyze", parents=[PICKLES], help="geometry report (alignment/uniformity, spectrum, figures)"
    )
    p.add_argument("models", nargs="+", help="model folders, sentcl run folders or hub ids")
    p.add_argument("--pooler", type=pooler_argument)
    p.add_argument(
        "--postprocess", nargs="*", default=[], choices=list(POSTPROCESSORS), help="also analyze these"
    )
    add_fit_arguments(p)
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument("--split", default="dev", help="STS-B split used as the probe")
    p.add_argument("--out", default="runs/analysis", help="report folder")
    add_overwrite_argument(p, "--out")


def run_command(args: argparse.Namespace) -> int:
    check_replaceable(args.out, "analysis", args.overwrite, "--out")
    data_dir = resolve_data_dir(args.data_dir)
    analyses, processors = [], []
    fit_sentences = fit_corpus(args.fit_on, data_dir, args.fit_max) if args.postprocess else []
    for name in args.models:
        # one cache per model: the probe and the fitting corpus are encoded once for every variant
        encoder = CachedEmbedder(
            SentenceEncoder.load(name, pooler=args.pooler, allow_pickle=args.allow_pickle)
        )
        label = Path(name).name or name
        analysis = analyze(label, encoder, data_dir, args.split)
        analysis.trajectory = read_trajectory(name)
        analyses.append(analysis)
        for pp in args.postprocess:
            processor = fit(pp, encoder, fit_sentences)
            processors.append((f"{label}-{pp}", processor, f"{name}: {args.fit_on}"))
            analyses.append(
                analyze(f"{label} + {pp}", PostProcessedEmbedder(encoder, processor), data_dir, args.split)
            )
    fitted = f"\nPost-processors fitted on `{args.fit_on}` (at most {args.fit_max} sentences).\n"
    with atomic_folder(args.out, "analysis", args.overwrite, "--out") as tmp:  # the report whole, or nothing
        for folder, processor, fitted_on in processors:
            processor.save(tmp / "postprocess" / folder, fitted_on=fitted_on)
        report = write_report(analyses, tmp, args.split, notes=fitted if args.postprocess else "")
    print(markdown_table(analyses))
    print(f"report: {Path(args.out) / report.name}")
    return 0
