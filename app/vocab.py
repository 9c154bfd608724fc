"""The operator's vocabulary: every API name, label, annotation, env name, condition and reason.

One module so that a reader grepping for `member-index` or `QuotaReserved` finds exactly one
definition. Nothing here computes anything.
"""

from __future__ import annotations

# --- API groups and kinds -------------------------------------------------------------------

GROUP = "worker.gpustack.ai"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

KIND_MODEL_DEPLOYMENT = "ModelDeployment"
KIND_INSTANCE_TYPE = "InstanceType"
KIND_KV_CACHE_POOL = "KVCachePool"
KIND_KV_CACHE_POOL_BINDING = "KVCachePoolBinding"
KIND_KV_CACHE_BACKEND = "KVCacheBackend"
KIND_MODEL_ARTIFACT = "ModelArtifact"

PLURAL_MODEL_DEPLOYMENTS = "modeldeployments"
PLURAL_INSTANCE_TYPES = "instancetypes"
PLURAL_KV_CACHE_POOLS = "kvcachepools"
PLURAL_KV_CACHE_POOL_BINDINGS = "kvcachepoolbindings"
PLURAL_KV_CACHE_BACKENDS = "kvcachebackends"
PLURAL_MODEL_ARTIFACTS = "modelartifacts"

CATEGORY = "gpustack"

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KIND_WORKLOAD = "Workload"
PLURAL_WORKLOADS = "workloads"
PLURAL_PODS = "pods"
KIND_ADMISSION_CHECK = "AdmissionCheck"
PLURAL_ADMISSION_CHECKS = "admissionchecks"

# Core kinds the operator names outside a rendered manifest (an Event it records, the Pods that own
# a Workload).
CORE_API_VERSION = "v1"
KIND_POD = "Pod"
KIND_EVENT = "Event"
KIND_DELETE_OPTIONS = "DeleteOptions"

# Metacontroller children/related map keys (hook protocol v2).
CHILD_PODS = "Pod.v1"
CHILD_SERVICES = "Service.v1"
CHILD_DEPLOYMENTS = "Deployment.apps/v1"
# The endpoint switch's slice while a deployment is parked or waking (docs/scale-to-zero.md#the-endpoint-switch).
CHILD_ENDPOINT_SLICES = "EndpointSlice.discovery.k8s.io/v1"
CHILD_CONFIGMAPS = "ConfigMap.v1"
CHILD_SERVICE_ACCOUNTS = "ServiceAccount.v1"
CHILD_ROLES = "Role.rbac.authorization.k8s.io/v1"
CHILD_ROLE_BINDINGS = "RoleBinding.rbac.authorization.k8s.io/v1"
RELATED_WORKLOADS = f"{KIND_WORKLOAD}.{KUEUE_API_VERSION}"
# The deployment's router Pods (owned by the router's ReplicaSet, so not children): a teardown waits
# for them (docs/metacontroller.md#finalize).
RELATED_PODS = "Pod.v1"

# --- Engines, role kinds ---------------------------------------------------------------------

ENGINE_VLLM = "vLLM"
ENGINE_SGLANG = "SGLang"
ENGINES = (ENGINE_VLLM, ENGINE_SGLANG)

ROLE_KIND_SERVER = "Server"
ROLE_KIND_PREFILL = "Prefill"
ROLE_KIND_DECODE = "Decode"
ROLE_KINDS = (ROLE_KIND_SERVER, ROLE_KIND_PREFILL, ROLE_KIND_DECODE)
# Letters used by status.roleSummary ("1R3P4D").
ROLE_KIND_LETTER = {ROLE_KIND_SERVER: "S", ROLE_KIND_PREFILL: "P", ROLE_KIND_DECODE: "D"}
ROUTER_LETTER = "R"

ROUTER_LLMD = "llm-d-router"
ROUTER_VLLM = "vllm-router"
ROUTER_SGLANG = "sglang-gateway"

# The kvTransfer protocols a vLLM role on an Ascend pool may ask for (its leg runs `ascend`).
ASCEND_TRANSFER_PROTOCOLS = ("Auto", "CANN")
# InstanceType status.detail.manufacturer of an Ascend pool (vLLM names its own connectors there).
MANUFACTURER_ASCEND = "ascend"

# --- Labels ----------------------------------------------------------------------------------

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
APP_NAME = "model-deployment"
MANAGED_BY = "gpustack-model-deployment"

