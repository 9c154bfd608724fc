"""What one render pass knows besides the deployment: options and the resolved cluster facts.

Everything here is resolved once per pass from the World, so the per-role renderers read plain
values instead of chasing references.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app import vocab
from app.api.cluster import KVCacheBackend, KVCachePool, KVCachePoolBinding, ModelArtifact, ReuseDomain
from app.api.v1 import ModelDeployment, Role
from app.world import World

# The store's spelling of each KVCacheBackend/kvTransfer protocol (docs/rendering.md#kv-cache-attachment).
STORE_PROTOCOL = {
    "Auto": "tcp",
    "TCP": "tcp",
    "RDMA": "rdma",
    "EFA": "efa",
    "CANN": "ascend",
    "ROCM": "hip",
    "MUSA": "musa",
    "MACA": "maca",
}


@dataclass(frozen=True)
class ContainerResources:
    """CPU and memory requests and limits (Kubernetes quantities) of a container the operator adds."""

    cpu_request: str
    memory_request: str
    cpu_limit: str
    memory_limit: str

    def as_kube(self) -> dict[str, dict[str, str]]:
        return {"requests": {"cpu": self.cpu_request, "memory": self.memory_request},
                "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit}}


# Each router container (llm-d's Envoy and Endpoint Picker, vllm-router, sglang-gateway): enough for
# a proxy and a scorer at moderate load, burstable to two cores (docs/operations.md#settings-environment-of-the-service).
DEFAULT_ROUTER_RESOURCES = ContainerResources(cpu_request="500m", memory_request="512Mi", cpu_limit="2",
                                              memory_limit="2Gi")
# The routing sidecar in each routed vLLM decoder Pod (part of that Pod's quota).
DEFAULT_ROUTING_SIDECAR_RESOURCES = ContainerResources(cpu_request="500m", memory_request="256Mi", cpu_limit="2",
                                                       memory_limit="1Gi")


@dataclass(frozen=True)
class RenderOptions:
    """Operator settings that change what Pods render (changing one rolls the affected replicas)."""

    kv_cache_dtype_owned: bool = True
    # Empty: each router's own default image (its entry's, app/engines/router_entry.py); spec.router.image wins.
    router_image: str = ""
    routing_sidecar_image: str = vocab.DEFAULT_ROUTING_SIDECAR_IMAGE
    router_resources: ContainerResources = DEFAULT_ROUTER_RESOURCES
    routing_sidecar_resources: ContainerResources = DEFAULT_ROUTING_SIDECAR_RESOURCES
    # Upgrade rehearsal (docs/operations.md#rehearsing-an-upgrade): above 0, every Pod renders
    # differently and under a render revision this much newer.
    render_rehearsal: int = 0


@dataclass(frozen=True)
class Attachment:
    """A deployment's KV cache attachment as resolved from its Binding, pool and backend."""

    binding: str
    pool: str | None = None
    domain: ReuseDomain | None = None
    endpoint: str | None = None
    protocols: frozenset[str] = frozenset()
    # Why new replicas are held (None when usable), with the DomainRegistered reason.
    hold_reason: str | None = None
    hold_message: str = ""

    @property
    def usable(self) -> bool:
        return self.hold_reason is None

    @property
    def protocol(self) -> str:
        """The first offered transport: an older binding on a mixed backend keeps rendering it."""
        return sorted(self.protocols)[0] if self.protocols else "tcp"


def backend_protocols(backend: KVCacheBackend) -> frozenset[str]:
    """Effective protocol of every member group: its own, else the backend's."""
    default = backend.spec.transport.protocol
    members = backend.spec.members
    if not members:
        return frozenset({STORE_PROTOCOL[default]})
    return frozenset(STORE_PROTOCOL[(m.transport.protocol if m.transport else default)] for m in members)


