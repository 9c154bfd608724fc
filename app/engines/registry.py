"""The engines and routers the operator runs, in one place: one `Engine` entry per `vocab.ENGINES`
name, one `Router` entry per router name.

Each entry is defined beside its render function (engines: app/engines/entry.py, `VLLM` in
app/engines/vllm.py, `SGLANG` in app/engines/sglang.py; routers: app/engines/router_entry.py,
`LLMD` in app/engines/llmd.py, `VLLM_ROUTER` and `SGLANG_GATEWAY` in app/engines/gateways.py) and
holds everything that differs by engine or router; code outside `app/engines/` looks the entry up
here and asks it, never compares a name.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final, Mapping

from app.api.v1 import ModelDeployment
from app.engines.entry import Engine
from app.engines.flags import EngineFlags
from app.engines.gateways import SGLANG_GATEWAY, VLLM_ROUTER
from app.engines.llmd import LLMD
from app.engines.router_entry import Router
from app.engines.sglang import SGLANG
from app.engines.vllm import VLLM

ENGINES: Final[Mapping[str, Engine]] = MappingProxyType({e.name: e for e in (VLLM, SGLANG)})
ROUTERS: Final[Mapping[str, Router]] = MappingProxyType({r.name: r for r in (LLMD, VLLM_ROUTER, SGLANG_GATEWAY)})


def engine_for(name: str) -> Engine:
    """The engine called `name` (a `vocab.ENGINES` name); KeyError names an unknown engine."""
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; expected one of {list(ENGINES)}") from None


def engine_of(md: ModelDeployment) -> Engine:
    """The entry of the engine the deployment runs (`spec.engine.name`)."""
    return engine_for(md.spec.engine.name)


def flags_for(name: str) -> EngineFlags:
    """The option table of engine `name`; KeyError names an unknown engine."""
    return engine_for(name).flags


def router_for(name: str) -> Router:
    """The router called `name` (a `spec.router.name`); KeyError names an unknown router."""
    try:
        return ROUTERS[name]
    except KeyError:
        raise KeyError(f"unknown router {name!r}; expected one of {list(ROUTERS)}") from None


def routers_fronting(engine: str) -> tuple[list[str], list[str]]:
    """(the routers of every engine, the routers of `engine` alone): what a refusal suggests."""
    every = [r.name for r in ROUTERS.values() if r.engines is None]
    own = [r.name for r in ROUTERS.values() if r.engines is not None and r.fronts(engine)]
    return every, own