LABEL_POD_ORDINAL = "modeldeployment.gpustack.ai/pod-ordinal"
LABEL_MEMBER_INDEX = "modeldeployment.gpustack.ai/member-index"
LABEL_ROLE_KIND = "modeldeployment.gpustack.ai/role-kind"
# The render revision a replica's Pods were created under (app.render.revision): an operator never
# turns over a replica a newer revision made (docs/operations.md#upgrading-the-operator).
# Outside the fingerprint: it says who rendered the Pod, not what the Pod runs.
LABEL_RENDER_REVISION = "modeldeployment.gpustack.ai/render-revision"
# Router objects carry this in place of a role name as their component.
ROUTER_COMPONENT = "router"

LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
LABEL_KUEUE_MANAGED = "kueue.x-k8s.io/managed"
# Kueue's Pod webhook adds a finalizer of the same name; Kueue strips it when the group's Workload
# is deleted (or to release a Pod that can no longer run).
FINALIZER_KUEUE_MANAGED = LABEL_KUEUE_MANAGED
# Metacontroller's finalizer on a ModelDeployment (it names it after the CompositeController,
# `modeldeployment`). The mutating webhook puts it on at CREATE: a deployment is born with it, so a
# delete can never skip the finalize hook (docs/metacontroller.md#finalize).
FINALIZER_METACONTROLLER = "metacontroller.io/compositecontroller-modeldeployment"

LABEL_HOSTNAME = "kubernetes.io/hostname"
# llm-d's Endpoint Picker reads the engine type of a routed Pod from this label.
LABEL_LLMD_ENGINE_TYPE = "llm-d.ai/engine-type"

# --- Annotations -----------------------------------------------------------------------------

ANNOTATION_KUEUE_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ANNOTATION_KUEUE_ROLE_HASH = "kueue.x-k8s.io/role-hash"
ANNOTATION_KUEUE_GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
ANNOTATION_KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
# Never set by this operator (docs/kueue.md#one-group-per-replica).
ANNOTATION_KUEUE_FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"

ANNOTATION_FINGERPRINT = "modeldeployment.gpustack.ai/fingerprint"
# The incarnation of a replica's instance (absent for the first): every new instance of an ordinal
# gets the next number, and a size-1 Pod a name no earlier Pod of it had. Outside the fingerprint:
# it identifies an instance, it does not describe its render.
ANNOTATION_INCARNATION = "modeldeployment.gpustack.ai/incarnation"
# The deployment's metadata.generation a replica's Pods were rendered from: a replica a newer render
# revision made is kept only while the spec it was rendered from is still the spec
# (docs/operations.md#upgrading-the-operator). Outside the fingerprint, like the incarnation.
ANNOTATION_SPEC_GENERATION = "modeldeployment.gpustack.ai/spec-generation"
# Only with the upgrade-rehearsal setting (SETTING_RENDER_REHEARSAL): its value, inside the
# fingerprint, so a rehearsal operator renders every Pod differently.
ANNOTATION_RENDER_REHEARSAL = "modeldeployment.gpustack.ai/render-rehearsal"
ANNOTATION_KVCACHE_CLIENT_CONFIG = "kvcache.gpustack.ai/client-config"
# On the router's Pod template: a digest of its config documents, so a changed document rolls the Pods.
ANNOTATION_ROUTER_CONFIG_HASH = "modeldeployment.gpustack.ai/router-config-hash"
# sglang-gateway reads a prefill Pod's bootstrap port from this annotation.
ANNOTATION_SGLANG_BOOTSTRAP_PORT = "sglang.ai/bootstrap-port"
# Metacontroller's record of what it applied, on every child it manages.
ANNOTATION_LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"

KUEUE_SCHEDULING_GATE = "kueue.x-k8s.io/admission"
# Kueue's topology-aware scheduling holds an admitted Pod with this gate until its TopologyUngater
# has written the Pod's placement (node selector) and removed it.
KUEUE_TOPOLOGY_GATE = "kueue.x-k8s.io/topology"

# --- Environment variables rendered into engine containers ------------------------------------

