"""Side effects the planner asks for, as data. app.kube.executor carries them out.

Metacontroller applies the children and the status; everything else the operator must do to the
cluster is one of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app import vocab
from app.render import names


@dataclass(frozen=True)
class DeleteWorkload:
    """Frees a departing replica's Kueue quota and releases Kueue's finalizer on its Pods.

    `uid` and `owners` ((kind, name) of each ownerReference) are the request's copy of the Workload
    (its `related` entry); "" and () when the pass has none, and the executor reads it then."""

    namespace: str
    name: str
    why: str
    uid: str = ""
    owners: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RecordEvent:
    """An Event on the pass's parent; `name` is deterministic so one occurrence is one Event.

    `deployment`/`deployment_uid` name the parent: a ModelDeployment, or the object of kind
    `involved_kind` (a ModelDeploymentScaler's pass records its Events on the scaler)."""

    namespace: str
    deployment: str
    deployment_uid: str
    name: str
    reason: str
    type: str
    message: str
    involved_kind: str = vocab.KIND_MODEL_DEPLOYMENT


class _ParentMeta(Protocol):
    """The metadata of a pass's parent (a ModelDeployment's or a ModelDeploymentScaler's)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...


def parent_event(parent: _ParentMeta, reason: str, message: str, *, type_: str = vocab.EVENT_TYPE_WARNING,
                 kind: str = vocab.KIND_MODEL_DEPLOYMENT, occurrence: tuple[str, str] | None = None) -> RecordEvent:
    """An Event on the pass's parent, named for its occurrence so that one occurrence is one Event
    however many passes see it (docs/status.md#events): by default the reason and message (the same
    complaint is one Event), else `occurrence` = (name stem, key) when the message may repeat for
    distinct occurrences (a replica's second departure)."""
    stem, key = occurrence or (reason, message)
    return RecordEvent(namespace=parent.namespace, deployment=parent.name, deployment_uid=parent.uid,
                       name=names.event(parent.name, stem, key), reason=reason, type=type_, message=message,
                       involved_kind=kind)


def warning_event(parent: _ParentMeta, reason: str, message: str) -> RecordEvent:
    """A Warning Event on a ModelDeployment (a render failure, a skewed pool, ignored tenant keys)."""
    return parent_event(parent, reason, message)


@dataclass(frozen=True)
class SetAdmissionCheck:
    """Our joint AdmissionCheck's state on one Workload (server-side apply on workloads/status)."""

    namespace: str
    workload: str
    resource_version: str
    state: str  # Pending | Ready | Retry
    message: str
    last_transition_time: str


@dataclass(frozen=True)
class ReadyOnComposition:
    """A single-role deployment's group whose Pods this pass creates: our check is written `Ready` on
    its Workload as soon as Kueue composes it and none of `stopping_pods` (the ordinal's Pods of
    earlier incarnations the pass listed) is left, without waiting for the next pass, while the
    deployment is still the object `deployment_uid` at `generation`, no operator of a newer render
    revision than `revision` answers it, and each of `members` (a multi-Pod group's Pods, whose names
    do not carry their render) is stored with the render `fingerprint` (docs/kueue.md#ready-on-composition)."""

    namespace: str
    deployment: str
    deployment_uid: str
    generation: int
    revision: int
    workload: str
    stopping_pods: tuple[str, ...]
    message: str
    members: tuple[str, ...] = ()
    fingerprint: str = ""


@dataclass(frozen=True)
class SetWorkloadActive:
    """The deadlock release (docs/kueue.md#deadlock-release): a merge patch of the Workload's
    `spec.active`, with our `released-at` annotation set to `released_at` when deactivating and
    removed when activating again; `uid` and `resource_version` (the request's copy) are its
    preconditions, so a moved Workload is left for the next pass to decide again."""

    namespace: str
    workload: str
    uid: str
    resource_version: str
    active: bool
    released_at: str = ""


@dataclass(frozen=True)
class ApplyRoleReplicas:
    """A scaler's write: the listed roles' `spec.roles[].replicas` on its deployment, by server-side
    apply as the scaler's field manager (docs/autoscaling.md#the-write). Nothing else is written."""

    namespace: str
    deployment: str
    deployment_uid: str
    replicas: tuple[tuple[str, int], ...]  # (role, replicas), in the scaler's role order


@dataclass(frozen=True)
class SetScalerUnits:
    """A scaler's park or wake: its own `spec.replicas` from `current` to `units` (JSON patch with the
    scaler's uid and the current value as preconditions, so a concurrent HPA or user write wins and
    the next pass decides again; docs/scale-to-zero.md#field-ownership)."""

    namespace: str
    scaler: str
    scaler_uid: str
    current: int
    units: int


Intent = (DeleteWorkload | RecordEvent | SetAdmissionCheck | ReadyOnComposition | SetWorkloadActive | ApplyRoleReplicas
          | SetScalerUnits)
