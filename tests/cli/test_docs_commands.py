"""Every `sentcl …` command line shown in the README and docs/ parses: its subcommand, options and their
values are what the CLI takes (a documented line that argparse refuses is a bug in the docs or the CLI)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sentcl.cli.main import parse_args

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def documented_commands() -> list[tuple[str, str]]:
    """(where, command line) for every line of a fenced shell block that runs ``sentcl``; continuation
    backslashes joined, comments dropped."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, flags=re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for number, line in enumerate(joined.splitlines(), start=1):
                line = line.strip().removeprefix("$ ")
                if line.startswith(("sentcl ", ".venv/bin/sentcl ")):
                    found.append((f"{page.relative_to(ROOT)} block line {number}", line))
    return found


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 30


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_line_parses(where, line):
    words = shlex.split(line, comments=True)
    words = [w for w in words if not w.startswith(("|", ">"))]
    cut = next((i for i, w in enumerate(words) if w in ("|", "&&", ";", ">", "2>")), len(words))
    try:
        parse_args(words[1:cut])
    except SystemExit as exc:
        pytest.fail(f"{where}: argparse refuses {line!r} (exit {exc.code})")


def test_overrides_may_follow_the_options():
    args = parse_args(
        ["train", "recipe.yaml", "a.b=1", "--output", "runs/x", "training.checkpoint_steps=100"]
    )
    assert args.overrides == ["a.b=1", "training.checkpoint_steps=100"] and args.output == "runs/x"
    with pytest.raises(SystemExit):
        parse_args(["train", "recipe.yaml", "--output", "runs/x", "--nonsense"])
    with pytest.raises(SystemExit):
        parse_args(["encode", "model", "in.txt", "--out", "o.npy", "a.b=1"])  # encode takes no overrides