ENV_LEADER_ADDRESS = "GPUSTACK_REPLICA_LEADER_ADDRESS"
ENV_REPLICA_SIZE = "GPUSTACK_REPLICA_SIZE"
ENV_MEMBER_INDEX = "GPUSTACK_MEMBER_INDEX"
REPLICA_ENV = (ENV_LEADER_ADDRESS, ENV_REPLICA_SIZE, ENV_MEMBER_INDEX)

ENV_MOONCAKE_CONFIG_PATH = "MOONCAKE_CONFIG_PATH"
ENV_VLLM_MOONCAKE_BOOTSTRAP_PORT = "VLLM_MOONCAKE_BOOTSTRAP_PORT"
ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
ENV_MOONCAKE_MASTER = "MOONCAKE_MASTER"
ENV_MOONCAKE_TE_META_DATA_SERVER = "MOONCAKE_TE_META_DATA_SERVER"
ENV_MOONCAKE_PROTOCOL = "MOONCAKE_PROTOCOL"
ENV_MOONCAKE_DEVICE = "MOONCAKE_DEVICE"
ENV_MOONCAKE_GLOBAL_SEGMENT_SIZE = "MOONCAKE_GLOBAL_SEGMENT_SIZE"
ENV_MOONCAKE_LOCAL_HOSTNAME = "MOONCAKE_LOCAL_HOSTNAME"
ENV_MOONCAKE_TENANT_ID = "MOONCAKE_TENANT_ID"
ENV_MC_TE_METRIC = "MC_TE_METRIC"
ENV_MC_STORE_CLIENT_METRIC_BANDWIDTH = "MC_STORE_CLIENT_METRIC_BANDWIDTH"
ENV_MC_FORCE_TCP = "MC_FORCE_TCP"
ENV_VLLM_API_KEY = "VLLM_API_KEY"
ENV_VLLM_DP_SIZE = "VLLM_DP_SIZE"

# --- Paths and ports -------------------------------------------------------------------------

KVCACHE_CONFIG_DIR = "/etc/gpustack/kvcache"
KVCACHE_CONFIG_FILE = "mooncake.json"
KVCACHE_CONFIG_PATH = f"{KVCACHE_CONFIG_DIR}/{KVCACHE_CONFIG_FILE}"
KVCACHE_VOLUME = "kvcache-client-config"
MODEL_VOLUME = "model"
MODEL_MOUNT_PATH = "/var/lib/gpustack/model"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
SHM_SIZE_LIMIT = "16Gi"
ROUTER_CONFIG_VOLUME = "config"
ROUTER_CONFIG_DIR = "/etc/gpustack/router"

DEFAULT_SERVING_PORT = 8000
KV_EVENTS_PORT = 5557
KV_EVENTS_REPLAY_PORT = 5558
PREFILL_BOOTSTRAP_PORT = 8998
PORT_NAME_HTTP = "http"
PORT_NAME_METRICS = "metrics"
ROUTER_PORT = DEFAULT_SERVING_PORT  # the router's listener and its Service
HEALTH_PATH = "/health"
# The routing proxy in front of a routed vLLM decoder answers /health itself; readiness goes
# through it to the engine.
PROXIED_READINESS_PATH = "/v1/models"
# The decoder engine's port behind the routing proxy (the sidecar's own default).
ROUTING_PROXY_ENGINE_PORT = 8200
CONTAINER_ENGINE = "engine"
CONTAINER_ROUTING_PROXY = "routing-proxy"

# Extended resources a role's fabric interfaces are requested as, and the scratch space every engine
# container requests.
RESOURCE_RDMA_SHARED = "device.gpustack.ai/rdma.shared"
RESOURCE_RDMA_DEDICATED = "device.gpustack.ai/rdma"
RESOURCE_EFA = "vpc.amazonaws.com/efa"
EPHEMERAL_STORAGE_BYTES = 15 * 2**30
DEFAULT_TERMINATION_GRACE_SECONDS = 30
# The engine container's preStop pause (a kubelet sleep action: no binary in the image): a
# terminating replica keeps serving while its Services drop it (docs/rendering.md#ports-and-probes).
# Below every grace period a role may set (the CRD's minimum is 15 s).
ENGINE_PRE_STOP_SECONDS = 5
STARTUP_PERIOD_SECONDS = 10
# Loading a large model can take long; one hour before the kubelet gives up on startup.
STARTUP_FAILURE_THRESHOLD = 360
KV_LEASE_WINDOW_SECONDS = 30

# --- Kueue admission check -------------------------------------------------------------------

