"""``sentcl`` command line: the top parser, dispatch to the command modules beside this one (each holds its
``add_parser`` and ``run_command``), and the error policy: a :class:`~sentcl.errors.UserError` is one line
and exit 2, a failure of the machine (a full disk, a permission) one line and exit 1, a bug its traceback."""

from __future__ import annotations

import argparse
import errno
import logging
import re
import sys
from importlib.metadata import entry_points

from sentcl import __version__
from sentcl.cli import (
    analyze,
    card,
    encode,
    evaluate,
    export,
    index,
    mine,
    mteb,
    search,
    serve,
    train,
)
from sentcl.errors import UserError

DESCRIPTION = "Contrastive learning of sentence embeddings: train, evaluate, analyze, encode, index, serve."
#: the library's commands in the order ``sentcl --help`` lists them; commands of other installed parts
#: (entry points of the group ``sentcl.commands``, e.g. ``reproduce`` of the study harness,
#: sentcl_reproduction) follow, each a module with the same three names
PLUGIN_GROUP = "sentcl.commands"
COMMANDS = (
    train, evaluate, encode, export, card, index, mine, mteb, search, serve, analyze,
    *(point.load() for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name)),
)  # fmt: skip
RUNNERS = {name: module.run_command for module in COMMANDS for name in module.NAMES}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sentcl", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sentcl {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and results")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_parser(commands)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as argparse reads it, with one addition: a recipe's ``key=value`` overrides may
    come anywhere after the recipe (``sentcl train R --output runs/x training.max_steps=100``), not only
    before the first option."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    overrides = [t for t in rest if "=" in t and not t.startswith("-")]
    if rest and (getattr(args, "overrides", None) is None or len(overrides) != len(rest)):
        parser.error(
            f"unrecognized arguments: {' '.join(t for t in rest if t not in overrides) or ' '.join(rest)}"
        )
    if rest:
        args.overrides = [*args.overrides, *overrides]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command != "export" and getattr(args, "int8", False):
        args.dtype = "int8"  # --int8 is --dtype int8, resolved here once
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    # faiss.loader logs each SIMD build it does not find as a ModuleNotFoundError at INFO: noise, not news
    for noisy in ("transformers", "httpx", "huggingface_hub", "faiss.loader"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        return RUNNERS[args.command](args)
    except UserError as exc:
        print(f"sentcl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        message = environment_failure(exc, args.command)
        if message is None:
            raise  # a bug: its traceback is what a report needs
        print(f"sentcl {args.command}: error: {message}", file=sys.stderr)
        return 1


#: how the libraries sentcl writes through say "the disk is full" (errno 28 in OSError; safetensors' Rust
#: "os error 28"; faiss's "No space left on device"; numpy's short write "N requested and M written")
_DISK_FULL = re.compile(
    r"No space left on device|os error 28|Disk quota exceeded|\d+ requested and \d+ written"
)


def environment_failure(exc: BaseException, command: str = "") -> str | None:
    """One line for a failure of the machine rather than of sentcl (a full disk, a permission, a path that
    vanished), or None. Every file sentcl publishes is written to a temporary name first, so what was
    there before is intact and no half-written file is left: the line says so."""
    chain: BaseException | None = exc
    seen: set[int] = set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        said = _DISK_FULL.search(str(chain))
        if (isinstance(chain, OSError) and chain.errno in (errno.ENOSPC, errno.EDQUOT)) or said:
            detail = _first_line(chain) if len(_first_line(chain)) <= 80 or said is None else said.group(0)
            resume = " (a run continues from its last checkpoint with --resume)" if command == "train" else ""
            return (
                f"the disk is full ({detail}); nothing was half-written and what was there before is "
                f"unchanged: free some space and run the command again{resume}"
            )
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or _first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
