"""Side effects the planner asks for, as data. app.kube.executor carries them out.

Metacontroller applies the children and the status; everything else the operator must do to the
cluster is one of these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeleteWorkload:
    """Frees a departing replica's Kueue quota and releases Kueue's finalizer on its Pods."""

    namespace: str
    name: str
    why: str


@dataclass(frozen=True)
class RecordEvent:
    """An Event on the ModelDeployment; `name` is deterministic so one occurrence is one Event."""

    namespace: str
    deployment: str
    deployment_uid: str
    name: str
    reason: str
    type: str
    message: str


@dataclass(frozen=True)
class SetAdmissionCheck:
    """Our joint AdmissionCheck's state on one Workload (server-side apply on workloads/status)."""

    namespace: str
    workload: str
    resource_version: str
    state: str  # Pending | Ready | Retry
    message: str
    last_transition_time: str


Intent = DeleteWorkload | RecordEvent | SetAdmissionCheck