ADMISSION_CHECK_NAME = "gpustack-model-deployment-joint"
ADMISSION_CHECK_CONTROLLER = "worker.gpustack.ai/model-deployment-joint"
# The states our check sets on a Workload (Kueue's AdmissionCheckState).
CHECK_STATE_PENDING = "Pending"
CHECK_STATE_READY = "Ready"
CHECK_STATE_RETRY = "Retry"
# The AdmissionCheck object's own condition: without Active=True Kueue deactivates every ClusterQueue
# that lists the check.
ADMISSION_CHECK_COND_ACTIVE = "Active"
ADMISSION_CHECK_REASON_ACTIVE = "Active"

# --- What Kueue and the kubelet write, read back by the operator ------------------------------

# Workload conditions.
KUEUE_COND_QUOTA_RESERVED = "QuotaReserved"
KUEUE_COND_ADMITTED = "Admitted"
KUEUE_COND_EVICTED = "Evicted"
KUEUE_COND_PREEMPTED = "Preempted"
# The Evicted reason when an admission check asked for a retry (our deadlock release): the group
# never ran, Kueue only requeues it.
KUEUE_EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"
# Kueue resets every check to Pending when it evicts a Workload, saying what the check was.
KUEUE_CHECK_RESET_AFTER_EVICTION = "Reset to Pending after eviction. Previously: Ready"
# A Workload deactivated (spec.active false) is evicted with this reason; one that never ran is only
# requeued when it is active again (docs/kueue.md#deadlock-release).
KUEUE_EVICTED_DEACTIVATED = "Deactivated"
# Our mark on a Workload the deadlock release deactivated: when (RFC 3339). Only a Workload carrying
# it is reactivated, one back-off after that time (docs/kueue.md#deadlock-release).
ANNOTATION_GANG_RELEASED_AT = "modeldeployment.gpustack.ai/released-at"
# Kueue marks every Pod it stops with this condition; the reason says why
# ("WorkloadEvictedDueTo<Evicted reason>" when the group was evicted, "WorkloadDeleted"...).
KUEUE_POD_TERMINATION_TARGET = "TerminationTarget"
KUEUE_STOP_REASON_EVICTED = "WorkloadEvicted"

# A condition's status, as every Kubernetes API spells it.
CONDITION_TRUE = "True"
# Pods: the kubelet's Ready condition and the phases of a Pod that will not run again.
POD_COND_READY = "Ready"
POD_PHASE_FAILED = "Failed"
POD_PHASE_SUCCEEDED = "Succeeded"
# ModelArtifact: the condition its controller sets once the source is resolved.
ARTIFACT_COND_RESOLVED = "Resolved"
# KVCachePool / KVCachePoolBinding phases the attachment reads.
POOL_PHASE_READY = "Ready"
POOL_PHASE_DEGRADED = "Degraded"
POOL_PHASE_DELETING = "Deleting"

# --- Status conditions and reasons ------------------------------------------------------------

PHASE_STARTING = "Starting"
PHASE_READY = "Ready"
PHASE_DEGRADED = "Degraded"
PHASE_DELETING = "Deleting"

COND_DOMAIN_REGISTERED = "DomainRegistered"
COND_QUOTA_RESERVED = "QuotaReserved"
COND_CACHE_ATTACHED = "CacheAttached"
COND_REPLICAS_UP_TO_DATE = "ReplicasUpToDate"
COND_ROLE_KINDS_READY = "RoleKindsReady"
COND_KV_EVENTS_PUBLISHING = "KVEventsPublishing"
COND_ROUTER_READY = "RouterReady"
COND_WEIGHTS_READY = "WeightsReady"

