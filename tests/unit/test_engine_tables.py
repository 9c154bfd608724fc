"""The engine tables are the extractor's output, and the registry reads them; no network here.

scripts/extract-engine-flags.sh downloads the pinned wheels and writes app/engines/data/*.json
through `table_of_parser` and `render` (scripts/extract_engine_flags.py). These tests run that
same code on small fixtures: a parser of every shape the tables record, parsers rebuilt from the
committed files (each file must be exactly what the extractor writes for its options), and a
fake wheel whose parser module imports torch, read in a subprocess as the extractor reads one.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from app import vocab
from app.admission.validate import validate
from app.engines import registry
from app.engines.flags import DATA_DIR
from app.world import World, load_yaml_objects

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "app" / "engines" / DATA_DIR
EXAMPLES = ROOT / "examples"


def _extractor() -> Any:
    spec = importlib.util.spec_from_file_location("extract_engine_flags", ROOT / "scripts" / "extract_engine_flags.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


X = _extractor()
TABLE_KEYS = ("options", "synonyms", "no_value", "optional_value", "many_values", "negative")


# --- The pure half on a fixture parser ---------------------------------------------------------


class _DisableAction(argparse.Action):
    """A vLLM-style `--disable-x` spelling that stores False into `x`."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, False)


def _fixture_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int)
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enable-x", dest="x", action="store_true")
    parser.add_argument("--disable-x", dest="x", action=_DisableAction)
    parser.add_argument("--skip-warmup", action="store_false", dest="warmup")
    parser.add_argument("--hf-token", nargs="?", const=True)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--pair", nargs=2)
    parser.add_argument("--tp-size", "--tensor-parallel", dest="tp")
    return parser


def test_table_of_a_fixture_parser() -> None:
    assert X.table_of_parser(_fixture_parser()) == {
        "options": ["--disable-x", "--enable-x", "--enforce-eager", "--help", "--hf-token", "--no-enforce-eager",
                    "--pair", "--served-model-name", "--skip-warmup", "--tensor-parallel", "--tensor-parallel-size",
                    "--tp-size", "-h", "-tp"],
        "synonyms": {"--no-enforce-eager": "--enforce-eager", "--tensor-parallel": "--tp-size",
                     "-h": "--help", "-tp": "--tensor-parallel-size"},
        "no_value": ["--disable-x", "--enable-x", "--enforce-eager", "--help", "--no-enforce-eager", "--skip-warmup",
                     "-h"],
        "optional_value": ["--hf-token"],
        "many_values": ["--pair", "--served-model-name"],
        "negative": ["--disable-x", "--no-enforce-eager", "--skip-warmup"],
    }


# --- The committed files are the extractor's output ---------------------------------------------


