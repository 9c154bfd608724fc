"""What a router is to the operator: one `Router` entry holds everything that differs by router.

Each router module (`app/engines/llmd.py`, `app/engines/gateways.py`) defines its entry next to the
function that renders its Pod, and `app/engines/registry.py` lists the entries. The generic router
objects (ConfigMap, ServiceAccount, RBAC, Deployment, Service) are `app/render/router.py`'s; it
hands the entry's `render` plain `RouterInputs` and wraps the `RouterPod` it returns. Code outside
`app/engines/` never compares a router's name: it asks the entry
(docs/architecture.md#adding-an-engine-or-a-router).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol

from app import vocab
from app.api.objects import KubeObject
from app.api.v1 import Role
from app.model.context import DeploymentContext


@dataclass(frozen=True)
class Upstream:
    """A rendered role, as the router's Pod needs it."""

    role: Role
    port: int  # the port the router dials on every leader of the role (the decoders' routing proxy when present)


@dataclass(frozen=True)
class RouterInputs:
    """What a router's Pod is rendered from: the pass, the image, the roles and their addresses."""

    ctx: DeploymentContext
    image: str
    upstreams: tuple[Upstream, ...]  # every rendered role, in spec order
    leaders: Mapping[str, str]  # the labels of every serving leader of the deployment
    instance_host: Callable[[str, int], str]  # the stable DNS name of one instance: (role, ordinal)


@dataclass
class RouterPod:
    """A router's containers, the config documents they read (a ConfigMap when any) and the RBAC
    rules its ServiceAccount needs (a Role and RoleBinding when any)."""

    containers: list[dict[str, Any]]
    documents: dict[str, str] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)


class RenderRouter(Protocol):
    """A router's render function: its Pod's containers, documents and RBAC rules."""

    def __call__(self, inputs: RouterInputs) -> RouterPod: ...


@dataclass(frozen=True)
class Router:
    """One router of `spec.router.name`.

    - `flags`: the long options (no dashes) its entrypoint accepts, which `router.extraArgs` reach;
      `owned_flags`: the ones the operator renders or that break its wiring (refused, rule 18);
      `abbreviations`: the options a unique prefix may stand for (an argparse entrypoint; empty:
      exact names only); every entrypoint takes `--flag=value` besides `--flag value`;
    - `default_image`: its image when neither `spec.router.image` nor the operator's setting names one;
    - `render`: its Pod (containers, ports, probes, config documents, RBAC);
    - `engines`: the engines it routes (None: every engine);
    - `reads_threshold`: it reads `spec.router.disaggregationThresholdTokens`;
    - `instance_services`: a routed pair's Prefill and Decode instances each need a Service (it
      lists them statically by address);
    - `prefill_annotations`: what a routed pair's prefill Pods carry for it;
      `engine_labels`: per engine, the labels every engine Pod carries for it.
    """

    name: str
    flags: frozenset[str]
    owned_flags: frozenset[str]
    default_image: str
    render: RenderRouter
    engines: frozenset[str] | None = None
    abbreviations: frozenset[str] = frozenset()
    reads_threshold: bool = False
    instance_services: bool = False
    prefill_annotations: Mapping[str, str] = field(default_factory=dict)
    engine_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def fronts(self, engine: str) -> bool:
        """Whether it routes deployments of `engine`."""
        return self.engines is None or engine in self.engines

    def pod_labels(self, engine: str) -> Mapping[str, str]:
        """The labels an engine Pod of `engine` carries for this router."""
        return self.engine_labels.get(engine, MappingProxyType({}))

    def read_flag(self, token: str) -> str | None:
        """The long option (no dashes) its entrypoint reads `token` as, or None (not an option, or
        one it does not know)."""
        if not token.startswith("--") or token == "--":
            return None
        name = token[2:].split("=", 1)[0]
        if name in self.flags or name in self.owned_flags:
            return name
        if self.abbreviations and name:
            matches = [f for f in self.abbreviations if f.startswith(name)]
            if len(matches) == 1:
                return matches[0]
        return None


# --- what the router renders share --------------------------------------------------------------


def kinds_served(ctx: DeploymentContext) -> list[str]:
    """Role kinds the router sends traffic to (by role-kind label value)."""
    if ctx.routed_pair:
        return ["prefill", "decode"]
    return sorted({r.kind_label for r in ctx.md.spec.roles if r.kind == vocab.ROLE_KIND_SERVER}) or ["server"]


def leader_labels(inputs: RouterInputs, kind: str | None = None) -> dict[str, str]:
    """What identifies a serving leader of this deployment (optionally of one role kind)."""
    out = dict(inputs.leaders)
    if kind:
        out[vocab.LABEL_ROLE_KIND] = kind
    return out


def target_port(upstreams: list[Upstream] | tuple[Upstream, ...]) -> int:
    """The port the router dials on every leader (the decoders' routing proxy when present)."""
    return upstreams[0].port if upstreams else vocab.ROUTER_PORT


def request_timeout(ctx: DeploymentContext) -> int | None:
    return ctx.md.spec.router.request_timeout_seconds if ctx.md.spec.router else None


# The unprivileged user of the distroless router images (envoy's distroless tag, llm-d's EPP):
# numeric, so the kubelet can check runAsNonRoot against it.
DISTROLESS_NONROOT_UID = 65532


def router_security_context(run_as_user: int | None = None) -> dict[str, Any]:
    """A router container's securityContext (docs/engines.md#pod-security): what the engine
    containers get (no privilege escalation, the runtime's seccomp profile), and, as a router needs
    no capability (its ports are above 1023) and no device, every capability dropped; run as a
    non-root user where its image is known to have one (`run_as_user`)."""
    context: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                               "seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is not None:
        context.update(runAsNonRoot=True, runAsUser=run_as_user)
    return context


def pod_readers() -> list[KubeObject]:
    """The RBAC rule of a router that discovers the engine Pods by label."""
    return [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