REASON_NOT_APPLICABLE = "NotApplicable"
# DomainRegistered
REASON_REGISTERED = "Registered"
REASON_BINDING_NOT_FOUND = "BindingNotFound"
REASON_BINDING_NOT_READY = "BindingNotReady"
REASON_BINDING_DELETING = "BindingDeleting"
# QuotaReserved
REASON_RESERVED = "Reserved"
REASON_PENDING = "Pending"
REASON_POD_GROUP_INCOMPLETE = "PodGroupIncomplete"
REASON_PREEMPTED_IN_PART = "PreemptedInPart"
REASON_ADMISSION_IN_FLIGHT = "AdmissionInFlight"
REASON_NO_REPLICAS = "NoReplicas"
# CacheAttached
REASON_CACHE_ACTIVE = "CacheActive"
REASON_UNMANAGED = "Unmanaged"
REASON_NO_REPLICA_READY = "NoReplicaReady"
# ReplicasUpToDate
REASON_UP_TO_DATE = "UpToDate"
REASON_ROLLOUT_IN_PROGRESS = "RolloutInProgress"
REASON_REPLACEMENT_IN_PROGRESS = "ReplacementInProgress"
# RoleKindsReady
REASON_ALL_KINDS_READY = "AllKindsReady"
REASON_KINDS_NOT_READY = "KindsNotReady"
REASON_NO_ROLE_STATUSES = "NoRoleStatuses"
# KVEventsPublishing
REASON_PUBLISHING = "Publishing"
REASON_PUBLISHER_DISABLED = "PublisherDisabled"
REASON_NO_ROUTER = "NoRouter"
REASON_ROLE_UNMANAGED = "RoleUnmanaged"
# RouterReady
REASON_ROUTER_READY = "Ready"
REASON_NO_READY_REPLICAS = "NoReadyReplicas"
REASON_NOT_DEPLOYED = "NotDeployed"
# WeightsReady
REASON_RESOLVED = "Resolved"
REASON_ARTIFACT_NOT_FOUND = "ArtifactNotFound"
REASON_ARTIFACT_NOT_RESOLVED = "ArtifactNotResolved"

# --- Replica stages, then our reasons by stage: status.roles[].notReady[] (docs/status.md#replica-stages) ---
STAGE_QUEUED, STAGE_ADMITTING, STAGE_SCHEDULING, STAGE_PULLING = "Queued", "Admitting", "Scheduling", "Pulling"
STAGE_STARTING, STAGE_FAILING, STAGE_LEAVING = "Starting", "Failing", "Leaving"
STAGE_REASON_HELD, STAGE_REASON_CREATING, STAGE_REASON_POD_GROUP_INCOMPLETE = "Held", "Creating", "PodGroupIncomplete"
STAGE_REASON_NO_WORKLOAD, STAGE_REASON_QUOTA_PENDING, STAGE_REASON_EVICTED = "NoWorkload", "QuotaPending", "Evicted"
STAGE_REASON_ADMISSION_CHECK, STAGE_REASON_ADMISSION_GATED = "AdmissionCheckPending", "AdmissionGated"
STAGE_REASON_TOPOLOGY_GATED, STAGE_REASON_UNSCHEDULABLE = "TopologyGated", "Unschedulable"
STAGE_REASON_NOT_SCHEDULED, STAGE_REASON_CONTAINER_CREATING = "NotScheduled", "ContainerCreating"
STAGE_REASON_STARTUP_PROBE, STAGE_REASON_READINESS_PROBE = "StartupProbe", "ReadinessProbe"
STAGE_REASON_POD_NOT_READY, STAGE_REASON_SCALE_DOWN, STAGE_REASON_ROLLOUT = "PodNotReady", "ScaleDown", "Rollout"
STAGE_REASON_SUPERSEDED, STAGE_REASON_DEPARTED = "Superseded", "Departed"
# The kubelet's waiting reasons by the stage they mean, and the Pod's scheduling condition.
KUBELET_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                        "ImageInspectError", "RegistryUnavailable", "SignatureValidationFailed")
KUBELET_CREATING_REASONS, POD_COND_SCHEDULED = ("ContainerCreating", "PodInitializing"), "PodScheduled"
KUBELET_FAILING_REASONS = ("CrashLoopBackOff", "CreateContainerError", "CreateContainerConfigError",
                           "RunContainerError", "PreCreateHookError", "PostStartHookError", "PreStartHookError")
MAX_LISTED_NOT_READY, DEFAULT_REPLICA_STUCK_SECONDS = 8, 600.0  # listed per role; a stage this long is stuck

# --- Events ----------------------------------------------------------------------------------