def _parser_of(table: dict[str, Any]) -> argparse.ArgumentParser:
    """A parser with exactly the options of `table`: one action per canonical name, holding every
    string of that name, each string storing False exactly when the table says it does."""
    parser = argparse.ArgumentParser(add_help=False)
    groups: dict[str, list[str]] = {}
    for option in table["options"]:
        groups.setdefault(table["synonyms"].get(option, option), []).append(option)
    negative = frozenset(table["negative"])

    class Store(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
            setattr(namespace, self.dest, option_string not in negative if self.nargs == 0 else values)

    for canonical, strings in groups.items():
        arity = {"none" if s in table["no_value"] else "optional" if s in table["optional_value"]
                 else "many" if s in table["many_values"] else "one" for s in strings}
        assert len(arity) == 1, strings  # one action, one arity
        nargs = {"none": 0, "optional": "?", "many": "+", "one": None}[arity.pop()]
        # The canonical string first among the `--` ones: argparse's action lists them in call order.
        ordered = [canonical, *sorted(s for s in strings if s != canonical)]
        parser.add_argument(*ordered, dest=canonical.lstrip("-"), nargs=nargs, action=Store)
    return parser


@pytest.mark.parametrize("source", X.SOURCES, ids=lambda s: s.file)
def test_committed_file_is_what_the_extractor_writes(source: Any) -> None:
    text = (DATA / source.file).read_text()
    document = json.loads(text)
    assert X.render(document) == text
    assert {k: document[k] for k in ("name", "package", "version", "parser")} == {
        "name": source.name, "package": source.package, "version": source.version, "parser": source.parser}
    assert document["wheel"].startswith(f"{source.package.replace('-', '_')}-{source.version}-")
    assert X.table_of_parser(_parser_of(document)) == {k: document[k] for k in TABLE_KEYS}


def test_every_data_file_has_a_pinned_source() -> None:
    assert sorted(p.name for p in DATA.glob("*.json")) == sorted(s.file for s in X.SOURCES)


def test_registry_reads_the_pinned_releases() -> None:
    pins = {s.name: s.version for s in X.SOURCES}
    assert set(registry.ENGINES) == set(vocab.ENGINES)
    for name, engine in registry.ENGINES.items():
        assert engine.version == pins[name]
        assert engine.owned_flags <= engine.flags.options
        assert set(engine.degree_flags) <= engine.flags.options
    assert (registry.VLLM.version, registry.SGLANG.version) == ("0.33.0", "0.5.23")
    for router, file in ((vocab.ROUTER_VLLM, "vllm-router-0.1.17.json"),
                         (vocab.ROUTER_SGLANG, "sglang-router-0.3.2.json")):
        options = json.loads((DATA / file).read_text())["options"]
        assert {o[2:] for o in options if o.startswith("--")} <= registry.router_for(router).flags


# --- Reading a wheel whose parser module imports torch ------------------------------------------

_FAKE_ENGINE = {
    "fakeengine/__init__.py": "",
    "fakeengine/cli.py": textwrap.dedent('''
        import argparse

        import torch
        from torch import nn
        from fakeengine._C import kernels  # a native extension the unpacked wheel leaves out


        class Layer(nn.Module):
            pass


        def make_parser():
            parser = argparse.ArgumentParser()
            parser.add_argument("--dtype", default=torch.float16)
            parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
            if not torch.cuda.is_available():
                parser.add_argument("--device", nargs="?")
            return parser
    '''),
    "fakeengine/_C.abi3.so": "not a library",
}


def test_a_wheel_is_read_without_torch(tmp_path: Path) -> None:
    wheel = tmp_path / "fakeengine-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in _FAKE_ENGINE.items():
            archive.writestr(name, text)
    script = textwrap.dedent(f'''
        import importlib, json, sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / "scripts")!r})
        import extract_engine_flags as X
        build = lambda root: importlib.import_module("fakeengine.cli").make_parser()
        source = X.Source("fakeengine-1.0.json", "fake", "fakeengine", "1.0", "fake serve", build)
        print(json.dumps(X.read_wheel(source, Path({str(wheel)!r}), Path({str(tmp_path / "unpacked")!r}))))
        print("torch" in sys.modules and not hasattr(sys.modules["torch"], "__file__"))
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    table, stood_in = done.stdout.splitlines()
    assert stood_in == "True"  # torch was never imported, only stood in for
    assert json.loads(table) == {
        "name": "fake", "package": "fakeengine", "version": "1.0", "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "parser": "fake serve",
        "extractor": "scripts/extract-engine-flags.sh",
        "options": ["--device", "--dtype", "--enforce-eager", "--help", "--no-enforce-eager", "-h"],
        "synonyms": {"--no-enforce-eager": "--enforce-eager", "-h": "--help"},
        "no_value": ["--enforce-eager", "--help", "--no-enforce-eager", "-h"],
        "optional_value": ["--device"],
        "many_values": [],
        "negative": ["--no-enforce-eager"],
    }


# --- Admission: a version outside the tables is a warning, not a refusal ------------------------

WORLD = World.of(load_yaml_objects(EXAMPLES / "world"))


def _deployment(engine: str, version: str) -> dict[str, Any]:
    (md,) = load_yaml_objects(EXAMPLES / "deployments" / "qwen-chat.yaml")
    md = copy.deepcopy(md)
    md["spec"]["engine"] = {"name": engine, "version": version}
    return md


@pytest.mark.parametrize(
    "engine,version,warned",
    [
        (vocab.ENGINE_VLLM, "0.33.0", False),
        (vocab.ENGINE_VLLM, "v0.33.0", False),
        (vocab.ENGINE_VLLM, "0.29.0", True),
        (vocab.ENGINE_VLLM, "0.33.1", True),
        (vocab.ENGINE_SGLANG, "0.5.23", False),
        (vocab.ENGINE_SGLANG, "0.5.18", True),
    ],
)
def test_engine_version_outside_the_tables_is_a_warning(engine: str, version: str, warned: bool) -> None:
    verdict = validate(_deployment(engine, version), None, WORLD)
    notices = [w for w in verdict.warnings if w.path == "spec.engine.version"]
    assert not [r for r in verdict.refusals if r.path == "spec.engine.version"]
    if not warned:
        assert notices == []
        return
    (notice,) = notices
    table = registry.engine_for(engine).version
    assert f"{version!r} is not the {engine} release admission reads command lines as ({table})" in notice.message
    assert len(str(notice)) <= 256
