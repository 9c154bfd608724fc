"""The operator-owned keys (docs/rendering.md#owned-keys), per engine, and where an argv or env uses them. Pure.

The keys themselves are in each engine's entry (app/engines/entry.py, listed in app/engines/registry.py).

Why: the operator renders these arguments and variables itself; a user-supplied duplicate cannot be
told apart from the operator's (or, for SGLang's Mooncake config sources, silently replaces the
whole client configuration). Ownership is per (engine, key): a key one engine owns is an ordinary
user argument or variable on the other. Flags are matched in every spelling the engine reads as
that flag (`app/engines/argv.py`); env names are matched exactly, as the engine reads them.

Not readable here, and so not refused here: a take-over `roles[].command` (it owns its whole line
by design), a `--config FILE` whose options live in a file inside the image
(`ParsedArgv.config_file` says when a line has one), and a token the engine refuses as an
ambiguous prefix (the engine will not start; `ParsedArgv.ambiguous` lists them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from app.engines.argv import parse_argv
from app.engines.entry import API_KEY_FLAG
from app.engines.registry import engine_for


def owned_flags(engine: str, *, kv_cache_dtype_owned: bool) -> frozenset[str]:
    """The canonical flags the operator owns on `engine`; `--kv-cache-dtype` only when asked."""
    return engine_for(engine).owned_flags_with(kv_cache_dtype_owned=kv_cache_dtype_owned)


def owned_env_names(engine: str) -> frozenset[str]:
    """The env names the operator owns on `engine` (exact names; a name prefix means nothing)."""
    return engine_for(engine).owned_env


@dataclass(frozen=True)
class OwnedUse:
    """One use of an owned flag in a user argv, with what a refusal message needs."""

    engine: str  # vocab.ENGINE_VLLM / vocab.ENGINE_SGLANG
    flag: str  # the canonical owned flag, e.g. "--kv-transfer-config"
    spelling: str  # as written, without "=value", e.g. "--kv_transfer_config", "--kv-transfer-conf"
    token: str  # the whole argv token
    index: int  # its index in the argv that was read
    member: str | None = None  # vLLM dotted member ("kv_role") when spelt that way

    @property
    def spelled_exactly(self) -> bool:
        """Whether the user wrote the canonical flag itself (the message then needs no "is")."""
        return self.spelling == self.flag


def owned_arg_uses(engine: str, argv: Sequence[str], *, kv_cache_dtype_owned: bool) -> list[OwnedUse]:
    """Every occurrence of an owned flag in `argv`, in any spelling `engine` reads as that flag."""
    owned = owned_flags(engine, kv_cache_dtype_owned=kv_cache_dtype_owned)
    return [
        OwnedUse(engine, o.flag, o.spelling, o.token, o.index, o.member)
        for o in parse_argv(engine, argv).options
        if o.flag in owned
    ]


def owned_env_uses(engine: str, env_names: Iterable[str]) -> list[str]:
    """The names in `env_names` that `engine`'s operator owns, in the order given."""
    owned = owned_env_names(engine)
    return [name for name in env_names if name in owned]


@dataclass(frozen=True)
class ApiKeyUse:
    """An engine API key set on a role: admitted, with a warning (probes on /v1 would get 401)."""

    engine: str
    kind: str  # "argument" or "env"
    name: str  # canonical flag ("--api-key") or env name ("VLLM_API_KEY")
    spelling: str  # as written
    index: int | None  # argv index for an argument, None for env


def api_key_uses(engine: str, argv: Sequence[str], env_names: Iterable[str]) -> list[ApiKeyUse]:
    """Where a role sets the engine's API key: `--api-key` in any spelling, or its env variable."""
    uses = [
        ApiKeyUse(engine, "argument", API_KEY_FLAG, o.spelling, o.index)
        for o in parse_argv(engine, argv).options
        if o.flag == API_KEY_FLAG
    ]
    names = engine_for(engine).api_key_env
    uses += [ApiKeyUse(engine, "env", n, n, None) for n in env_names if n in names]
    return uses
