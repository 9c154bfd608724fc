"""What an engine is to the operator: one `Engine` entry holds everything that differs by engine.

Each engine module (`app/engines/vllm.py`, `app/engines/sglang.py`) defines its entry next to its
render function, and `app/engines/registry.py` lists the entries. Code outside `app/engines/` never
compares an engine's name: it looks the entry up (`registry.engine(name)`) and asks it
(docs/architecture.md#adding-an-engine-or-a-router).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Final, Mapping, Protocol, Sequence

from app import vocab
from app.api.v1 import Role
from app.engines.common import (
    ASCEND_PROTOCOL,
    KV_EVENT_PRODUCER_KINDS,
    EngineRender,
    cache_rendered,
    on_ascend,
    transfer_leg_rendered,
)
from app.engines.flags import EngineFlags
from app.model.context import STORE_PROTOCOL, DeploymentContext

KV_CACHE_DTYPE_FLAG: Final = "--kv-cache-dtype"
API_KEY_FLAG: Final = "--api-key"
HOST_FLAG: Final = "--host"
# The addresses that listen on every interface: the Pod IP the probes, Services and router dial.
WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", "[::]"})
LISTEN_WHY: Final = ("the probes, the Services and the router reach the engine on the Pod's IP, so it must listen on "
                     "every interface (the operator renders --host 0.0.0.0)")
GRPC_WHY: Final = ("it serves gRPC instead of HTTP: the probes, the router and the Services speak HTTP to the engine, "
                   "so the Pod never becomes Ready")
TLS_WHY: Final = ("the probes, the router and the Services speak plain HTTP to the engine: a TLS listener answers "
                  "none of them, and the Pod never becomes Ready")


class RenderEngine(Protocol):
    """An engine's render function: a managed role's argv, env, annotations, volumes and ports.
    `listen_port` None means the user's own --port stays in charge."""

    def __call__(self, ctx: DeploymentContext, role: Role, *, listen_port: int | None) -> EngineRender: ...


def keep_serve_args(args: Sequence[str]) -> list[str]:
    """A `serve` subcommand that hands its arguments to the server parser unchanged."""
    return list(args)


@dataclass(frozen=True)
class CommandShape:
    """How a take-over `roles[].command` runs the engine's server, so admission can find the
    server's own arguments in it (app/engines/takeover.py)."""

    program: str  # `<program> serve ARGS...`
    # `python [flags] -m MODULE [SUBCOMMAND] ARGS...`: each module with its subcommand (None: none).
    modules: Mapping[str, str | None]
    # What a `serve` subcommand does to its arguments before the server parser reads them.
    serve_args: Callable[[Sequence[str]], list[str]] = keep_serve_args


@dataclass(frozen=True)
class Engine:
    """One engine: its parser table, its render, the keys the operator owns on it, and its rules.

    - `flags`: the option table of its server parser (app/engines/flags.py), read from the data file
      of one release (`version`); `scripts/extract-engine-flags.sh` regenerates the file;
    - `render`: the managed command line, env, volumes and ports of a role;
    - `owned_flags`, `owned_env`: the operator-owned keys (docs/rendering.md#owned-keys; refused in a
      user's argv/env in every spelling the engine reads; `--kv-cache-dtype` is owned on top while
      the setting says so);
    - `tenant_env`, `tenant_flags`: the user's keys that carry or replace the store client's tenant,
      dropped by the render's tenant guard (docs/rendering.md#the-renders-tenant-guard);
    - `api_key_env`: the env variables the engine reads its API key from (a warning,
      docs/admission.md#the-rules);
    - `degree_flags`: the canonical flags of its parallel degrees, to the `Degrees` field each sets;
      `data_parallel_env`: a variable it reads its data-parallel size from, if any; `tensor_flag`:
      the tensor-parallel spelling the idle-cards warning suggests;
    - `kv_cache_dtypes`: the `--kv-cache-dtype` spellings (docs/cluster-objects.md#kvcachepoolbinding);
    - `publishes_kv_events`: behind a router, its cache-producing roles publish KV events;
    - `ascend_leg`: on an Ascend pool its direct P/D leg runs over the store's `ascend` transport
      (docs/rendering.md#kv-cache-attachment);
    - `proxied_decoder`: a routed pair's managed Decode role runs behind the routing proxy;
    - `command`: how a take-over command runs its server;
    - `contract_flags`: the options that would break the Pod's contract with its probes and Services
      (docs/admission.md#the-rules, rule 23), each with why: where the server listens (`--host`
      other than a wildcard address, a Unix socket instead of TCP), and TLS on a listener the
      probes and the router reach over plain HTTP.
    """

    name: str
    flags: EngineFlags
    render: RenderEngine
    owned_flags: frozenset[str]
    owned_env: frozenset[str]
    tenant_env: frozenset[str]
    tenant_flags: frozenset[str]
    api_key_env: frozenset[str]
    degree_flags: Mapping[str, str]
    kv_cache_dtypes: frozenset[str]
    command: CommandShape
    tensor_flag: str
    data_parallel_env: str | None = None
    publishes_kv_events: bool = False
    ascend_leg: bool = False
    proxied_decoder: bool = False
    contract_flags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def version(self) -> str:
        """The release the option table comes from: the version admission reads lines as."""
        return self.flags.version

    def kv_events_off(self, ctx: DeploymentContext) -> str | None:
        """Why no role of the deployment publishes KV events (a KVEventsPublishing reason), or None:
        only a deployment behind a router on an engine that publishes them does."""
        if ctx.md.spec.router is None:
            return vocab.REASON_NO_ROUTER
        if not self.publishes_kv_events:
            return vocab.REASON_PUBLISHER_DISABLED
        return None

    def kv_events_rendered(self, ctx: DeploymentContext, role: Role) -> bool:
        """Routed managed roles that produce cache blocks publish KV events; decoders need not."""
        return self.kv_events_off(ctx) is None and role.managed and role.kind in KV_EVENT_PRODUCER_KINDS

    def leg_protocol(self, ctx: DeploymentContext, role: Role) -> str:
        """The effective transport of the role's direct leg: `ascend` on an Ascend pool for an engine
        whose leg runs on it (docs/rendering.md#kv-cache-attachment), else the deployment's."""
        if self.ascend_leg and on_ascend(ctx, role):
            return STORE_PROTOCOL[ASCEND_PROTOCOL]
        return ctx.transfer_protocol

    def role_protocols(self, ctx: DeploymentContext, role: Role) -> frozenset[str]:
        """Transports this role's engine actually renders: the cache backend's and the direct leg's."""
        protocols: set[str] = set()
        if cache_rendered(ctx, role) and ctx.attachment is not None:
            protocols.add(ctx.attachment.protocol)
        if transfer_leg_rendered(ctx, role):
            protocols.add(self.leg_protocol(ctx, role))
        return frozenset(protocols)

    def routing_proxy_rendered(self, ctx: DeploymentContext, role: Role) -> bool:
        """A managed decoder in a routed pair runs the routing proxy in front of an engine that needs it."""
        return (self.proxied_decoder and ctx.routed_pair and role.managed
                and role.kind == vocab.ROLE_KIND_DECODE)

    def owned_flags_with(self, *, kv_cache_dtype_owned: bool) -> frozenset[str]:
        """The canonical flags the operator owns; `--kv-cache-dtype` only when the setting says so."""
        return self.owned_flags | {KV_CACHE_DTYPE_FLAG} if kv_cache_dtype_owned else self.owned_flags
