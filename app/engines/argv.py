"""Reading an engine command line the way that engine's own parser reads it. Pure, no I/O.

Why this exists: admission refuses operator-owned flags "in every spelling the engine reads as
that flag", validates parallel degrees and follows `--port`. A reading that differs from the
engine's is either a bypass (a spelling we miss) or a false refusal (a spelling we invent), so the
rules below copy the parsers' behaviour, with the option tables of the engine registry
(`app/engines/registry.py`, data in `app/engines/data/`). The parallel degrees a line declares are
read in `app/engines/degrees.py`, the arguments of a take-over command in `app/engines/takeover.py`.

- argparse (Python 3.12+, `allow_abbrev=True`): an exact option string wins; otherwise a `--` token
  (the part before `=`) resolves to the option strings it is a prefix of — one is a match, several
  are an ambiguity (argparse refuses the line; we report it, never guess). A one-dash token also
  matches a one-letter short option with its value attached (`-n2`). A token that looks like an
  option is never consumed as a value (except a negative number or a token with a space).
- vLLM's `FlexibleArgumentParser` first rewrites the line: in `--` tokens `_` becomes `-` before
  the first `.` (and before `=`); any `-`token with a `.` in its name is a dotted JSON member
  (`--kv-transfer-config.kv_role kv_both`), pulled out with the next token (or its `=value`) and
  handed to argparse as `--kv-transfer-config '{"kv_role": "kv_both"}'` — so its name resolves
  like any other (prefixes included); `-O3`/`-O=3`/`-O 3` mean `--optimization-level 3`.
- SGLang: plain argparse, no underscore conversion, no dotted members.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from app.engines.flags import EngineFlags
from app.engines.registry import flags_for

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_K8S_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_OPT_LEVEL = "--optimization-level"
_OPT_LEVELS = frozenset({"0", "1", "2", "3"})


# --- One token --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A token the engine's parser reads as one known option."""

    flag: str  # canonical long option, e.g. "--kv-transfer-config"
    option_string: str  # the exact option string matched, e.g. "-tp", "--disable-expert-parallel"
    spelling: str  # the option as written, without any "=value", e.g. "--kv_transfer_conf"
    explicit_value: str | None  # the "=value" (or attached short-option value), if any
    member: str | None = None  # vLLM dotted member path ("kv_role"), else None
    abbreviated: bool = False  # reached through a unique prefix, not an exact option string


@dataclass(frozen=True)
class Ambiguous:
    """A token that is a prefix of several option strings: the engine refuses the command line."""

    token: str
    spelling: str
    candidates: tuple[str, ...]  # the option strings it could match, sorted


class _Unknown:
    """Marker: the token looks like an option, but the engine has no such option."""


_UNKNOWN = _Unknown()


