"""Outside app/engines/, no code compares an engine's or a router's name: it looks the entry up
(`registry.engine_for`, `registry.engine_of`, `registry.router_for`) and asks it
(docs/architecture.md#adding-an-engine-or-a-router).

Read with `ast`, so comments, docstrings and messages do not count. Outside app/engines/ (and
app/vocab.py, which defines the names) it fails on

- a name itself: a string equal to an engine or router name, or `vocab.ENGINE_VLLM`,
  `vocab.ROUTER_LLMD`... (a comparison, a table keyed by engine, a branch), except inside the
  API's `Literal[...]` enum of names;
- a comparison of a deployment's engine or router name (`md.spec.engine.name`, `router.name`,
  `subject.engine`) with anything but the same field of another object (the frozen-field rule
  compares the stored object's router with the update's).
"""

from __future__ import annotations

import ast
from pathlib import Path

from app import vocab

APP = Path(__file__).resolve().parents[2] / "app"
ENGINES_DIR = APP / "engines"
NAMES = {*vocab.ENGINES, vocab.ROUTER_LLMD, vocab.ROUTER_VLLM, vocab.ROUTER_SGLANG}
VOCAB_NAMES = {k for k, v in vars(vocab).items() if k.isupper() and isinstance(v, str) and v in NAMES}


def _field(node: ast.expr) -> str | None:
    """`engine.name` / `router.name` / `subject.engine` for an expression that reads one, else None."""
    if isinstance(node, ast.Attribute):
        owner = node.value
        if node.attr == "name" and isinstance(owner, ast.Attribute) and owner.attr in ("engine", "router"):
            return f"{owner.attr}.name"
        if node.attr == "name" and isinstance(owner, ast.Name) and owner.id in ("engine", "router"):
            return f"{owner.id}.name"
        if node.attr == "engine" and isinstance(owner, ast.Name) and owner.id == "subject":
            return "subject.engine"
    return None


def _literal_subscripts(tree: ast.AST) -> set[int]:
    """ids of the nodes inside a `Literal[...]` subscript (the API's enums)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            inside.update(id(n) for n in ast.walk(node.slice))
    return inside


def name_uses(source: str, where: str) -> list[str]:
    """Every use of an engine or router name, or comparison of one, in `source`."""
    tree = ast.parse(source, where)
    in_literal = _literal_subscripts(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in in_literal:
            found.append(f"{where}:{node.lineno}: the name {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in VOCAB_NAMES:
            found.append(f"{where}:{node.lineno}: vocab.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in VOCAB_NAMES:
            found.append(f"{where}:{node.lineno}: {node.id}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            fields = [_field(o) for o in operands]
            compared = {f for f in fields if f is not None}
            if compared and not (len(compared) == 1 and None not in fields):
                found.append(f"{where}:{node.lineno}: compares {', '.join(sorted(compared))}")
    return found


def test_no_engine_or_router_name_is_compared_outside_the_engines() -> None:
    uses: list[str] = []
    for path in sorted(APP.rglob("*.py")):
        if ENGINES_DIR in path.parents or path == APP / "vocab.py":
            continue
        uses += name_uses(path.read_text(), str(path.relative_to(APP.parent)))
    assert not uses, "ask the engine's or router's entry instead:\n" + "\n".join(uses)


def test_the_scan_sees_every_form_of_comparison() -> None:
    """The check itself: a name, a vocab constant, a table keyed by one, a compared field; not an
    enum, a message, or the stored and updated values of one field."""
    probe = '''
from typing import Literal
EngineName = Literal["vLLM", "SGLang"]
a = md.spec.engine.name == vocab.ENGINE_VLLM
b = {vocab.ROUTER_SGLANG: 1}
c = router.name != "llm-d-router"
d = subject.engine in wanted
e = o.router.name != n.router.name
f = f"{router.name} routes vLLM engines only"
g = engine == "SGLang"
'''
    found = sorted(name_uses(probe, "probe"), key=lambda use: (int(use.split(":")[1]), use))
    assert [use.split(":", 1)[1] for use in found] == [
        "4: compares engine.name", "4: vocab.ENGINE_VLLM", "5: vocab.ROUTER_SGLANG", "6: compares router.name",
        "6: the name 'llm-d-router'", "7: compares subject.engine", "10: the name 'SGLang'",
    ]
