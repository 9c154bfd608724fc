"""ModelDeploymentScaler (worker.gpustack.ai/v1): per-role autoscaling through a `scale` subresource.

A CRD has one `scale` subresource and it cannot point into `spec.roles[]`, so HPA and KEDA scale a
role of a multi-role deployment through this adapter: `spec.replicas` units, each unit `ratio`
replicas of every listed role. The operator writes `ratio × replicas` into the deployment's
`spec.roles[name].replicas` by server-side apply (docs/autoscaling.md). The models are the source
of the CRD schema (`app/api/crd.py`), like the deployment's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional, TypedDict

import msgspec
from pydantic import Field, ValidationError

from app import vocab
from app.api.objects import KubeObject
from app.api.schema import KubeModel, cel, list_map
from app.api.strict import BadHookRequest, json_body, schema_mismatch
from app.api.v1 import Condition, ModelDeployment, ObjectMeta

SCALER_FROZEN_WHY = ("a scaler governs one fixed set of roles of one deployment; to change it, delete this scaler "
                     "(the deployment keeps its replicas) and create another")


class DeploymentRef(KubeModel):
    name: str = Field(min_length=1, max_length=253,
                      description="The ModelDeployment in this namespace whose roles this scaler sets. Frozen.")


class ScalerRole(KubeModel):
    name: str = Field(
        min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="A role of the deployment (its spec.roles[].name).",
    )
    ratio: int = Field(
        default=1, ge=1, le=vocab.MAX_SCALER_RATIO,
        description="Replicas of this role per unit: the role gets ratio × spec.replicas replicas. Frozen.",
    )


# A Go-style duration ("90s", "15m", "1h30m"): what `kubectl` users write for a timeout.
DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"


class ScaleToZero(KubeModel):
    idle_after: str = Field(
        pattern=DURATION_PATTERN, max_length=32,
        description="Park (set spec.replicas to 0) when no request has reached the deployment for this long, "
        f"e.g. 15m. At least {vocab.MIN_IDLE_AFTER_SECONDS}s: idleness is learned from the engines' request "
        "counters, written at most every 30 s.",
    )
    wake_replicas: int = Field(
        default=vocab.DEFAULT_WAKE_REPLICAS, ge=1, le=vocab.MAX_SCALER_REPLICAS,
        description="Units a request to a parked deployment wakes it to (an HPA then scales from there).",
    )
    wake_timeout: str = Field(
        default=vocab.DEFAULT_WAKE_TIMEOUT, pattern=DURATION_PATTERN, max_length=32,
        description="How long a held request waits for the wake (Kueue admission, image pull, model load) "
        "before it is answered 503 with Retry-After and the reason. Default 15m.",
    )


class ModelDeploymentScalerSpec(KubeModel):
    deployment_ref: DeploymentRef = Field(
        description="The ModelDeployment to scale, in this namespace. Frozen.",
        json_schema_extra={"x-kubernetes-validations": [cel(
            "self == oldSelf", f"spec.deploymentRef is frozen: {SCALER_FROZEN_WHY}", reason="FieldValueForbidden")]},
    )
    roles: Annotated[
        list[ScalerRole],
        Field(
            min_length=1, max_length=vocab.MAX_ROLES,
            description="The roles scaled together, each with its ratio (e.g. prefill 1, decode 2: a unit is "
            "one prefill and two decode replicas). The set and every ratio are frozen.",
            json_schema_extra={**list_map("name"), "x-kubernetes-validations": [cel(
                "self == oldSelf", f"spec.roles (the set of roles and their ratios) is frozen: {SCALER_FROZEN_WHY}",
                reason="FieldValueForbidden")]},
        ),
    ]
    replicas: int = Field(
        default=1, ge=0, le=vocab.MAX_SCALER_REPLICAS,
        description="Units: what HPA, KEDA and `kubectl scale` write through the scale subresource. 0 parks "
        "the governed roles (no Pods, no Workloads, quota released).",
    )
    scale_to_zero: ScaleToZero | None = Field(
        default=None,
        description="Park the deployment when no request reached it for idleAfter, and wake it on the next "
        "request (docs/scale-to-zero.md). Absent: the scaler never parks on its own.",
    )

    def role(self, name: str) -> ScalerRole | None:
        return next((r for r in self.roles if r.name == name), None)

    def desired(self, role: ScalerRole) -> int:
        """The replicas this scaler sets on one role."""
        return role.ratio * self.replicas


class ModelDeploymentScaler(KubeModel):
    api_version: str = vocab.API_VERSION
    kind: str = vocab.KIND_MODEL_DEPLOYMENT_SCALER
    metadata: ObjectMeta
    spec: ModelDeploymentScalerSpec
    status: dict[str, Any] | None = None


class ScalerRoleStatus(KubeModel):
    name: str
    desired: int = Field(description="ratio × spec.replicas: what the scaler sets.")
    declared: int = Field(description="The deployment's spec.roles[].replicas now (0 when it lacks the role).")
    ready: int = Field(description="The deployment's Ready replicas of the role.")


class ModelDeploymentScalerStatus(KubeModel):
    observed_generation: int | None = Field(default=None, description="Set by Metacontroller.")
    replicas: int = Field(default=0, description="Units the deployment declares now: min over roles of "
                          "floor(declared / ratio).")
    ready_replicas: int = Field(default=0, description="Units whose every replica is Ready: min over roles of "
                                "floor(ready / ratio).")
    selector: str | None = Field(default=None, description="Label selector of the roles' leader Pods (for HPA's "
                                 "Pods and Resource metrics).")
    role_ratios: str | None = Field(default=None, description="The roles and ratios, e.g. prefill×1,decode×2.")
    roles: Annotated[list[ScalerRoleStatus], Field(json_schema_extra=list_map("name"))] = Field(default_factory=list)
    last_request_time: str | None = Field(default=None, description="The last time the engines counted a request "
                                          "(or the activator held one), as the operator learned it.")
    parked_since: str | None = Field(default=None, description="When the deployment was parked (spec.replicas 0); "
                                     "absent while it serves.")
    phase: str | None = Field(default=None, description="Parked (0 units), Waking (units declared, none Ready) or "
                              "Serving.")
    conditions: Annotated[list[Condition], Field(json_schema_extra=list_map("type"))] = Field(default_factory=list)


# --- the hook request (Metacontroller v2, a CompositeController with no children) ----------------

SCALER_REQUEST_REMEDY = ("send a Metacontroller v2 hook request for a stored ModelDeploymentScaler "
                         "(docs/autoscaling.md#how-it-runs)")


class _Meta(TypedDict, total=False):
    name: str
    namespace: Optional[str]
    uid: str
    generation: Optional[int]


class _Parent(TypedDict, total=False):
    metadata: _Meta
    spec: dict[str, Any]
    status: Optional[dict[str, Any]]


class _ScalerRequest(TypedDict, total=False):
    controller: Optional[dict[str, Any]]
    parent: _Parent
    children: Optional[dict[str, Optional[dict[str, dict[str, Any]]]]]
    related: Optional[dict[str, Optional[dict[str, dict[str, Any]]]]]
    finalizing: Optional[bool]


def check_scaler_request(body: Any) -> None:
    """A scaler hook request's shape. It declares no children, so none is required (an empty
    `children` plans nothing away); the parent's name and uid are (every write is checked against them)."""
    if not isinstance(body, dict):
        raise BadHookRequest(f"$: a hook request is a JSON object — {SCALER_REQUEST_REMEDY}")
    try:
        msgspec.convert(body, _ScalerRequest)
    except msgspec.ValidationError as exc:
        raise BadHookRequest(f"{exc} — {SCALER_REQUEST_REMEDY}") from exc
    meta = (body.get("parent") or {}).get("metadata") if isinstance(body.get("parent"), dict) else None
    if not isinstance(meta, dict):
        raise BadHookRequest(f"$.parent.metadata: missing — {SCALER_REQUEST_REMEDY}")
    for name in ("name", "namespace", "uid"):
        if not isinstance(meta.get(name), str) or not meta[name]:
            raise BadHookRequest(f"$.parent.metadata.{name}: missing or empty; every write is checked against the "
                                 f"scaler's identity — {SCALER_REQUEST_REMEDY}")


