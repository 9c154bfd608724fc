"""Reading the observed world: a role's Pods by replica ordinal, and Kueue Workload state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app import vocab
from app.api.objects import KubeObject, ObjectsByName


def condition_true(obj: KubeObject, type_: str) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond.get("status") == "True"
    return False


def workload_reserved(workload: KubeObject | None) -> bool:
    return workload is not None and condition_true(workload, "QuotaReserved")


def workload_admitted(workload: KubeObject | None) -> bool:
    return workload is not None and condition_true(workload, "Admitted")


def workload_evicted(workload: KubeObject | None) -> bool:
    return workload is not None and (condition_true(workload, "Evicted") or condition_true(workload, "Preempted"))


def condition_reason(obj: KubeObject, type_: str) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return str(cond.get("reason") or "")
    return ""


# Kueue evicts with this reason when an admission check asks for a retry (our deadlock release):
# the group never ran, it is only requeued.
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"


def workload_evicted_while_running(workload: KubeObject | None) -> bool:
    """Evicted for a reason that stops a running group (preemption, a PodsReady timeout...)."""
    return (workload is not None and workload_evicted(workload)
            and condition_reason(workload, "Evicted") != EVICTED_BY_ADMISSION_CHECK)


# Kueue resets every check to Pending when it evicts, saying what it was (pkg/workload/evict).
RESET_AFTER_EVICTION = "Reset to Pending after eviction. Previously: Ready"


def workload_ran(workload: KubeObject | None) -> bool:
    """Admitted now, or evicted after our check had let it run: Kueue admits a reserved Workload
    exactly when every check is Ready, and records the check it reset on eviction."""
    if workload is None:
        return False
    if workload_admitted(workload):
        return True
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(entry, dict) and entry.get("name") == vocab.ADMISSION_CHECK_NAME:
            return workload_evicted(workload) and str(entry.get("message") or "").startswith(RESET_AFTER_EVICTION)
    return False


def workload_deleting(workload: KubeObject | None) -> bool:
    """Deleted and held by Kueue's finalizer: it holds nothing for long and is never admitted again."""
    return workload is not None and bool((workload.get("metadata") or {}).get("deletionTimestamp"))


def workload_uid(workload: KubeObject) -> str:
    meta = workload.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or "")


def pod_ready(pod: KubeObject) -> bool:
    return condition_true(pod, "Ready")


def pod_terminating(pod: KubeObject) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_finished(pod: KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


# Kueue marks every Pod it stops with this condition; the reason says why
# ("WorkloadEvictedDueTo<Evicted reason>" when the group was evicted, "WorkloadDeleted"...).
POD_TERMINATION_TARGET = "TerminationTarget"
STOP_REASON_EVICTED = "WorkloadEvicted"


def pod_stopped_by_eviction(pod: KubeObject) -> bool:
    """Kueue stopped this Pod because its group was evicted (readable after the Workload is gone)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == POD_TERMINATION_TARGET and cond.get("status") == "True":
            return str(cond.get("reason") or "").startswith(STOP_REASON_EVICTED)
    return False


def pod_gated(pod: KubeObject) -> bool:
    """Still held by Kueue's admission gate: the Pod has never been allowed to run."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == vocab.KUEUE_SCHEDULING_GATE for g in gates)


def pod_fingerprint(pod: KubeObject) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.ANNOTATION_FINGERPRINT)


def pod_incarnation(pod: KubeObject) -> int:
    """The incarnation of the instance this Pod belongs to (0 when unmarked: the first)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.ANNOTATION_INCARNATION, "0")
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 9 else 0


def pod_uid(pod: KubeObject) -> str:
    meta = pod.get("metadata") or {}
    uid: str = meta.get("uid") or meta.get("name", "")
    return uid


@dataclass
class ObservedInstance:
    """The Pods observed for one (role, ordinal)."""

    ordinal: int
    pods: list[KubeObject] = field(default_factory=list)

    def members(self) -> set[int]:
        out = set()
        for pod in self.pods:
            value = ((pod.get("metadata") or {}).get("labels") or {}).get(vocab.LABEL_MEMBER_INDEX, "")
            if value.isdigit():
                out.add(int(value))
        return out

    @property
    def terminating(self) -> bool:
        return any(pod_terminating(p) for p in self.pods)

    @property
    def finished(self) -> bool:
        return any(pod_finished(p) for p in self.pods)

    @property
    def live(self) -> bool:
        """Some Pod has not been deleted yet: whoever decides the departure has not acted on it."""
        return any(not pod_terminating(p) for p in self.pods)

    @property
    def held_by_kueue(self) -> bool:
        """Some Pod still carries Kueue's finalizer: its group's Workload has not been deleted."""
        return any(vocab.FINALIZER_KUEUE_MANAGED in ((p.get("metadata") or {}).get("finalizers") or [])
                   for p in self.pods)

    @property
    def evicted(self) -> bool:
        """Kueue stopped this incarnation's Pods because its Workload was evicted."""
        return any(pod_stopped_by_eviction(p) for p in self.pods)

    @property
    def ran(self) -> bool:
        """Kueue admitted this incarnation once (its Pods lost the admission gate): it served."""
        return any(not pod_gated(p) for p in self.pods)

    def incarnation(self) -> int:
        return max((pod_incarnation(p) for p in self.pods), default=0)

    def fingerprints(self) -> set[str | None]:
        return {pod_fingerprint(p) for p in self.pods}

    def ready(self, size: int) -> bool:
        return len(self.pods) == size and not self.terminating and all(pod_ready(p) for p in self.pods)

    def occurrence_key(self) -> str:
        """Identifies this incarnation of the instance: one Event per occurrence. Its incarnation
        number, not its Pod UIDs: a view that lags may list only some of its Pods, and every view
        agrees on the number."""
        return f"incarnation:{self.incarnation()}"


def pods_by_role(deployment: str, pods: ObjectsByName | None) -> dict[str, dict[int, ObservedInstance]]:
    """role name -> ordinal -> observed instance, from Metacontroller's children map."""
    out: dict[str, dict[int, ObservedInstance]] = {}
    for pod in (pods or {}).values():
        if not isinstance(pod, dict):
            continue
        pod_labels = (pod.get("metadata") or {}).get("labels") or {}
        if pod_labels.get(vocab.LABEL_INSTANCE) != deployment:
            continue
        role = pod_labels.get(vocab.LABEL_COMPONENT)
        ordinal = pod_labels.get(vocab.LABEL_POD_ORDINAL, "")
        if not role or not ordinal.isdigit():
            continue
        by_ordinal = out.setdefault(role, {})
        by_ordinal.setdefault(int(ordinal), ObservedInstance(int(ordinal))).pods.append(pod)
    for by_ordinal in out.values():
        for inst in by_ordinal.values():
            inst.pods.sort(key=lambda p: (p.get("metadata") or {}).get("name", ""))
    return out


def as_child(observed: KubeObject) -> KubeObject:
    """An observed object returned unchanged as a desired child (kept, never updated: OnDelete).

    Only the fields we own are returned: server-set metadata and status would read as changes.
    """
    meta = observed.get("metadata") or {}
    keep_meta = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k) is not None}
    child = {"apiVersion": observed.get("apiVersion", "v1"), "kind": observed.get("kind", "Pod"), "metadata": keep_meta}
    if "spec" in observed:
        child["spec"] = observed["spec"]
    return child
