"""The rules of a deployment's router and serving ports (docs/admission.md#the-rules 18, 19): the
router fits the engine, reads the threshold, and owns its wiring flags; the routed roles share one
target port. What differs by router is its entry's (app/engines/router_entry.py).
"""

from __future__ import annotations

from app import vocab
from app.admission.model import Refusal, Subject, role_path
from app.api.v1 import Role
from app.engines.registry import ROUTERS, engine_for, router_for, routers_fronting
from app.model.context import RenderOptions, build_context
from app.render.pod import role_ports
from app.world import World


def _serving_port_source(index: int, role: Role, engine: str) -> str:
    """The field a role's serving port comes from, for the refusal's path."""
    if role.ports:
        return role_path(index, "ports[0].port")
    if role_ports(engine, role).container != vocab.DEFAULT_SERVING_PORT:
        return role_path(index, "command" if not role.managed else "extraArgs")
    return role_path(index, "ports")


def routed_ports(subject: Subject) -> list[Refusal]:
    """Rule 19: the router dials one target port on every role it routes, so they must share it."""
    md = subject.md
    if md.spec.router is None or len(md.spec.roles) < 2:
        return []
    ctx = build_context(md, subject.world or World(), RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))
    engine = subject.engine
    served = [(index, role, role_ports(engine, role, proxied=engine_for(engine).routing_proxy_rendered(ctx, role)).container)
              for index, role in enumerate(md.spec.roles)]
    if len({port for _, _, port in served}) < 2:
        return []
    shown = ", ".join(f"{role.name} {port} (spec.roles[{index}])" for index, role, port in served)
    first = served[0][2]
    return [Refusal(_serving_port_source(index, role, engine),
                    f"the routed roles serve on different ports ({shown}), and {md.spec.router.name} dials one target "
                    f"port on every role it routes, so traffic for role {role.name!r} would go to {first}, where "
                    "nothing answers",
                    "serve every routed role on one port (the same first ports[] entry, or no ports and no --port for "
                    "8000)")
            for index, role, port in served if port != first]


def router_rules(subject: Subject) -> list[Refusal]:
    """Rule 18: the router fits the engine; the threshold is read by the router; no router-owned flag
    in extraArgs (each read as the router's entrypoint reads it)."""
    router = subject.md.spec.router
    if router is None:
        return []
    out: list[Refusal] = []
    engine = subject.engine
    entry = router_for(router.name)
    if not entry.fronts(engine):
        every, own = routers_fronting(engine)
        out.append(Refusal("spec.router.name", f"{router.name} routes {', '.join(sorted(entry.engines or ()))} "
                           f"engines only, and this deployment runs {engine}",
                           f"use {' or '.join(every)} (either engine) or the router of {engine} ({', '.join(own)})"))
    if router.disaggregation_threshold_tokens is not None and not entry.reads_threshold:
        readers = [name for name, r in ROUTERS.items() if r.reads_threshold]
        out.append(Refusal("spec.router.disaggregationThresholdTokens",
                           f"is read by {' and '.join(readers)} only, and this router is {router.name}",
                           f"remove disaggregationThresholdTokens, or use {' or '.join(readers)}"))
    for j, token in enumerate(router.extra_args):
        if token == "--":
            break
        flag = entry.read_flag(token)
        if flag is not None and flag in entry.owned_flags:
            spelled = token.split("=", 1)[0]
            shown = f"{spelled} is --{flag}, which" if spelled != f"--{flag}" else f"--{flag} is an option"
            out.append(Refusal(f"spec.router.extraArgs[{j}]",
                               f"{shown} the operator renders and owns on {router.name}",
                               "remove it: the operator wires the router's listener, discovery, metrics and policy "
                               "from the deployment (requestTimeoutSeconds, disaggregationThresholdTokens, replicas)"))
    return out
