"""No function of the library runs past 100 lines (issue 56): a reader sees one on a screen or two, and an
assembler that grows past it is where checks and closures that belong elsewhere collect. The study harness
(sentcl_reproduction) is outside the rule."""

import ast
from pathlib import Path

LIMIT = 100
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sentcl"


def test_no_function_of_the_library_is_over_100_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
