"""The package's layers (docs/architecture.md#layers): no module imports a module of a layer
above its own, and no modules import each other in a circle, within a layer too (app/ and bench/).
Read from the source with `ast`, so an import inside a function or under TYPE_CHECKING counts too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
# The packages whose module graph must hold no circle.
ACYCLIC = ("app", "bench")

# Bottom first. A module belongs to the first entry naming it or a package above it; imports within
# one layer are free, imports of a higher layer are not.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("leaf utilities", ("app.vocab", "app.quantity", "app.timestamps", "app.durations", "app.logs")),
    ("api", ("app.api",)),
    ("world", ("app.world", "app.yamlread")),
    ("model", ("app.model",)),
    ("engines", ("app.engines",)),
    ("render", ("app.render",)),
    ("control", ("app.control",)),
    ("admission/kube", ("app.admission", "app.kube", "app.settings")),
    ("activator", ("app.activator",)),
    ("web", ("app.web",)),
    ("entry points", ("app.cli", "app.live", "app.main")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(*packages: str) -> dict[str, Path]:
    """Module name -> file of every module of `packages` (app alone by default)."""
    return {module_name(p): p for package in packages or ("app",) for p in sorted((ROOT / package).rglob("*.py"))}


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def imported(module: str, path: Path, known: dict[str, Path], roots: tuple[str, ...] = ("app",)) -> set[str]:
    """The modules of `roots` that `module` imports (`from app.render import names` is app.render.names)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] in roots)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] not in roots:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return out


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in modules() if m != "app" and layer_of(m) is None]
    assert not unplaced, f"add these modules to LAYERS (and docs/architecture.md): {unplaced}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    known = modules()
    upward = []
    for module, path in known.items():
        rank = layer_of(module)
        if rank is None:
            continue
        for target in sorted(imported(module, path, known)):
            target_rank = layer_of(target)
            if target_rank is not None and target_rank > rank:
                upward.append(f"{module} ({LAYERS[rank][0]}) imports {target} ({LAYERS[target_rank][0]})")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other in a circle (a strongly connected component of
    more than one module, or a module importing itself), each sorted; Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def module_graph() -> dict[str, set[str]]:
    """Module -> the modules of app/ and bench/ it imports (a package's own name stands for its
    __init__; an edge to it counts like any other)."""
    known = modules(*ACYCLIC)
    return {module: imported(module, path, known, ACYCLIC) & set(known) for module, path in known.items()}


def test_no_modules_import_each_other_in_a_circle() -> None:
    """A circle works only while every module of it is imported in one order; each piece two
    modules share belongs in the module it is about, below both."""
    found = circles(module_graph())
    assert not found, "modules importing each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_circle_check_finds_circles_of_any_length() -> None:
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert circles({"a": {"a"}}) == [["a"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_model_reads_only_api_vocab_world_and_leaf_utilities() -> None:
    known = modules()
    allowed = {"leaf utilities", "api", "world", "model"}
    for module, path in known.items():
        if module.split(".")[:2] != ["app", "model"]:
            continue
        for target in imported(module, path, known):
            rank = layer_of(target)
            assert rank is not None and LAYERS[rank][0] in allowed, f"{module} imports {target}"


def test_the_reader_sees_every_form_of_import(tmp_path: Path) -> None:
    """The check itself: absolute, from-package, relative and function-local imports are all read."""
    probe = tmp_path / "probe.py"
    probe.write_text("import app.vocab\nfrom app.control import status\nfrom .names import event\n"
                     "def f():\n    from app.web.state import State\n")
    assert imported("app.render.probe", probe, modules()) == {
        "app.vocab", "app.control.status", "app.render.names", "app.web.state"}


def test_the_activator_is_data_plane() -> None:
    """The activator (docs/scale-to-zero.md#the-activator) holds, wakes and forwards; it never plans or
    renders, so it imports nothing from app.control, app.render or app.web."""
    known = modules()
    for module, path in known.items():
        if module.split(".")[:2] != ["app", "activator"]:
            continue
        for target in imported(module, path, known):
            assert target.split(".")[:2] not in (["app", "control"], ["app", "render"], ["app", "web"]), \
                f"{module} imports {target}"