def _vllm_rewrite(token: str) -> str:
    """vLLM turns `_` into `-` in a `--` token's name, up to the first `.` and before `=`."""
    if not token.startswith("--"):
        return token
    key, sep, value = token.partition("=")
    head, dot, tail = key[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + sep + value


def _option_tuples(flags: EngineFlags, arg: str) -> list[tuple[str, str | None]]:
    """argparse's prefix search: every option string `arg` may abbreviate, with its value."""
    prefix, sep, explicit = arg.partition("=")
    value = explicit if sep else None
    if arg.startswith("--"):
        return [(o, value) for o in flags.options if o.startswith(prefix)]
    found: list[tuple[str, str | None]] = []
    for o in flags.options:
        if o == arg[:2]:
            found.append((o, arg[2:]))
        elif o.startswith(prefix):
            found.append((o, value))
    return found


def _match(flags: EngineFlags, arg: str, spelling: str) -> Resolved | Ambiguous | _Unknown | None:
    """argparse's `_parse_optional`: option, ambiguity, unknown option, or positional (None)."""
    if not arg or arg[0] != "-" or arg == "-":
        return None
    if arg in flags.options:
        return Resolved(flags.canonical(arg), arg, spelling, None)
    name, sep, explicit = arg.partition("=")
    if sep and name in flags.options:
        return Resolved(flags.canonical(name), name, spelling.partition("=")[0], explicit)
    found = _option_tuples(flags, arg)
    if len(found) > 1:
        return Ambiguous(arg, spelling.partition("=")[0], tuple(sorted(o for o, _ in found)))
    if len(found) == 1:
        (option, value), = found
        written = spelling.partition("=")[0]
        if option == arg[:2] and not arg.startswith("--"):
            written = spelling[:2]
        prefix = not (option == arg[:2] and not arg.startswith("--"))
        return Resolved(flags.canonical(option), option, written, value, None, prefix)
    if _NEGATIVE_NUMBER.match(arg) or " " in arg:
        return None
    return _UNKNOWN


def _classify(flags: EngineFlags, token: str) -> Resolved | Ambiguous | _Unknown | None:
    """How the engine reads one token outside vLLM's dotted pass (see the module docstring)."""
    if token == "--":
        return None
    if flags.underscores_to_dashes:
        if token.startswith("-O") and not token.startswith("--") and token != "-O":
            value = token[3:] if token[2] == "=" else token[2:]
            return Resolved(_OPT_LEVEL, _OPT_LEVEL, "-O", value)
        return _match(flags, _vllm_rewrite(token), token)
    return _match(flags, token, token)


def _dotted(flags: EngineFlags, token: str) -> tuple[str, str, str | None] | None:
    """vLLM's dotted form: (name, member path, "=value" or None), or None if not dotted."""
    if not flags.dotted_members or not token.startswith("-"):
        return None
    key, sep, value = _vllm_rewrite(token).partition("=")
    if "." not in key:
        return None
    name, _, member = key.partition(".")
    return name, member.removesuffix("+"), value if sep else None


def resolve_option(engine: str, token: str) -> Resolved | Ambiguous | None:
    """Which option `engine` reads `token` as; None for a positional or an option it lacks."""
    flags = flags_for(engine)
    dotted = _dotted(flags, token)
    if dotted is not None:
        name, member, value = dotted
        found = _match(flags, name, token.partition("=")[0])
        if isinstance(found, Resolved):
            return replace(found, explicit_value=value, member=member)
        return found if isinstance(found, Ambiguous) else None
    found = _classify(flags, token)
    return found if isinstance(found, (Resolved, Ambiguous)) else None


# --- A whole command line ---------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option occurrence in an argv, read as the engine reads it."""

    flag: str  # canonical long option
    option_string: str  # exact option string matched ("-tp", "--no-enforce-eager")
    spelling: str  # as written, without "=value" ("--tensor_parallel_size", "-O")
    token: str  # the whole argv token
    index: int  # argv index of the token
    values: tuple[str, ...]  # the value(s) consumed: "=value", or the following token(s)
    member: str | None = None  # vLLM dotted member path ("kv_role"), else None
    negated: bool = False  # a no-value spelling that stores False ("--disable-expert-parallel")
    value_missing: bool = False  # the option needs a value and the line gives none

    @property
    def value(self) -> str | None:
        """The single value (the first one for multi-value options), or None."""
        return self.values[0] if self.values else None


@dataclass(frozen=True)
class AmbiguousOption:
    """A token the engine refuses as ambiguous (a prefix of several option strings)."""

    token: str
    index: int
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class ParsedArgv:
    """Everything one reading of an argv found."""

    options: tuple[Option, ...]
    ambiguous: tuple[AmbiguousOption, ...]
    unknown: tuple[tuple[int, str], ...]  # (index, token) of options the engine does not have
    config_file: bool  # `--config FILE` pulls in options admission cannot read

    def of(self, flag: str) -> tuple[Option, ...]:
        """The occurrences of one canonical flag, in argv order."""
        return tuple(o for o in self.options if o.flag == flag)


def _arity(flags: EngineFlags, option_string: str) -> str:
    """How many values an option string consumes: "none", "optional", "many" or "one"."""
    if option_string in flags.no_value:
        return "none"
    if option_string in flags.optional_value:
        return "optional"
    if option_string in flags.many_values:
        return "many"
    return "one"


@dataclass
class _Reading:
    """What a walk over one argv has found so far."""

    options: list[Option] = field(default_factory=list)
    ambiguous: list[AmbiguousOption] = field(default_factory=list)
    unknown: list[tuple[int, str]] = field(default_factory=list)

    def add(self, found: Resolved | Ambiguous | _Unknown | None, token: str, index: int) -> Resolved | None:
        """Record an ambiguity or an unknown option; hand a resolved option back to the caller."""
        if isinstance(found, Ambiguous):
            self.ambiguous.append(AmbiguousOption(token, index, found.candidates))
        elif found is _UNKNOWN:
            self.unknown.append((index, token))
        elif isinstance(found, Resolved):
            return found
        return None


def _dotted_pass(flags: EngineFlags, argv: Sequence[str], reading: _Reading) -> set[int]:
    """vLLM pulls dotted members (and the token after each) out before argparse runs: read them,
    and return the indexes they took."""
    removed: set[int] = set()
    i = 0
    while flags.dotted_members and i < len(argv):
        dotted = _dotted(flags, argv[i])
        if dotted is None:
            i += 1
            continue
        name, member, value = dotted
        step = 1 if value is not None else 2
        removed.update(range(i, i + step))
        missing = value is None and i + 1 >= len(argv)
        if value is None and not missing:
            value = argv[i + 1]
        found = reading.add(_match(flags, name, argv[i].partition("=")[0]), argv[i], i)
        if found is not None:
            reading.options.append(
                Option(found.flag, found.option_string, found.spelling, argv[i], i,
                       () if value is None else (value,), member, False, missing)
            )
        i += step
    return removed


def _values(flags: EngineFlags, found: Resolved, argv: Sequence[str], rest: list[int], j: int) -> tuple[str, ...]:
    """The values an option takes from `=value` or from the tokens at rest[j:] (argparse's arity)."""
    if found.explicit_value is not None:
        return (found.explicit_value,)
    arity = _arity(flags, found.option_string)
    if arity == "none":
        return ()
    taken: list[str] = []
    limit = 1 if arity in ("one", "optional") else len(rest)
    while j < len(rest) and len(taken) < limit and _is_value(flags, argv[rest[j]]):
        taken.append(argv[rest[j]])
        j += 1
    return tuple(taken)


def _argparse_pass(flags: EngineFlags, argv: Sequence[str], rest: list[int], reading: _Reading) -> None:
    """argparse's walk over the tokens at `rest` (the indexes the dotted pass left): options and
    their values, up to a `--`."""
    j = 0
    while j < len(rest):
        k = rest[j]
        token = argv[k]
        j += 1
        if token == "--":
            return
        if flags.underscores_to_dashes and token == "-O" and j < len(rest) and argv[rest[j]] in _OPT_LEVELS:
            reading.options.append(Option(_OPT_LEVEL, _OPT_LEVEL, "-O", token, k, (argv[rest[j]],)))
            j += 1
            continue
        found = reading.add(_classify(flags, token), token, k)
        if found is None:
            continue
        values = _values(flags, found, argv, rest, j)
        if found.explicit_value is None:
            j += len(values)
        arity = _arity(flags, found.option_string)
        reading.options.append(
            Option(found.flag, found.option_string, found.spelling, token, k, values, None,
                   found.option_string in flags.negative, arity == "one" and not values)
        )


def parse_argv(engine: str, argv: Sequence[str]) -> ParsedArgv:
    """Walk an argv like the engine's parser: options with values, ambiguities, unknowns."""
    flags = flags_for(engine)
    reading = _Reading()
    removed = _dotted_pass(flags, argv, reading)
    _argparse_pass(flags, argv, [k for k in range(len(argv)) if k not in removed], reading)
    options = sorted(reading.options, key=lambda o: o.index)
    return ParsedArgv(
        options=tuple(options),
        ambiguous=tuple(sorted(reading.ambiguous, key=lambda a: a.index)),
        unknown=tuple(sorted(reading.unknown)),
        config_file=any(o.flag == "--config" for o in options),
    )


def _is_value(flags: EngineFlags, token: str) -> bool:
    """argparse gives an option only tokens it classifies as arguments, never option-looking ones."""
    return token != "--" and _classify(flags, token) is None


def parse_options(engine: str, argv: Sequence[str]) -> list[Option]:
    """The options of an argv as the engine reads them (positionals and unknowns skipped)."""
    return list(parse_argv(engine, argv).options)


# --- Kubernetes $(VAR) references -------------------------------------------------------------


def expand_references(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes expands `$(NAME)` in command/args from the container env; `$$` escapes."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _K8S_REF.sub(one, value)


# --- Port -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PortReading:
    """The `--port` an argv gives the engine (last occurrence wins), or why it cannot be read."""

    port: int | None  # None: no --port (the engine's default applies) or a problem
    spelling: str | None = None
    raw: str | None = None
    index: int | None = None
    problem: str | None = None


def read_port(engine: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> PortReading:
    """The port the engine will listen on per its argv: any spelling, `=value`, last one wins."""
    env = env or {}
    reading = PortReading(None)
    for o in parse_argv(engine, argv).of("--port"):
        shown = o.spelling if o.value is None else f"{o.spelling} {o.value}"
        if o.member is not None or o.value is None:
            why = "is given no value" if o.value is None else "is not a port number"
            message = f"`{shown}` {why}: --port needs an integer in 1..65535"
            return PortReading(None, o.spelling, o.value, o.index, message)
        text = expand_references(o.value, env)
        try:
            port = int(text)
        except ValueError:
            return PortReading(None, o.spelling, o.value, o.index,
                               f"`{shown}`: --port must be an integer in 1..65535, got {text!r}")
        if not 1 <= port <= 65535:
            return PortReading(None, o.spelling, o.value, o.index,
                               f"`{shown}`: --port must be in 1..65535, got {port}")
        reading = PortReading(port, o.spelling, o.value, o.index)
    return reading
