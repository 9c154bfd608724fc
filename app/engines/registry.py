"""The engines the operator runs, in one place: one `Engine` entry per `vocab.ENGINES` name.

Each entry (app/engines/entry.py) is defined beside its engine's render function (`VLLM` in
app/engines/vllm.py, `SGLANG` in app/engines/sglang.py) and holds everything that differs by
engine; code outside `app/engines/` looks the entry up here and asks it, never compares a name.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final, Mapping

from app.api.v1 import ModelDeployment
from app.engines.entry import Engine
from app.engines.flags import EngineFlags
from app.engines.sglang import SGLANG
from app.engines.vllm import VLLM

ENGINES: Final[Mapping[str, Engine]] = MappingProxyType({e.name: e for e in (VLLM, SGLANG)})


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