def resolve_attachment(md: ModelDeployment, world: World) -> Attachment | None:
    spec = md.spec.kv_cache
    if spec is None:
        return None
    name = spec.pool_ref.name
    binding: KVCachePoolBinding | None = world.binding(md.metadata.namespace, name)
    if binding is None:
        absence = world.absence(vocab.KIND_KV_CACHE_POOL_BINDING, name, md.metadata.namespace)
        return Attachment(binding=name, hold_reason=vocab.REASON_BINDING_NOT_FOUND,
                          hold_message=f"KVCachePoolBinding {name!r} {absence} in namespace "
                                       f"{md.metadata.namespace!r}; an administrator must create or repair it to "
                                       "grant the pool")
    pool_name = binding.spec.pool_ref.name
    base = Attachment(binding=name, pool=pool_name, domain=binding.spec.domain)
    if binding.metadata.deletion_timestamp or binding.status.phase == vocab.POOL_PHASE_DELETING:
        return _hold(base, vocab.REASON_BINDING_DELETING, f"KVCachePoolBinding {name!r} is being deleted")
    if binding.status.phase != vocab.POOL_PHASE_READY:
        return _hold(base, vocab.REASON_BINDING_NOT_READY,
                     f"KVCachePoolBinding {name!r} is {binding.status.phase or 'not yet reconciled'}, not Ready")
    pool: KVCachePool | None = world.pools.get(pool_name)
    if pool is None:
        return _hold(base, vocab.REASON_BINDING_NOT_READY, f"KVCachePool {pool_name!r} of binding {name!r} "
                     f"{world.absence(vocab.KIND_KV_CACHE_POOL, pool_name)}")
    if pool.metadata.deletion_timestamp or pool.status.phase == vocab.POOL_PHASE_DELETING:
        return _hold(base, vocab.REASON_BINDING_DELETING, f"KVCachePool {pool_name!r} is being deleted")
    if pool.status.phase not in (vocab.POOL_PHASE_READY, vocab.POOL_PHASE_DEGRADED) or not pool.status.client_endpoint:
        return _hold(base, vocab.REASON_BINDING_NOT_READY,
                     f"KVCachePool {pool_name!r} is {pool.status.phase or 'not yet reconciled'} and has "
                     f"{'published' if pool.status.client_endpoint else 'not published'} its client endpoint")
    backend = world.backends.get(pool.backend_name or "")
    if backend is None:
        return _hold(base, vocab.REASON_BINDING_NOT_READY,
                     f"KVCacheBackend {pool.backend_name!r} of pool {pool_name!r} "
                     f"{world.absence(vocab.KIND_KV_CACHE_BACKEND, pool.backend_name or '')}")
    return Attachment(binding=name, pool=pool_name, domain=binding.spec.domain, endpoint=pool.status.client_endpoint,
                      protocols=backend_protocols(backend))


def _hold(base: Attachment, reason: str, message: str) -> Attachment:
    return Attachment(binding=base.binding, pool=base.pool, domain=base.domain, hold_reason=reason,
                      hold_message=message)


@dataclass(frozen=True)
class ArtifactState:
    """The model artifact a deployment names, resolved or the reason it is not."""

    artifact: ModelArtifact | None
    reason: str  # Resolved | ArtifactNotFound | ArtifactNotResolved
    message: str = ""

    @property
    def ready(self) -> bool:
        return self.reason == vocab.REASON_RESOLVED


def resolve_artifact(md: ModelDeployment, world: World) -> ArtifactState | None:
    ref = md.spec.model.artifact_ref
    if ref is None:
        return None
    artifact = world.artifact(md.metadata.namespace, ref.name)
    if artifact is None:
        return ArtifactState(None, vocab.REASON_ARTIFACT_NOT_FOUND,
                             f"ModelArtifact {ref.name!r} does not exist in namespace {md.metadata.namespace!r}")
    if not artifact.resolved:
        return ArtifactState(artifact, vocab.REASON_ARTIFACT_NOT_RESOLVED, f"ModelArtifact {ref.name!r} has not resolved yet")
    return ArtifactState(artifact, vocab.REASON_RESOLVED, f"ModelArtifact {ref.name!r} resolved")


@dataclass(frozen=True)
class DeploymentContext:
    md: ModelDeployment
    world: World
    options: RenderOptions
    attachment: Attachment | None
    artifact: ArtifactState | None
    kinds: frozenset[str] = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        return self.md.metadata.name

    @property
    def namespace(self) -> str:
        return self.md.metadata.namespace

    @property
    def routed_pair(self) -> bool:
        """A router in front of a Prefill and a Decode role: the direct transfer leg renders."""
        return self.md.spec.router is not None and {vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE} <= self.kinds

    @property
    def transfer_protocol(self) -> str:
        spec = self.md.spec.kv_transfer
        return STORE_PROTOCOL[spec.protocol if spec else "Auto"]

    def hold(self, role: Role) -> str | None:
        """Why no new replica of `role` may be created now (None: free to create): a managed role
        waits for an unusable KV cache attachment, every role for an unresolved ModelArtifact (which
        is said first). Running replicas keep serving either way."""
        if self.artifact is not None and not self.artifact.ready:
            return self.artifact.message
        if role.managed and self.attachment is not None and not self.attachment.usable:
            return self.attachment.hold_message
        return None


def build_context(md: ModelDeployment, world: World, options: RenderOptions) -> DeploymentContext:
    return DeploymentContext(
        md=md,
        world=world,
        options=options,
        attachment=resolve_attachment(md, world),
        artifact=resolve_artifact(md, world),
        kinds=frozenset(r.kind for r in md.spec.roles),
    )
