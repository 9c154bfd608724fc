"""Tenant isolation in the render (docs/rendering.md#the-renders-tenant-guard; admission rule 20).

The KV cache tenant is the Binding's domain, rendered by the operator into the client
configuration (vLLM: the file `/etc/gpustack/kvcache/mooncake.json` that `MOONCAKE_CONFIG_PATH`
names; SGLang: `MOONCAKE_TENANT_ID` and the Mooncake environment). Admission refuses a user's
duplicate of those keys, but a stored object may carry one (admitted before a rule, or written
while the webhook was bypassed). So on a role whose cache the operator renders, the user's
tenant-bearing variables, the arguments that replace the client configuration (vLLM's
`--kv-transfer-config`, SGLang's `--hicache-storage-backend-extra-config`, in every spelling) and
any mount at, over or under the client configuration are dropped from the render, and the caller
records a warning Event naming each (`ignored`). Which variables and arguments bear the tenant is
the engine's (`Engine.tenant_env`, `Engine.tenant_flags`, app/engines/entry.py).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from app import vocab
from app.api.v1 import Role
from app.engines.argv import parse_argv
from app.engines.registry import engine_for

# Where the client configuration lives (the directory and its file).
TENANT_PATHS = (vocab.KVCACHE_CONFIG_DIR, vocab.KVCACHE_CONFIG_PATH)


def tenant_env(engine: str) -> frozenset[str]:
    """The variables that carry or select the tenant on `engine` (the guard drops a user's own)."""
    return engine_for(engine).tenant_env


def path_relation(mount_path: str, owned: str) -> str | None:
    """How a mount path sits against an owned path: "at", "over" (an ancestor, hiding it), "under"
    (inside it, replacing part of it), or None when they are apart. Paths are normalized first
    (`//`, `/./`, `..`, a trailing slash)."""
    mount = posixpath.normpath("/" + mount_path.lstrip("/"))
    owned = posixpath.normpath(owned)
    if mount == owned:
        return "at"
    if owned.startswith(mount.rstrip("/") + "/"):
        return "over"
    if mount.startswith(owned + "/"):
        return "under"
    return None


def owned_path_conflict(mount_path: str, owned_paths: tuple[str, ...]) -> tuple[str, str] | None:
    """(relation, owned path) of the first owned path the mount is at, over or under; None if none."""
    for owned in owned_paths:
        relation = path_relation(mount_path, owned)
        if relation is not None:
            return relation, owned
    return None


def tenant_arguments(engine: str, argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without the tenant-bearing arguments and their values, what was dropped)."""
    flags = engine_for(engine).tenant_flags
    dropped_indexes: set[int] = set()
    dropped: list[str] = []
    for option in parse_argv(engine, argv).options:
        if option.flag not in flags:
            continue
        taken = 0 if "=" in option.token else len(option.values)
        dropped_indexes.update(range(option.index, option.index + 1 + taken))
        dropped.append(f"extraArgs[{option.index}] {option.spelling}")
    return [token for index, token in enumerate(argv) if index not in dropped_indexes], dropped


@dataclass(frozen=True)
class Guarded:
    """The role as the render may use it, and what was dropped from it (for the warning Event)."""

    role: Role
    ignored: tuple[str, ...] = ()


def guard(engine: str, cache_rendered: bool, role: Role) -> Guarded:
    """The role without the user's tenant-bearing keys, when the operator renders the tenant."""
    if not cache_rendered:
        return Guarded(role)
    bearing = tenant_env(engine)
    extra_args, ignored = tenant_arguments(engine, list(role.extra_args))
    env = []
    for index, entry in enumerate(role.env):
        if entry.name in bearing:
            ignored.append(f"env[{index}] {entry.name}")
        else:
            env.append(entry)
    volumes = []
    for index, volume in enumerate(role.additional_volumes):
        conflict = owned_path_conflict(volume.mount_path, TENANT_PATHS)
        if conflict is not None:
            ignored.append(f"additionalVolumes[{index}] mountPath {volume.mount_path} ({conflict[0]} {conflict[1]})")
        else:
            volumes.append(volume)
    if not ignored:
        return Guarded(role)
    return Guarded(role.model_copy(update={"env": env, "additional_volumes": volumes, "extra_args": extra_args}),
                   tuple(ignored))
