"""The parallel degrees an engine command line declares, and the cards one Pod's engine addresses.
Pure, no I/O.

Each engine's degree flags are its entry's (`Engine.degree_flags`, app/engines/entry.py); a value is
read as the engine's `int` converter reads it (after Kubernetes' `$(NAME)` expansion), the last one
wins. How the degrees lay ranks out on a node differs by engine and is written here, per engine:
vLLM 0.33 (tensor × pipeline × prefill-context per data-parallel rank, `--data-parallel-size-local`
ranks per node, the data-parallel size also from its env variable) and SGLang 0.5.23 (replicas ×
tensor × pipeline, split over `--nnodes`; attention data parallelism inside the tensor group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from app import vocab
from app.engines.argv import Option, expand_references, parse_argv
from app.engines.registry import engine_for


@dataclass(frozen=True)
class Degrees:
    """The parallel degrees an argv declares (engine defaults where it declares none)."""

    engine: str
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    data_local: int | None = None  # vLLM -dpl as given
    decode_context: int = 1
    prefill_context: int = 1  # vLLM -pcp (adds ranks)
    expert_parallel: bool = False  # vLLM --enable-expert-parallel
    expert: int | None = None  # SGLang --ep-size (inside the TP group)
    attention_data: int = 1  # SGLang --attn-dp-size (inside the TP group)
    nnodes: int = 1  # --nnodes: the engine splits its ranks over this many nodes itself
    data_external_lb: bool = False  # vLLM --data-parallel-external-lb or --data-parallel-rank
    data_from_env: bool = False  # vLLM: data came from VLLM_DP_SIZE (one DP rank per process)


@dataclass(frozen=True)
class DegreeProblem:
    """A degree the engine cannot read: its process would exit at start."""

    flag: str  # canonical flag or env name
    spelling: str  # as written
    value: str | None
    index: int | None  # argv index, None for an env variable
    message: str


@dataclass(frozen=True)
class DegreeReading:
    """Degrees plus every problem found reading them."""

    degrees: Degrees
    problems: tuple[DegreeProblem, ...]


def _read_int(flag: str, spelling: str, raw: str | None, index: int | None, engine: str,
              env: Mapping[str, str], member: str | None = None) -> tuple[int | None, DegreeProblem | None]:
    """One whole number ≥ 1 as the engine's `int` converter reads it, or the problem with it."""
    shown = spelling if raw is None else f"{spelling} {raw}"
    if member is not None:
        return None, DegreeProblem(flag, spelling, raw, index,
                                   f"`{shown}`: {flag} takes a whole number, not a JSON member (.{member})")
    if raw is None:
        message = f"`{spelling}` is given no value: {engine} needs a whole number of at least 1 for {flag}"
        return None, DegreeProblem(flag, spelling, None, index, message)
    text = expand_references(raw, env)
    try:
        n = int(text)
    except ValueError:
        return None, DegreeProblem(flag, spelling, raw, index,
                                   f"`{shown}`: {flag} must be a whole number, got {text!r}")
    if n < 1:
        return None, DegreeProblem(flag, spelling, raw, index,
                                   f"`{shown}`: {flag} must be at least 1, got {n}")
    return n, None


def _vllm_degrees(engine: str, found: dict[str, int], seen: Mapping[str, Option], env: Mapping[str, str],
                  problems: list[DegreeProblem]) -> Degrees:
    """vLLM: expert parallelism, an external load balancer, and the data-parallel size from its env."""
    ep = seen.get("--enable-expert-parallel")
    lb = seen.get("--data-parallel-external-lb")
    degrees = Degrees(
        engine=engine,
        expert_parallel=ep is not None and not ep.negated,
        data_external_lb=(lb is not None and not lb.negated) or "--data-parallel-rank" in seen,
        # `found` holds only int degree fields (the registry's degree_flags values), never a bool one.
        **found,  # type: ignore[arg-type]
    )
    name = engine_for(engine).data_parallel_env
    raw = env.get(name) if name is not None else None
    if name is not None and raw is not None and degrees.data == 1:
        # vLLM reads VLLM_DP_SIZE only when the line leaves data parallelism at 1.
        n, problem = _read_int(name, name, raw, None, engine, {})
        if problem is not None:
            problems.append(problem)
        elif n is not None and n > 1:
            degrees = replace(degrees, data=n, data_from_env=True)
    return degrees


def _sglang_degrees(engine: str, found: dict[str, int], seen: Mapping[str, Option], env: Mapping[str, str],
                    problems: list[DegreeProblem]) -> Degrees:
    """SGLang: the deprecated `--dp-size N --enable-dp-attention` is `--attn-dp-size N`."""
    degrees = Degrees(engine=engine, **found)  # type: ignore[arg-type]  # int degree fields only, as above
    if "--enable-dp-attention" in seen and degrees.attention_data == 1:
        degrees = replace(degrees, attention_data=degrees.data, data=1)
    return degrees


def read_degrees(engine: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> DegreeReading:
    """The degrees an argv declares, with every unreadable degree as a problem (last value wins)."""
    env = env or {}
    parsed = parse_argv(engine, argv)
    table = engine_for(engine).degree_flags
    found: dict[str, int] = {}
    problems: list[DegreeProblem] = []
    for o in parsed.options:
        field = table.get(o.flag)
        if field is None:
            continue
        n, problem = _read_int(o.flag, o.spelling, o.value, o.index, engine, env, o.member)
        if problem is not None:
            problems.append(problem)
        elif n is not None:
            found[field] = n
    finish = _vllm_degrees if engine == vocab.ENGINE_VLLM else _sglang_degrees
    degrees = finish(engine, found, {o.flag: o for o in parsed.options}, env, problems)
    return DegreeReading(degrees, tuple(problems))


def declared_width(degrees: Degrees, *, pods: int = 1) -> int:
    """Cards one Pod's engine addresses, computed as the engine lays its ranks out on a node."""
    if degrees.engine == vocab.ENGINE_VLLM:
        total, per_node = _vllm_width(degrees)
    else:
        total, per_node = _sglang_width(degrees)
    if pods > 1 and degrees.nnodes == 1:
        # No --nnodes: the engine may still spread its world over the instance (Ray); the
        # most one Pod can be asked for is an even share of the whole world.
        return max(1, math.ceil(total / pods))
    return per_node


def _vllm_width(d: Degrees) -> tuple[int, int]:
    """vLLM 0.33: world = tp×pp×pcp per DP rank; a node hosts dp_local ranks of its share."""
    world = d.tensor * d.pipeline * d.prefill_context
    if d.data_from_env or d.data_external_lb:
        local = 1
    elif d.data_local is not None:
        local = d.data_local
    elif d.nnodes > 1:
        local = max((d.data * world // d.nnodes) // world, 1)
    else:
        local = d.data
    if d.nnodes > 1:
        within_dp = max(d.nnodes // max(d.data // max(local, 1), 1), 1)
        return local * world, local * max(world // within_dp, 1)
    return local * world, local * world


def _sglang_width(d: Degrees) -> tuple[int, int]:
    """SGLang 0.5.23: replicas × tp × pp GPUs, tp and pp split over --nnodes; attention DP adds none."""
    replicas = d.data if d.attention_data == 1 else 1
    total = replicas * d.tensor * d.pipeline
    pp_per_node = max(d.pipeline // d.nnodes, 1)
    nodes_per_pp_rank = max(d.nnodes // d.pipeline, 1)
    tp_per_node = max(d.tensor // nodes_per_pp_rank, 1)
    return total, (replicas - 1) * d.tensor * d.pipeline + pp_per_node * tp_per_node
