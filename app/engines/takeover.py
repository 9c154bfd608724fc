"""The engine's own arguments inside a take-over `roles[].command`. Pure, no I/O.

A take-over command runs the engine's server itself: `<program> serve ARGS`, or
`python [flags] -m MODULE [SUBCOMMAND] ARGS` (optionally behind `env [NAME=value ...]`). Each
engine's entry says which program and modules run its server (`Engine.command`); any other
command cannot be read, and admission reads nothing from it.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

from app.engines.registry import engine_for

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_PY_FLAGS_NO_ARG = frozenset(
    {"-u", "-B", "-E", "-s", "-S", "-I", "-O", "-OO", "-q", "-P", "-b", "-bb", "-d", "-R", "-v"}
)
_PY_FLAGS_ARG = frozenset({"-X", "-W"})
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _python_module(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """`python [flags] -m MODULE ARGS...` → (MODULE, ARGS), None for any other interpreter use."""
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-m":
            return (argv[i + 1], list(argv[i + 2:])) if i + 1 < len(argv) else None
        if tok in _PY_FLAGS_ARG:
            i += 2
        elif tok in _PY_FLAGS_NO_ARG or (tok[:2] in _PY_FLAGS_ARG and len(tok) > 2):
            i += 1
        else:
            return None
    return None


def _without_env(command: Sequence[str]) -> list[str]:
    """The command after a leading `env NAME=value ...`."""
    argv = list(command)
    if argv and os.path.basename(argv[0]) == "env":
        argv = argv[1:]
        while argv and _ENV_ASSIGNMENT.match(argv[0]):
            argv = argv[1:]
    return argv


def engine_args_of_command(engine: str, command: Sequence[str]) -> list[str] | None:
    """The engine's own arguments in a take-over command, or None when admission cannot read it."""
    shape = engine_for(engine).command
    argv = _without_env(command)
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program == shape.program:
        return shape.serve_args(argv[2:]) if argv[1:2] == ["serve"] else None
    if not _PYTHON.match(program):
        return None
    found = _python_module(argv)
    if found is None or found[0] not in shape.modules:
        return None
    module, args = found
    subcommand = shape.modules[module]
    if subcommand is None:
        return args
    if args[:1] != [subcommand]:
        return None
    return shape.serve_args(args[1:])
