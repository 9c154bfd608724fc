"""ModelDeployment (worker.gpustack.ai/v1): the contract, as pydantic v2 models.

These models are the single source of truth for the CRD schema (`modeldeployment crds`), for the
renderer and for the admission webhooks. Field descriptions become `kubectl explain` text.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from app import vocab
from app.api.schema import KubeModel, Quantity, cel, frozen, frozen_presence, list_map

EngineName = Literal["vLLM", "SGLang"]
RoleKind = Literal["Server", "Prefill", "Decode"]
RouterName = Literal["llm-d-router", "vllm-router", "sglang-gateway"]
TransferProtocol = Literal["Auto", "TCP", "RDMA", "EFA", "CANN", "ROCM"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
PortProtocol = Literal["TCP", "UDP", "SCTP"]
HostPathType = Literal[
    "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"
]


# Bounds of a take-over command line: they keep the frozen-field rule's CEL cost within the API
# server's budget (an unbounded list of unbounded strings cannot be compared within it).
COMMAND_TOKENS_MAX = 256
COMMAND_TOKEN_MAX = 16384


class LocalObjectReference(KubeModel):
    name: str = Field(description="Name of the object in the deployment's namespace.")


class ModelSpec(KubeModel):
    name: str = Field(
        min_length=1,
        max_length=253,
        description="The model the engine serves (e.g. Qwen/Qwen2.5-72B-Instruct). Served, never "
        "provisioned: weights come from the engine's hub client, a role's volumes, or artifactRef. Frozen.",
    )
    artifact_ref: LocalObjectReference | None = Field(
        default=None,
        description="Optional ModelArtifact in this namespace whose resolved weights are served. "
        "Until it resolves, no Pod is created and WeightsReady is False.",
    )


class EngineSpec(KubeModel):
    name: EngineName = Field(description="Inference engine: vLLM or SGLang. Frozen.",
                             json_schema_extra=frozen("spec.engine.name"))
    version: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Engine version used to synthesize the runner image of roles that name no image "
        "(gpustack/runner:<backend><runtime>[-<variant>]-<engine><version>). Free-form: you guarantee "
        "that the combination was published. Required when any role has no image.",
    )


class PoolRef(KubeModel):
    name: str = Field(
        min_length=1,
        description="A KVCachePoolBinding in this namespace. An administrator creates it to grant "
        "the namespace a pool; a cluster pool name or an endpoint URL cannot be used here.",
    )


class KVCacheSpec(KubeModel):
    pool_ref: PoolRef = Field(description="The KVCachePoolBinding that attaches this deployment to a pool.")
    connector: Literal["Mooncake"] = Field(
        default="Mooncake", description="Cache connector. Mooncake is the only value; defaulted and immutable."
    )


class KVTransferSpec(KubeModel):
    protocol: TransferProtocol = Field(
        default="Auto",
        description="Transport of the direct prefill-to-decode transfer leg. Auto and TCP render tcp; "
        "RDMA rdma; EFA efa; CANN ascend; ROCM hip.",
    )


class RouterSpec(KubeModel):
    name: RouterName = Field(
        description="Router in front of the roles: llm-d-router (either engine), vllm-router (vLLM "
        "only), sglang-gateway (SGLang only). The name is frozen; the block may be added or removed.",
        json_schema_extra=frozen("spec.router.name", note="the router block itself may be removed, and another "
                                 "added by a later update"),
    )
    replicas: int = Field(default=1, ge=1, description="Router Pods.")
    image: str | None = Field(default=None, description="Router image; defaults to the operator setting.")
    extra_args: list[str] = Field(
        default_factory=list, description="Appended after the router arguments the operator renders."
    )
    request_timeout_seconds: int | None = Field(default=None, ge=1, description="Per-request timeout.")
    disaggregation_threshold_tokens: int | None = Field(
        default=None,
        ge=0,
        description="llm-d-router only: prompts shorter than this many tokens skip the prefill role.",
    )


class RoleResources(KubeModel):
    accelerator: Quantity | None = Field(
        default=None,
        description="Accelerator cards per Pod (whole cards). Defaulted to 1 by the mutating webhook on an "
        "acceleratable InstanceType; an explicit 0 is kept. A slice or partition requires 1. Frozen.",
        json_schema_extra=frozen("roles[].resources.accelerator", quantity=True, in_role=True),
    )
    accelerator_sliced_memory_percentage: int | None = Field(
        default=None, ge=0, le=100, description="Logical slice: percentage of one card's memory.",
        json_schema_extra=frozen("roles[].resources.acceleratorSlicedMemoryPercentage", in_role=True),
    )
    accelerator_sliced_cores_percentage: int | None = Field(
        default=None, ge=0, le=100, description="Logical slice: percentage of one card's cores.",
        json_schema_extra=frozen("roles[].resources.acceleratorSlicedCoresPercentage", in_role=True),
    )
    accelerator_partitioned_profile: str | None = Field(
        default=None, max_length=64, description="Physical partition profile (e.g. a MIG profile name).",
        json_schema_extra=frozen("roles[].resources.acceleratorPartitionedProfile", in_role=True),
    )
    interface: Quantity | None = Field(
        default=None,
        description="Whole number of fabric interfaces per engine Pod (RDMA or EFA, following the "
        "transport the role renders). Unset or zero adds no device request.",
        json_schema_extra=frozen("roles[].resources.interface", quantity=True, in_role=True),
    )


class TopologySpec(KubeModel):
    required_level: str | None = Field(
        default=None,
        max_length=316,
        description="A node label key naming a configured topology level (e.g. topology.kubernetes.io/zone). "
        "All size Pods of one replica must fit within one domain at that level. "
        "kubernetes.io/hostname is implicit and refused.",
    )


class RolePort(KubeModel):
    port: int = Field(ge=1, le=65535, description="Container port.")
    protocol: PortProtocol = Field(default="TCP", description="TCP, UDP or SCTP.")


class NamedSource(KubeModel):
    name: str = Field(min_length=1, description="Name of the object in this namespace.")


class HostPathSource(KubeModel):
    path: str = Field(min_length=1, description="Absolute path on the node.")
    type: HostPathType | None = Field(default=None, description="hostPath type.")


class AdditionalVolume(KubeModel):
    mount_path: str = Field(pattern=r"^/", description="Absolute path inside the engine container.")
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    sub_path: str | None = Field(default=None, description="Relative path inside the volume, no '..'.")
    config_map: NamedSource | None = Field(default=None, description="A ConfigMap in this namespace.")
    secret: NamedSource | None = Field(default=None, description="A Secret in this namespace.")
    host_path: HostPathSource | None = Field(default=None, description="A path on the node.")


class EnvEntry(KubeModel):
    name: str = Field(min_length=1, description="Variable name.")
    value: str | None = Field(default=None, description="Variable value.")


# The resources fields an update may not add or remove (their values: the fields' own rules).
FROZEN_RESOURCE_FIELDS = ("accelerator", "acceleratorSlicedMemoryPercentage", "acceleratorSlicedCoresPercentage",
                          "acceleratorPartitionedProfile", "interface")


class Role(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        frozen_presence("roles[].command", "command", in_role=True),
        *(frozen_presence(f"roles[].resources.{f}", f, parent="resources", in_role=True)
          for f in FROZEN_RESOURCE_FIELDS),
    ]})

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Role name (DNS-1123 label). Becomes the Kueue PodSet name. Frozen.",
    )
    kind: RoleKind = Field(default="Server", description="Server (default), Prefill or Decode. Frozen.",
                           json_schema_extra=frozen("roles[].kind", in_role=True))
    replicas: int = Field(
        default=1,
        ge=0,
        le=vocab.MAX_ROLE_REPLICAS,
        description="Independent serving instances. Changing it adds or removes instances; survivors "
        "are not restarted. 0 parks the role: no Pods and no Kueue Workloads, its Services stay "
        "(a prefill/decode pair parks and wakes as a pair).",
    )
    size: int = Field(
        default=1,
        ge=1,
        le=vocab.MAX_ROLE_SIZE,
        description="Pods per instance (fate-sharing: started, admitted and replaced together). Frozen.",
        json_schema_extra=frozen("roles[].size", in_role=True),
    )
    instance_type: str = Field(
        min_length=1, max_length=253, description="InstanceType the role's Pods run on. Frozen.",
        json_schema_extra=frozen("roles[].instanceType", in_role=True),
    )
    resources: RoleResources = Field(
        default_factory=RoleResources, description="Accelerator request of one Pod. Frozen."
    )
    topology: TopologySpec | None = Field(default=None, description="Topology-aware placement.")
    image: str | None = Field(default=None, description="Engine image; synthesized from the engine when unset.")
    image_pull_policy: PullPolicy | None = Field(default=None, description="Always, IfNotPresent or Never.")
    image_pull_secrets: Annotated[
        list[LocalObjectReference], Field(max_length=32, description="Secrets for pulling the image.")
    ] = Field(default_factory=list)
    privileged: bool | None = Field(default=None, description="Run the engine container privileged.")
    ports: Annotated[
        list[RolePort],
        Field(
            description="Container ports. The first is the serving port (default 8000).",
            json_schema_extra=list_map("port", "protocol"),
        ),
    ] = Field(default_factory=list)
    additional_volumes: list[AdditionalVolume] = Field(
        default_factory=list, description="ConfigMap, Secret or hostPath volumes mounted into the engine."
    )
    termination_grace_period_seconds: int | None = Field(
        default=None, ge=15, le=3600, description="Grace period (unset renders 30)."
    )
    command: Annotated[list[Annotated[str, Field(max_length=COMMAND_TOKEN_MAX)]], Field(max_length=COMMAND_TOKENS_MAX)] \
        | None = Field(
        default=None,
        description="Take-over argv: the whole command line (the image entrypoint does not participate). "
        f"The role then reports unmanaged: true and receives no cache or transfer configuration. At most "
        f"{COMMAND_TOKENS_MAX} tokens of {COMMAND_TOKEN_MAX} characters. Frozen.",
        json_schema_extra=frozen("roles[].command", in_role=True),
    )
    extra_args: list[str] = Field(
        default_factory=list, description="Appended after the operator's arguments (inert beside command)."
    )
    env: Annotated[
        list[EnvEntry],
        Field(description="Extra environment variables.", json_schema_extra=list_map("name")),
    ] = Field(default_factory=list)

    @property
    def managed(self) -> bool:
        """The operator builds the argv unless the role took the command line over."""
        return not self.command

    @property
    def kind_label(self) -> str:
        return self.kind.lower()


# A prefill/decode pair parks and wakes as a pair (docs/scale-to-zero.md#zero-replicas): either
# both roles declare 0 replicas or neither does. Admission rule 22 says the same with a field path.
PAIR_PARKS_TOGETHER_CEL = (
    "!(self.exists(r, has(r.kind) && r.kind == 'Prefill') && self.exists(r, has(r.kind) && r.kind == 'Decode')) || "
    "self.filter(r, has(r.kind) && r.kind in ['Prefill', 'Decode']).all(r, has(r.replicas) && r.replicas == 0) || "
    "self.filter(r, has(r.kind) && r.kind in ['Prefill', 'Decode']).all(r, !has(r.replicas) || r.replicas > 0)")
PAIR_PARKS_TOGETHER_MESSAGE = (
    "a prefill/decode pair parks and wakes as a pair: exactly one of the Prefill and Decode roles declares 0 "
    "replicas; set both to 0 to park the deployment, or both above 0 to serve")


class ModelDeploymentSpec(KubeModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        frozen_presence("spec.kvCache", "kvCache"),
    ]})

    model: ModelSpec = Field(description="What is served. Frozen.", json_schema_extra=frozen("spec.model"))
    engine: EngineSpec = Field(description="Inference engine.")
    kv_cache: KVCacheSpec | None = Field(
        default=None, description="Optional shared KV cache pool, through a KVCachePoolBinding. Frozen.",
        json_schema_extra=frozen("spec.kvCache"),
    )
    kv_transfer: KVTransferSpec | None = Field(
        default=None, description="Optional transport of the direct prefill/decode transfer."
    )
    router: RouterSpec | None = Field(default=None, description="Optional router in front of the roles.")
    roles: Annotated[
        list[Role],
        Field(
            min_length=1,
            max_length=vocab.MAX_ROLES,
            description="1 to 10 inference roles. The set of roles cannot be edited after creation.",
            json_schema_extra={**list_map("name"), "x-kubernetes-validations": [cel(
                PAIR_PARKS_TOGETHER_CEL, PAIR_PARKS_TOGETHER_MESSAGE, reason="FieldValueInvalid"), cel(
                "self.size() == oldSelf.size() && self.all(r, oldSelf.exists(o, o.name == r.name))",
                "the set of roles (their names) is frozen: a role added, removed or renamed describes a different "
                "deployment, which is created rather than edited: create another ModelDeployment that declares it",
                reason="FieldValueForbidden")]},
        ),
    ]


class ObjectMeta(KubeModel):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)


class ModelDeployment(KubeModel):
    api_version: str = vocab.API_VERSION
    kind: str = vocab.KIND_MODEL_DEPLOYMENT
    metadata: ObjectMeta
    spec: ModelDeploymentSpec
    status: dict[str, Any] | None = None

    def role(self, name: str) -> Role | None:
        return next((r for r in self.spec.roles if r.name == name), None)


# --- Status (rebuilt from observed state on every sync) --------------------------------------


class Condition(KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ReplicaStageStatus(KubeModel):
    """A replica that is not Ready: where it is and why, from the source that knows
    (docs/status.md#replica-stages)."""

    ordinal: int = Field(ge=0, description="The replica's ordinal in its role.")
    stage: Literal["Queued", "Admitting", "Scheduling", "Pulling", "Starting", "Failing", "Leaving"] = Field(
        description="Queued, Admitting, Scheduling, Pulling, Starting, Failing or Leaving.")
    reason: str = Field(max_length=128, description="A machine-readable reason within the stage.")
    message: str = Field(max_length=32768, description="What the source that knows says (Kueue, the scheduler, "
                         "the kubelet), naming the Pod or Workload.")
    since: str = Field(description="When the replica entered this stage (moves only when the stage does).")
    started_at: str | None = Field(default=None, description="Starting under a startup probe: when the container "
                                   "started.")
    startup_budget_seconds: int | None = Field(default=None, ge=0, description="Starting under a startup probe: "
                                               "how long the probe lets it start.")


class RoleStatus(KubeModel):
    name: str
    kind: RoleKind
    desired: int = Field(description="Declared replicas.")
    ready: int = Field(description="Replicas whose every Pod is Ready.")
    quota_reserved: int = Field(description="Replicas whose Kueue Workload holds quota.")
    admitted: int | None = Field(default=None, description="Replicas whose Kueue Workload is admitted (holds quota "
                                 "and passed every admission check, so its Pods may run).")
    unmanaged: bool = Field(description="The role took over the command line.")
    image: str | None = Field(default=None, description="The engine image rendered.")
    kv_events_endpoints: list[str] | None = Field(
        default=None, description="Dialable KV-event publisher and replay endpoints (routed vLLM producers)."
    )
    kv_events_topic: str | None = None
    next_incarnations: list[int] | None = Field(
        default=None, max_length=1024,
        description="Per replica ordinal, the incarnation its next new instance gets (a size-1 Pod is "
        "named after it, so a replacement never reuses a departed Pod's name). Written by the operator.",
    )
    not_ready: list[ReplicaStageStatus] | None = Field(
        default=None, max_length=vocab.MAX_LISTED_NOT_READY,
        description="The replicas that are not Ready (each with its stage, reason, message and since when), "
        "the first by ordinal; notReadyUnlisted counts the rest.",
    )
    not_ready_unlisted: int | None = Field(default=None, ge=0,
                                           description="Not-Ready replicas beyond those listed in notReady.")


class KVCacheDomain(KubeModel):
    name: str
    block_size: int | None = None
    dtype: str | None = None


class KVCacheStatus(KubeModel):
    binding: str
    pool: str | None = None
    domain: KVCacheDomain | None = None


class RouterStatus(KubeModel):
    name: str
    desired: int
    ready: int
    endpoint: str


class JointAdmissionStatus(KubeModel):
    """Present while a deployment of two or more roles holds part of its pool (some of its groups
    hold quota, not all), or has just released it: what another deployment's deadlock release reads
    to decide which of the sets holding part of a pool yields first (docs/kueue.md#deadlock-release)."""

    holding_since: str | None = Field(default=None, description="When the oldest quota reservation still waiting "
                                      "for the rest began (absent once the deployment released them).")
    released_at: str | None = Field(default=None, description="When the deployment released its partial "
                                    "reservation, while it waits one bound before it queues again.")
    have: int = Field(ge=0, description="Replicas holding quota (reserved or admitted).")
    want: int = Field(ge=1, description="Replicas the deployment declares.")
    cluster_queues: list[str] = Field(default_factory=list, max_length=64,
                                      description="The ClusterQueues its reservations are in.")
    local_queues: list[str] = Field(default_factory=list, max_length=64,
                                    description="The LocalQueues (namespace/name) its replicas queue in.")


class NewestRenderStatus(KubeModel):
    """The newest render revision answering the deployment's passes (docs/operations.md#upgrading-the-operator)."""

    revision: int = Field(ge=0, description="The render revision of the newest operator that answered a pass.")
    renewed_at: str = Field(description="When that operator last renewed this record: an older operator "
                            "creates and turns over no replica while the record is fresh.")


class ModelDeploymentStatus(KubeModel):
    observed_generation: int | None = Field(default=None, description="Set by Metacontroller.")
    phase: Literal["Starting", "Ready", "Degraded", "Idle", "Deleting"] | None = Field(
        default=None, description="Starting, Ready, Degraded, Idle (every role at 0 replicas: parked) or Deleting."
    )
    phase_message: str | None = None
    endpoint: str | None = Field(default=None, description="In-cluster URL callers use.")
    endpoint_route: str | None = Field(default=None, description="Activator while the endpoint routes to the "
                                       "activator (parked or waking), Releasing for one pass on the way back; absent "
                                       "while it routes to the serving Pods.")
    role_summary: str | None = Field(default=None, description="Ready instances per kind, e.g. 1R3P4D.")
    roles: list[RoleStatus] = Field(default_factory=list)
    kv_cache: KVCacheStatus | None = None
    router: RouterStatus | None = None
    joint_admission: JointAdmissionStatus | None = Field(
        default=None, description="While part of the deployment's replicas hold quota and the rest wait (joint "
        "admission), or it has just released them: since when, how many, in which queues.")
    newest_render: NewestRenderStatus | None = Field(
        default=None, description="The newest operator version answering this deployment's passes, during an "
        "upgrade of the operator: an older one defers new replicas to it. Written by the operator.")
    conditions: Annotated[list[Condition], Field(json_schema_extra=list_map("type"))] = Field(
        default_factory=list
    )
