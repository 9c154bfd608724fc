"""No dead names in app/: every name `app/vocab.py` defines and every function or method `app/`
defines is used somewhere in the repository (app, tests, bench, scripts), or is an entry point or
a name a framework calls, listed below with the reason.

Read with `ast`, so a name counts as used where code reads it (a name, an attribute, an import),
not where a comment or a docstring mentions it. A name another module happens to share is taken
as a use: the scan errs on the side of passing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
SOURCES = ("app", "tests", "bench", "scripts")
# Text files that name Python callables by path (`app.cli:main`): packaging, images, scripts, CI.
ENTRY_POINT_FILES = ("pyproject.toml", "Dockerfile", "scripts", ".ci", "charts", "manifests", "tests/e2e")
ENTRY_POINT = re.compile(r"\bapp(?:\.\w+)+:(\w+)")

# Called by something other than this repository's code, each with why.
ALLOWED: dict[str, str] = {
    "ignore_aliases": "PyYAML's dumper calls it: app/cli.py's _PlainDumper overrides it to write no anchors",
}
# Decorators through which a framework registers and calls a function (FastAPI routes and
# handlers, pydantic validators and serializers).
FRAMEWORK_DECORATORS = {"get", "post", "put", "patch", "delete", "exception_handler", "middleware",
                        "field_validator", "model_validator", "field_serializer", "model_serializer",
                        "asynccontextmanager"}


def python_files() -> list[Path]:
    return [p for top in SOURCES for p in sorted((ROOT / top).rglob("*.py")) if ".venv" not in p.parts]


def used_identifiers() -> set[str]:
    """Every identifier the repository's Python code reads, and every callable a text file names."""
    used: set[str] = set()
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ImportFrom):
                used.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.update(ENTRY_POINT.findall(node.value))
    for entry in ENTRY_POINT_FILES:
        target = ROOT / entry
        files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file()) \
            if target.is_dir() else []
        for path in files:
            try:
                used.update(ENTRY_POINT.findall(path.read_text()))
            except UnicodeDecodeError:
                continue
    return used


def vocab_names() -> list[str]:
    tree = ast.parse((APP / "vocab.py").read_text())
    out = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        out.extend(t.id for t in targets if isinstance(t, ast.Name))
    return out


def _decorator_name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def app_functions() -> list[tuple[str, str]]:
    """(where, name) of every module-level function and every method in app/ but dunders and the
    framework-registered ones."""
    out = []
    for path in sorted(APP.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text(), str(path))
        scopes: list[tuple[str, list[ast.stmt]]] = [(module, tree.body)]
        scopes += [(f"{module}.{n.name}", n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
        for where, body in scopes:
            for node in body:
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if node.name.startswith("__") or {_decorator_name(d) for d in node.decorator_list} & FRAMEWORK_DECORATORS:
                    continue
                out.append((where, node.name))
    return out


def test_every_vocab_name_is_used() -> None:
    used = used_identifiers()
    dead = [name for name in vocab_names() if name not in used and name not in ALLOWED]
    assert not dead, f"app/vocab.py names nothing reads (delete them, or use them): {dead}"


def test_every_function_in_app_is_used() -> None:
    used = used_identifiers()
    dead = [f"{where}.{name}" for where, name in app_functions() if name not in used and name not in ALLOWED]
    assert not dead, ("functions of app/ nothing calls (delete them, or list an entry point in ALLOWED with "
                      f"why): {dead}")


def test_the_allow_list_names_functions_that_exist() -> None:
    defined = {name for _, name in app_functions()} | set(vocab_names())
    stale = sorted(set(ALLOWED) - defined)
    assert not stale, f"ALLOWED names nothing app/ defines any more: {stale}"