@dataclass(frozen=True)
class ScalerHookRequest:
    """A scaler's sync request as the planner reads it: the scaler, and the deployment it names
    (as sent, for its managedFields, and through its model), None when `related` lacks it."""

    scaler: ModelDeploymentScaler
    target: KubeObject | None = None
    deployment: ModelDeployment | None = None


def parse_scaler_sync(raw: bytes) -> ScalerHookRequest:
    """A scaler sync request from its bytes, or BadHookRequest (400 malformed, 422 off-schema)."""
    body = _scaler_body(raw)
    scaler = _scaler(body["parent"])
    return scaler_hook_request(scaler, target_of(scaler, body.get("related") or {}))


def parse_scaler_customize(raw: bytes) -> ModelDeploymentScaler:
    return _scaler(_scaler_body(raw)["parent"])


def scaler_hook_request(scaler: ModelDeploymentScaler, target: KubeObject | None) -> ScalerHookRequest:
    """The request for `scaler` and its target as found (tests and the simulator enter here too)."""
    if target is None:
        return ScalerHookRequest(scaler)
    try:
        deployment = ModelDeployment.model_validate(target)
    except ValidationError as exc:
        raise schema_mismatch(exc, f"related ModelDeployment {scaler.spec.deployment_ref.name}") from exc
    return ScalerHookRequest(scaler, target, deployment)


def target_of(scaler: ModelDeploymentScaler, related: Any) -> KubeObject | None:
    """The related deployment the scaler names, in the scaler's namespace (any other is ignored)."""
    key = f"{scaler.metadata.namespace}/{scaler.spec.deployment_ref.name}"
    found = (related.get(vocab.RELATED_MODEL_DEPLOYMENTS) or {}).get(key)
    return found if isinstance(found, dict) else None


def _scaler_body(raw: bytes) -> dict[str, Any]:
    body = json_body(raw)
    check_scaler_request(body)
    checked: dict[str, Any] = body
    return checked


def _scaler(parent: KubeObject) -> ModelDeploymentScaler:
    try:
        return ModelDeploymentScaler.model_validate(parent)
    except ValidationError as exc:
        raise schema_mismatch(exc, "parent ModelDeploymentScaler") from exc