EVENT_RUNTIME_VERSION_SKEW = "RuntimeVersionSkew"
EVENT_RENDER_FAILED = "RenderFailed"
EVENT_REPLICA_EVICTED = "ReplicaEvicted"
EVENT_REPLICA_LEAVING = "ReplicaLeaving"
EVENT_REPLICA_RESTARTED = "ReplicaRestarted"
EVENT_TYPE_NORMAL = "Normal"
EVENT_TYPE_WARNING = "Warning"
EVENT_SOURCE_COMPONENT = "gpustack-model-deployment"
# A stored object carried a user value for a tenant-bearing key; the operator's value was rendered.
EVENT_TENANT_KEY_IGNORED = "TenantKeyIgnored"
# Kueue admitted a replica and has not released its Pods' topology gate long after
# (docs/kueue.md#an-admitted-replica-kueue-never-places); named after the Workload's UID.
EVENT_REPLICA_UNGATE_STALLED = "ReplicaUngateStalled"
EVENT_NAME_UNGATE_STALL = "ungate-stall"
# Departure events are named after the occurrence, not the reason: whichever pass names it first
# (ReplicaEvicted, ReplicaLeaving or ReplicaRestarted), a later pass that reads the same departure
# differently (the Workload already gone, the role scaled down meanwhile) repeats the same name,
# and the Event is created once.
EVENT_NAME_REPLICA_DEPARTURE = "replica-departure"
# A replica stayed in one non-Ready stage past the threshold (docs/status.md#events), once per stage.
EVENT_REPLICA_STUCK, EVENT_NAME_REPLICA_STUCK = "ReplicaStuck", "replica-stuck"

# How long an older operator defers to a newer render revision's status.newestRender record after
# that version's last renewal (docs/operations.md#upgrading-the-operator): three resync periods, so
# a newer replica that got no pass for two of them does not lose the rollout to the older one.
NEWEST_RENDER_LEASE_SECONDS = 180

# --- Operator settings (environment of the service) -------------------------------------------

SETTING_KV_CACHE_DTYPE_OWNED = "GPUSTACK_MODEL_DEPLOYMENT_KV_CACHE_DTYPE_OWNED"
SETTING_ROUTER_IMAGE = "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_IMAGE"
SETTING_ROUTING_SIDECAR_IMAGE = "GPUSTACK_MODEL_DEPLOYMENT_ROUTING_SIDECAR_IMAGE"
# Rehearse an operator upgrade with one build (docs/operations.md#rehearsing-an-upgrade): N above 0
# renders like a release N render revisions newer.
SETTING_RENDER_REHEARSAL = "MODELDEPLOYMENT_RENDER_REHEARSAL"
# The routing sidecar's image unless that setting names another: llm-d-router v0.10.0's, the release
# the router images in app/engines/router_flags.py come from (docs/research/routers.md).
DEFAULT_ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
# CPU and memory of every router container and of the routing sidecar (docs/operations.md,
# "Settings"; defaults in app/model/context.py).
SETTING_ROUTER_CPU_REQUEST = "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_CPU_REQUEST"
SETTING_ROUTER_MEMORY_REQUEST = "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_MEMORY_REQUEST"
SETTING_ROUTER_CPU_LIMIT = "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_CPU_LIMIT"
SETTING_ROUTER_MEMORY_LIMIT = "GPUSTACK_MODEL_DEPLOYMENT_ROUTER_MEMORY_LIMIT"
SETTING_ROUTING_SIDECAR_CPU_REQUEST = "GPUSTACK_MODEL_DEPLOYMENT_ROUTING_SIDECAR_CPU_REQUEST"
SETTING_ROUTING_SIDECAR_MEMORY_REQUEST = "GPUSTACK_MODEL_DEPLOYMENT_ROUTING_SIDECAR_MEMORY_REQUEST"
SETTING_ROUTING_SIDECAR_CPU_LIMIT = "GPUSTACK_MODEL_DEPLOYMENT_ROUTING_SIDECAR_CPU_LIMIT"
SETTING_ROUTING_SIDECAR_MEMORY_LIMIT = "GPUSTACK_MODEL_DEPLOYMENT_ROUTING_SIDECAR_MEMORY_LIMIT"
SETTING_MAX_PODS_PER_DEPLOYMENT = "MODELDEPLOYMENT_MAX_PODS_PER_DEPLOYMENT"
SETTING_MAX_BODY_BYTES = "MODELDEPLOYMENT_MAX_BODY_BYTES"
SETTING_MAX_BODY_VALUES = "MODELDEPLOYMENT_MAX_BODY_VALUES"

# --- Bounds (docs/admission.md#the-rules, docs/metacontroller.md#trust) ---------------------------

