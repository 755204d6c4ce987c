"""``sentcl`` command line: the top parser, dispatch to the command modules beside this one (each holds its
``add_parser`` and ``run_command``), and the error policy: a :class:`~sentcl.errors.UserError` is one line
and exit 2, a failure of the machine (a full disk, a permission) one line and exit 1, a bug its traceback.

A command's module (and what it imports: torch, transformers) is imported only when that command is named:
``sentcl --help`` reads the one-line summaries of :data:`COMMANDS` and imports no command
(tests/cli/test_main.py checks that each summary is the module's own)."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import re
import sys
from importlib.metadata import entry_points

from sentcl import __version__
from sentcl.errors import UserError

DESCRIPTION = "Contrastive learning of sentence embeddings: train, evaluate, analyze, encode, index, serve."
#: the library's commands in the order ``sentcl --help`` lists them; commands of other installed parts
#: (entry points of the group ``sentcl.commands``, e.g. ``reproduce`` of the study harness,
#: sentcl_reproduction) follow, each a module with the same three names
PLUGIN_GROUP = "sentcl.commands"
#: command → (the module that holds it, its line in ``sentcl --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("sentcl.cli.train", "train a sentence encoder from a YAML recipe"),
    "pretrain": ("sentcl.cli.train", "masked-LM pre-training: a raw encoder from scratch, or continued"),
    "adapt": (
        "sentcl.cli.adapt",
        "adapt a model to your corpus without labels (SimCSE, TSDAE, …), judged by your search",
    ),
    "evaluate": (
        "sentcl.cli.evaluate",
        "evaluate a model: STS, SentEval transfer, your own pair files and retrieval (BEIR) folders",
    ),
    "encode": ("sentcl.cli.encode", "embed a text file (one sentence per line) into a .npy matrix"),
    "export": ("sentcl.cli.export", "write a model's embedding path as ONNX (fp32 or int8) for serving"),
    "card": ("sentcl.cli.card", "add sentcl evaluate --json results to a trained model's card"),
    "index": ("sentcl.cli.index", "build an index of a corpus (sentences, or documents with ids)"),
    "mine": ("sentcl.cli.mine", "hard negatives for (anchor, positive) pairs: write sent0,sent1,hard_neg"),
    "mteb": ("sentcl.cli.mteb", "evaluate a model with mteb (its tasks download unless mteb has them)"),
    "search": ("sentcl.cli.search", "nearest corpus sentences of a query"),
    "serve": ("sentcl.cli.serve", "HTTP API (OpenAI-compatible embeddings, similarity, search) + page"),
    "analyze": ("sentcl.cli.analyze", "geometry report (alignment/uniformity, spectrum, figures)"),
}


#: the help of an argument that several commands share, where a command gives none of its own (one wording)
SHARED_HELP = {
    "model": "a model folder, a sentcl run folder, an exported ONNX folder or a hub id",
    "pooler": "how token states become one vector (default: the one saved with the model, else avg)",
    "batch_size": "texts per forward pass (default %(default)s)",
    "corpus": "a text file, one sentence per line",
    "query": "the query text (several words are joined by spaces)",
    "top_k": "how many nearest sentences (default %(default)s)",
    "host": "the address to listen on (default %(default)s: this machine only)",
    "port": "the port to listen on (default %(default)s)",
    "sampling": "which candidates become negatives: the best-scoring (top, default) or a random draw of "
    "those that pass the filters",
}


def _fill_help(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.help is None and action.dest in SHARED_HELP:
            action.help = SHARED_HELP[action.dest]


def commands() -> dict[str, tuple[str, str]]:
    """The library's commands, then those of other installed parts (their summary: where they come from)."""
    plugins = sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name)
    return COMMANDS | {
        p.name: (p.value, f"(from {p.value.split('.')[0]})") for p in plugins if p.name not in COMMANDS
    }


def command_module(name: str):
    return importlib.import_module(commands()[name][0])


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser: every command's own arguments (``chosen`` None), or only ``chosen``'s, the others by
    their summary (what ``sentcl --help`` and one command's run need)."""
    parser = argparse.ArgumentParser(prog="sentcl", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"sentcl {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and results")
    subparsers = parser.add_subparsers(dest="command", required=True)
    table = commands()
    wanted = table[chosen][0] if chosen in table else None  # the chosen command's module (and its siblings)
    loaded: set[str] = set()
    for name, (module_name, summary) in table.items():
        if name in loaded:
            continue
        if chosen is None or module_name == wanted:
            module = importlib.import_module(module_name)
            module.add_parser(subparsers)
            loaded |= set(module.NAMES)
            for each in module.NAMES:
                _fill_help(subparsers.choices[each])
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as argparse reads it, with one addition: a recipe's ``key=value`` overrides may
    come anywhere after the recipe (``sentcl train R --output runs/x training.max_steps=100``), not only
    before the first option."""
    tokens = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((t for t in tokens if not t.startswith("-")), None) or "")
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
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    # faiss.loader logs each SIMD build it does not find as a ModuleNotFoundError at INFO: noise, not news
    for noisy in ("transformers", "httpx", "huggingface_hub", "faiss.loader"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        return command_module(args.command).run_command(args)
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
    from sentcl.hub_files import HubTimeoutError  # here: the CLI's start imports nothing it may not need

    chain: BaseException | None = exc
    seen: set[int] = set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        if isinstance(chain, HubTimeoutError):  # a silent hub under another library's wrapping
            return str(chain)
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
