"""Re-derive the engine and router option tables (app/engines/data/*.json) from released wheels.

Run through `scripts/extract-engine-flags.sh`, which `pip download --no-deps`s the pinned wheels
of SOURCES into a temporary directory and calls `main` with it. Each wheel's Python files are
unpacked (never its native extensions), the engine's own parser-building code is imported with
every dependency that is not installed here (torch, transformers, triton, the engines' native
modules, ...) replaced by an inert stand-in, and the real `argparse` parser it builds is read:
every option string (`_option_string_actions`, what argparse matches prefixes against), how many
values each consumes, its canonical name, and which no-value strings store False. No GPU, no
torch, no network beyond the download.

`table_of_parser` and `render` are the pure half (a parser in, the data file's text out); the
tests run them on a small parser of their own, and on parsers rebuilt from the committed files.

    scripts/extract-engine-flags.sh            # rewrite app/engines/data/*.json
    scripts/extract-engine-flags.sh --check    # exit 1 when a committed file differs
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import io
import json
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "app" / "engines" / "data"


# --- The pure half: a parser in, the data file out ---------------------------------------------


def table_of_parser(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Every option string of `parser`, with its canonical name and how it consumes values.

    canonical: the first `--` string of the option's action (its first string when it has none);
    no_value: nargs 0; optional_value: nargs "?"; many_values: "*", "+", REMAINDER or a count
    above 1; negative: the no-value strings whose action stores False (`--no-x`, `--disable-x`)."""
    actions = parser._option_string_actions
    synonyms: dict[str, str] = {}
    no_value: list[str] = []
    optional_value: list[str] = []
    many_values: list[str] = []
    negative: list[str] = []
    for option in sorted(actions):
        action = actions[option]
        longs = [s for s in action.option_strings if s.startswith("--")]
        canonical = longs[0] if longs else action.option_strings[0]
        if option != canonical:
            synonyms[option] = canonical
        nargs = action.nargs
        if nargs == 0:
            no_value.append(option)
            if _stores_false(parser, action, option):
                negative.append(option)
        elif nargs == "?":
            optional_value.append(option)
        elif nargs in ("*", "+", argparse.REMAINDER) or (isinstance(nargs, int) and nargs > 1):
            many_values.append(option)
    return {
        "options": sorted(actions),
        "synonyms": synonyms,
        "no_value": no_value,
        "optional_value": optional_value,
        "many_values": many_values,
        "negative": negative,
    }


def _stores_false(parser: argparse.ArgumentParser, action: argparse.Action, option: str) -> bool:
    """Whether giving `option` alone stores False, found by running its action as argparse would."""
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
        return False
    namespace = argparse.Namespace()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        action(parser, namespace, [], option)
    return getattr(namespace, action.dest, None) is False


def render(document: dict[str, Any]) -> str:
    """A data file's text: keys in a fixed order, one value a line, so a diff reads as a diff."""
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


# --- What is read, from which release -----------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One released wheel and the parser inside it."""

    file: str  # the data file under app/engines/data/
    name: str  # the engine or router name the operator uses
    package: str  # the PyPI distribution
    version: str
    parser: str  # which parser, in the engine's own words
    build: Callable[[Path], argparse.ArgumentParser]  # unpacked wheel root -> the real parser


def _vllm_serve(root: Path) -> argparse.ArgumentParser:
    """`vllm serve`: make_arg_parser(FlexibleArgumentParser()), as vllm/entrypoints/cli/serve.py."""
    arg_utils = importlib.import_module("vllm.engine.arg_utils")
    # The config defaults (not the option strings) are computed by running the config classes'
    # default factories, which need the real torch: leave those defaults unset.
    arg_utils.suppress_logging = lambda: contextlib.suppress(Exception)
    cli_args = importlib.import_module("vllm.entrypoints.common.cli_args")
    argparse_utils = importlib.import_module("vllm.utils.argparse_utils")
    return cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser())


def _sglang_serve(root: Path) -> argparse.ArgumentParser:
    """`python -m sglang.launch_server` / `sglang serve`: prepare_server_args' parser."""
    # sglang/__init__.py patches transformers at import; the parser needs none of it.
    package = types.ModuleType("sglang")
    package.__path__ = [str(root / "sglang")]
    sys.modules["sglang"] = package
    server_args = importlib.import_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.ServerArgs.add_cli_args(parser)
    return parser


def _router_launcher(module: str) -> Callable[[Path], argparse.ArgumentParser]:
    """A router's Python launcher: RouterArgs.add_cli_args(parser, use_router_prefix=False)."""

    def build(root: Path) -> argparse.ArgumentParser:
        router_args = importlib.import_module(module)
        parser = argparse.ArgumentParser()
        router_args.RouterArgs.add_cli_args(parser, use_router_prefix=False)
        return parser

    return build