# The schema's own limits, applied to values read back from a parent's status.
MAX_ROLE_REPLICAS = 1024
MAX_ROLE_SIZE = 64
# Rule 1: roles per deployment.
MAX_ROLES = 10
# Incarnations read back from status are bounded: a forged or corrupt status cannot grow the plan.
MAX_INCARNATION = 10**9
# Rule 21: total Pods of one deployment (Σ replicas × size); one sync must fit the service's memory.
DEFAULT_MAX_PODS_PER_DEPLOYMENT = 2048
# A hook or webhook request body above this is answered 413 before it is read further.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# ...and one holding more JSON values than this (decoding cost, not bytes; app/web/guard.py).
DEFAULT_MAX_BODY_VALUES = 6_000_000
# An AdmissionReview nested deeper than this is refused before any rule reads it (Kubernetes
# objects, managedFields included, nest a few tens of levels at most).
MAX_JSON_DEPTH = 100
# metadata.generation and other integers the API server stores as int64.
MAX_INT64 = 2**63 - 1

# --- Hook requests (Metacontroller v2): the child maps the CompositeController declares ----------

# Keys `Kind.apiVersion` of manifests/metacontroller/compositecontroller.yaml's childResources: a
# request missing one of them cannot be planned from (an absent map reads as "no children").
DECLARED_CHILD_MAPS = (CHILD_PODS, CHILD_SERVICES, CHILD_CONFIGMAPS, CHILD_SERVICE_ACCOUNTS, CHILD_ROLES,
                       CHILD_ROLE_BINDINGS, CHILD_DEPLOYMENTS, CHILD_ENDPOINT_SLICES)

# --- Tenant isolation (docs/rendering.md#the-renders-tenant-guard, admission rule 20) -------------

# Paths the operator mounts into a managed role's engine container; a user mount at, over or under
# one replaces what the operator put there.
OPERATOR_OWNED_MOUNT_PATHS = (KVCACHE_CONFIG_DIR, KVCACHE_CONFIG_PATH, SHM_PATH)

# --- ModelDeploymentScaler: per-role autoscaling through a scale subresource (docs/autoscaling.md) --

KIND_MODEL_DEPLOYMENT_SCALER = "ModelDeploymentScaler"
PLURAL_MODEL_DEPLOYMENT_SCALERS = "modeldeploymentscalers"
SHORT_NAME_MODEL_DEPLOYMENT_SCALER = "mds"
RELATED_MODEL_DEPLOYMENTS = f"{KIND_MODEL_DEPLOYMENT}.{API_VERSION}"
# The server-side-apply field manager of the roles' `replicas` the scaler writes on its deployment.
SCALER_FIELD_MANAGER = "worker.gpustack.ai/model-deployment-scaler"
# The scaler's own bounds: a ratio is replicas of a role per unit; a unit count is what HPA writes.
MAX_SCALER_RATIO = 1024
MAX_SCALER_REPLICAS = 1024
# The Scale object the API server hands a webhook for a /scale write.
SCALE_SUBRESOURCE = "scale"
KIND_SCALE = "Scale"

COND_SCALER_ACTIVE = "Active"
COND_SCALER_QUOTA_RESERVED = COND_QUOTA_RESERVED
REASON_SCALER_SYNCED = "Synced"
REASON_DEPLOYMENT_NOT_FOUND = "DeploymentNotFound"
REASON_ROLE_NOT_FOUND = "RoleNotFound"
REASON_SCALE_REFUSED = "ScaleRefused"
REASON_CONFLICT = "Conflict"
REASON_QUOTA_PENDING = "QuotaPending"
REASON_DEPLOYMENT_UNKNOWN = "DeploymentUnknown"

EVENT_SCALED = "Scaled"
EVENT_SCALE_REFUSED = "ScaleRefused"
EVENT_REPLICAS_CONFLICT = "ReplicasConflict"

# Idle keep-alive of both listeners, above the 90 s after which Go's HTTP transport (the API server's
# webhook client, Metacontroller's hook client) drops an idle connection itself: a server closing first
# races the client's next request on that connection, which a POST sees as EOF (docs/operations.md#security).
SERVER_KEEP_ALIVE_SECONDS = 120
# The CompositeControllers' resyncPeriodSeconds (manifests/metacontroller, the chart): every parent
# gets a pass at least this often, from one replica of the service or the other
# (docs/metacontroller.md#what-starts-a-pass); the per-deployment metrics expire by it.
RESYNC_PERIOD_SECONDS = 60

