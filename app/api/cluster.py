"""The supporting resources the operator reads (docs/cluster-objects.md), as pydantic views.

Only the fields we read are modelled; the CRDs preserve unknown fields so that the administrators'
controllers can carry more.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app import vocab
from app.api.schema import KubeModel, Quantity, ReadQuantity
from app.api.v1 import ObjectMeta

PoolPhase = Literal["Provisioning", "Ready", "Degraded", "Error", "Deleting"]
BackendProtocol = Literal["Auto", "TCP", "RDMA", "EFA", "CANN", "ROCM", "MUSA", "MACA"]


# --- InstanceType ----------------------------------------------------------------------------


class UnitResources(KubeModel):
    cpu: ReadQuantity | None = Field(default=None,
                                     description="CPU per unit (per card, or the whole Pod on a CPU-only type).")
    ram: ReadQuantity | None = Field(default=None, description="Memory per unit.")


class InstanceTypeSpec(KubeModel):
    display_name: str | None = Field(default=None, description="Human-readable name.")
    acceleratable: bool = Field(default=False, description="Whether Pods of this type request accelerators.")
    accelerator_group: str | None = Field(default=None, description="Accelerator group (e.g. nvidia-a10g).")
    general_group: str | None = Field(default=None, description="General-purpose group.")
    os: str | None = None
    arch: str | None = None
    unit_resources: UnitResources = Field(default_factory=UnitResources, description="Host resources per unit.")
    local_storage: ReadQuantity | None = Field(default=None, description="Ephemeral storage cap per Pod.")
    accelerator_resource: str | None = Field(
        default=None, description="Extended resource key of one whole card (e.g. nvidia.com/gpu)."
    )


class PartitionProfile(KubeModel):
    name: str
    count: int = 0
    memory_mib: int | None = None


class LogicalSlices(KubeModel):
    count: int = 0


class PhysicalPartitions(KubeModel):
    count: int = 0
    profiles: list[PartitionProfile] = Field(default_factory=list)


class SlicedDetail(KubeModel):
    logical: LogicalSlices = Field(default_factory=LogicalSlices)
    physical: PhysicalPartitions = Field(default_factory=PhysicalPartitions)


class HardwareDetail(KubeModel):
    manufacturer: str | None = None
    product: str | None = None
    family: str | None = None
    memory: Quantity | None = Field(default=None, description="Memory of one card.")
    runtime_version: str | None = Field(default=None, description="The lowest runtime version, major.minor.")
    runtime_versions: list[str] = Field(default_factory=list, description="Every runtime version, ascending.")
    sliced_detail: SlicedDetail = Field(default_factory=SlicedDetail)


class AcceleratorCapacity(KubeModel):
    capacity: int = 0
    remaining: int | None = None
    once_max_request: int | None = None


class InstanceTypeStatus(KubeModel):
    entrance: str | None = Field(default=None, description="LocalQueue name Pods carry as kueue.x-k8s.io/queue-name.")
    phase: Literal["Active", "Activating", "Inactive", "Draining"] | None = None
    detail: HardwareDetail = Field(default_factory=HardwareDetail)
    accelerator: AcceleratorCapacity = Field(default_factory=AcceleratorCapacity)


class InstanceType(KubeModel):
    metadata: ObjectMeta
    spec: InstanceTypeSpec = Field(default_factory=InstanceTypeSpec)
    status: InstanceTypeStatus = Field(default_factory=InstanceTypeStatus)

    @property
    def observed(self) -> bool:
        """Hardware detail is observed once the manufacturer is known."""
        return bool(self.status.detail.manufacturer)

    @property
    def offers_slices(self) -> bool:
        return self.status.detail.sliced_detail.logical.count > 0

    @property
    def offers_partitions(self) -> bool:
        return self.status.detail.sliced_detail.physical.count > 0

    @property
    def partition_profiles(self) -> list[str]:
        return [p.name for p in self.status.detail.sliced_detail.physical.profiles]


# --- KV cache --------------------------------------------------------------------------------


class Transport(KubeModel):
    protocol: BackendProtocol = Field(default="Auto", description="Transfer protocol.")


class BackendMember(KubeModel):
    name: str = Field(description="Member group name.")
    transport: Transport | None = Field(default=None, description="Overrides the backend's transport.")


class KVCacheBackendSpec(KubeModel):
    transport: Transport = Field(default_factory=Transport, description="Default transport of every group.")
    members: list[BackendMember] = Field(default_factory=list, description="Member groups.")


class KVCacheBackend(KubeModel):
    metadata: ObjectMeta
    spec: KVCacheBackendSpec = Field(default_factory=KVCacheBackendSpec)


class BackendRef(KubeModel):
    name: str


class PoolQuota(KubeModel):
    total: Quantity | None = None


class KVCachePoolSpec(KubeModel):
    backends: list[BackendRef] = Field(default_factory=list, description="Exactly one KVCacheBackend.")
    quota: PoolQuota = Field(default_factory=PoolQuota)


class KVCachePoolStatus(KubeModel):
    phase: PoolPhase | None = None
    client_endpoint: str | None = Field(default=None, description="Mooncake master address host:port.")


class KVCachePool(KubeModel):
    metadata: ObjectMeta
    spec: KVCachePoolSpec = Field(default_factory=KVCachePoolSpec)
    status: KVCachePoolStatus = Field(default_factory=KVCachePoolStatus)

    @property
    def backend_name(self) -> str | None:
        return self.spec.backends[0].name if self.spec.backends else None


class ReuseDomain(KubeModel):
    name: str = Field(default="default", description="Reuse domain (tenant) name.")
    block_size: int | None = Field(default=None, description="KV block size in tokens.")
    dtype: str | None = Field(default=None, description="KV cache dtype the engines render.")


class PoolRefName(KubeModel):
    name: str


class KVCachePoolBindingSpec(KubeModel):
    pool_ref: PoolRefName
    domain: ReuseDomain = Field(default_factory=ReuseDomain)
    quota_ceiling: Quantity | None = None


class KVCachePoolBindingStatus(KubeModel):
    phase: PoolPhase | None = None


class KVCachePoolBinding(KubeModel):
    metadata: ObjectMeta
    spec: KVCachePoolBindingSpec
    status: KVCachePoolBindingStatus = Field(default_factory=KVCachePoolBindingStatus)


# --- ModelArtifact ---------------------------------------------------------------------------


class HuggingFaceSource(KubeModel):
    repository: str
    revision: str | None = None


class PVCSource(KubeModel):
    claim_name: str
    path: str | None = None


class ArtifactSource(KubeModel):
    hugging_face: HuggingFaceSource | None = None
    persistent_volume_claim: PVCSource | None = None


class ModelArtifactSpec(KubeModel):
    source: ArtifactSource = Field(default_factory=ArtifactSource)


class ArtifactCondition(KubeModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class ResolvedArtifact(KubeModel):
    revision: str | None = None


class ModelArtifactStatus(KubeModel):
    conditions: list[ArtifactCondition] = Field(default_factory=list)
    resolved: ResolvedArtifact | None = None


class ModelArtifact(KubeModel):
    metadata: ObjectMeta
    spec: ModelArtifactSpec = Field(default_factory=ModelArtifactSpec)
    status: ModelArtifactStatus = Field(default_factory=ModelArtifactStatus)

    @property
    def resolved(self) -> bool:
        return any(c.type == vocab.ARTIFACT_COND_RESOLVED and c.status == vocab.CONDITION_TRUE
                   for c in self.status.conditions)