SOURCES: tuple[Source, ...] = (
    Source("vllm-0.33.0.json", "vLLM", "vllm", "0.33.0", "vllm serve",
           _vllm_serve),
    Source("sglang-0.5.23.json", "SGLang", "sglang", "0.5.23", "python -m sglang.launch_server",
           _sglang_serve),
    Source("vllm-router-0.1.17.json", "vllm-router", "vllm-router", "0.1.17",
           "vllm-router (vllm_router.launch_router, the Python launcher)",
           _router_launcher("vllm_router.router_args")),
    Source("sglang-router-0.3.2.json", "sglang-gateway", "sglang-router", "0.3.2",
           "python3 -m sglang_router.launch_router (the gateway image's entrypoint)",
           _router_launcher("sglang_router.router_args")),
)


# --- Importing an engine without its heavy dependencies -----------------------------------------

# Hardware probes must answer "absent", not "present but unavailable" (SGLang raises then).
_ABSENT = frozenset({"npu", "musa"})
# Distributions a package checks by version before use; any other missing one reads as 2.9.0.
_STAND_IN_VERSIONS = {"email-validator": "2.2.0"}
_STAND_IN_VERSION = "2.9.0"


class _StandInMeta(abc.ABCMeta):
    """A class that answers every attribute, call, index and operator with another stand-in."""

    def __getattr__(cls, name: str) -> Any:
        if (name.startswith("__") and name.endswith("__")) or name in _ABSENT:
            raise AttributeError(name)
        return _stand_in(f"{cls.__name__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep the decorated function
        return _stand_in(f"{cls.__name__}()")

    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __setitem__(cls, key: Any, value: Any) -> None:
        return None

    def __contains__(cls, item: Any) -> bool:
        return False

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __eq__(cls, other: Any) -> bool:
        return isinstance(other, _StandInMeta)

    def __ne__(cls, other: Any) -> bool:
        return not isinstance(other, _StandInMeta)

    def __hash__(cls) -> int:
        return 0

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __lt__(cls, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __add__(cls, other: Any) -> Any:
        return cls

    __radd__ = __mul__ = __rmul__ = __add__

    def __int__(cls) -> int:
        return 0

    __index__ = __int__

    def __float__(cls) -> float:
        return 0.0

    def __enter__(cls) -> Any:
        return cls

    def __exit__(cls, *exc: Any) -> bool:
        return False


def _stand_in(name: str) -> Any:
    return _StandInMeta(name, (), {})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            return _STAND_IN_VERSION
        if (name.startswith("__") and name.endswith("__")) or name in _ABSENT:
            raise AttributeError(name)
        return _stand_in(f"{self.__name__}.{name}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: a stand-in for any module nothing else found (a dependency that is not
    installed, or a native extension left in the wheel), outside the standard library."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in sys.stdlib_module_names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _version(distribution: str) -> str:
    try:
        return _real_version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return _STAND_IN_VERSIONS.get(distribution, _STAND_IN_VERSION)


_real_version = importlib.metadata.version


def _unpack(wheel: Path, into: Path) -> Path:
    """The wheel's files without its native code (extension modules are stood in for)."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            name = member.rpartition("/")[2]
            if not (name.endswith(".so") or ".so." in name or ".libs/" in member):
                archive.extract(member, into)
    return into


def read_wheel(source: Source, wheel: Path, scratch: Path) -> dict[str, Any]:
    """The data file of `source`, read from its wheel. Changes this process's import state: run
    one source per process (`main` does)."""
    root = _unpack(wheel, scratch)
    sys.path.insert(0, str(root))
    sys.meta_path.append(_StandInFinder())
    sys.modules["regex"] = importlib.import_module("re")  # a superset of re; its native core is absent
    importlib.metadata.version = _version
    parser = source.build(root)
    return {
        "name": source.name,
        "package": source.package,
        "version": source.version,
        "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "parser": source.parser,
        "extractor": "scripts/extract-engine-flags.sh",
        **table_of_parser(parser),
    }


def _wheel_of(source: Source, wheels: Path) -> Path:
    stem = f"{source.package.replace('-', '_')}-{source.version}-"
    found = sorted(p for p in wheels.glob("*.whl") if p.name.startswith(stem))
    if len(found) != 1:
        raise SystemExit(f"expected one wheel {stem}*.whl in {wheels}, found {[p.name for p in found]}")
    return found[0]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print each data file and its pinned wheel, and stop")
    parser.add_argument("--source", help="the data file to read (one per process: the wrapper runs each)")
    parser.add_argument("--wheels", type=Path, help="directory holding the downloaded wheels")
    parser.add_argument("--scratch", type=Path, help="empty directory to unpack into")
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(f"{s.file} {s.package}=={s.version}" for s in SOURCES))
        return 0
    if args.source is None or args.wheels is None or args.scratch is None:
        parser.error("--source, --wheels and --scratch are required (or --list)")
    (source,) = [s for s in SOURCES if s.file == args.source]
    text = render(read_wheel(source, _wheel_of(source, args.wheels), args.scratch))
    target = DATA_DIR / source.file
    if args.check:
        same = target.exists() and target.read_text() == text
        print(f"{source.file}: {'matches' if same else 'DIFFERS from'} {source.package} {source.version}")
        return 0 if same else 1
    target.write_text(text)
    print(f"{source.file}: {len(json.loads(text)['options'])} option strings from {source.package} {source.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