# --- Parking and waking: scale to zero, wake on request (docs/scale-to-zero.md) -------------------

PHASE_IDLE = "Idle"
# The deployment's own Ready condition: True when every declared replica is Ready; False
# ScaledToZero when every role declares 0 replicas (parked), NotReady otherwise.
COND_READY = "Ready"
REASON_READY = "Ready"
REASON_NOT_READY = "NotReady"
REASON_SCALED_TO_ZERO = "ScaledToZero"
REASON_PARKED = "Parked"
EVENT_PARKED = "Parked"
EVENT_WOKEN = "Woken"
# spec.scaleToZero's defaults: units a wake sets, and how long a wake may take before held
# requests are answered 503.
DEFAULT_WAKE_REPLICAS = 1
DEFAULT_WAKE_TIMEOUT = "15m"
# Bounds of spec.scaleToZero's durations: idleness is written every 30 s, so a shorter idleAfter
# would park on stale facts; a wake deadline under a minute cannot cover admission and model load.
MIN_IDLE_AFTER_SECONDS = 60
MIN_WAKE_TIMEOUT_SECONDS = 60
MAX_WAKE_TIMEOUT_SECONDS = 24 * 3600
# Annotations on the scaler, each with one writer (docs/scale-to-zero.md#field-ownership):
# the activator asks for a wake (an RFC 3339 time, refreshed while it holds requests), the
# operator's idleness reader records the last request the engines counted.
ANNOTATION_WAKE_REQUESTED = "modeldeployment.gpustack.ai/wake-requested"
ANNOTATION_LAST_REQUEST = "modeldeployment.gpustack.ai/last-request"
# What the scaler learns of idleness is written at most this often per deployment.
IDLENESS_WRITE_INTERVAL_SECONDS = 30.0
# The activator (docs/scale-to-zero.md#the-activator): a response it held and forwarded after a
# wake carries this header (its value: the seconds the request was held).
HEADER_WOKEN = "X-ModelDeployment-Woken"
ACTIVATOR_COMPONENT = "activator"
# The endpoint switch (docs/scale-to-zero.md#the-endpoint-switch): while parked or waking the
# endpoint Service selects no Pod (an EndpointSlice lists the activator's Pods); this annotation
# keeps the serving Pods' selector (JSON) for the activator to forward to once they are Ready.
ANNOTATION_SERVING_SELECTOR = "modeldeployment.gpustack.ai/serving-selector"
# ...and its selector gains this label, which no Pod carries: Kubernetes' EndpointSlice controller
# keeps its own slice of the Service, empty (a Service without a selector would keep a stale one).
LABEL_ENDPOINT_PARKED = "modeldeployment.gpustack.ai/endpoint-parked"
# Engine request counters read for idleness (Prometheus text on the engine's serving port; names
# checked against vLLM's v1 metrics and SGLang 0.5.2's sglang/srt/metrics/collector.py). A counter
# that moved, or a request running or queued, is a request (docs/scale-to-zero.md#idle-after).
# SGLang serves those counters only with this flag (sglang/srt/arg_groups/fields/observability.py
# `enable_metrics`, off by default); every SGLang role renders it (docs/engines.md#sglang-metrics).
SGLANG_METRICS_FLAG = "--enable-metrics"
IDLENESS_COUNTERS = ("vllm:request_success_total", "sglang:num_requests_total")
IDLENESS_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                   "sglang:num_running_reqs", "sglang:num_queue_reqs")
# Where a deployment's endpoint Service sends its traffic (status.endpointRoute, present only while
# it is the activator): its own serving Pods, or the activator's.
ENDPOINT_ROUTE_ACTIVATOR = "Activator"
# The one pass after it serves again: selector back, the activator's slice still listed.
ENDPOINT_ROUTE_RELEASING = "Releasing"
# The activator's Service in the operator's namespace: its EndpointSlices list the activator's Ready
# Pods, which the operator copies into a parked deployment's slice.
ACTIVATOR_SERVICE = "modeldeployment-activator"
ACTIVATOR_PORT_NAME = "proxy"
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_ENDPOINT_SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
ENDPOINT_SLICE_MANAGER = "worker.gpustack.ai-model-deployment"
