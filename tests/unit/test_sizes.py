"""Size limits of app/ (docs/architecture.md#layers): no function (or method) over 60 lines and no
module over 500, counted in physical lines (a function from its first decorator to its last line,
a module from its first line to its last). A longer one is split into named steps or by subject.
The vocabulary (app/vocab.py) is the one exception: a table of names that computes nothing, kept in
one module so that each name has exactly one place to be found."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
# The vocabulary module is a table of names, one place to grep (docs/architecture.md#layers, "Sizes").
UNSPLIT_MODULES = {APP / "vocab.py"}


def function_sizes(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, physical lines) of every function and method in `source`, nested ones too."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            out.append((node.name, first, node.end_lineno - first + 1))
    return out


def test_no_function_in_app_is_over_60_lines() -> None:
    long = [f"{path.relative_to(APP.parent)}:{line} {name}: {size} lines"
            for path in sorted(APP.rglob("*.py"))
            for name, line, size in function_sizes(path.read_text())
            if size > MAX_FUNCTION_LINES]
    assert not long, f"split these into named steps (at most {MAX_FUNCTION_LINES} lines each):\n" + "\n".join(long)


def test_no_module_in_app_is_over_500_lines() -> None:
    long = [f"{path.relative_to(APP.parent)}: {size} lines"
            for path in sorted(APP.rglob("*.py")) if path not in UNSPLIT_MODULES
            if (size := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"split these by subject (at most {MAX_MODULE_LINES} lines each):\n" + "\n".join(long)


def test_the_count_is_physical_lines_from_the_first_decorator() -> None:
    source = "import functools\n\n\n@functools.cache\ndef f(\n    x,\n):\n    # a comment\n\n    return x\n"
    assert function_sizes(source) == [("f", 4, 7)]
