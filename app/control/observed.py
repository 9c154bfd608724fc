"""Reading the observed world: a role's Pods by replica ordinal, and Kueue Workload state."""

from __future__ import annotations

from dataclasses import dataclass, field

from app import vocab
from app.api.objects import KubeObject, ObjectsByName


def status_condition(status: KubeObject | None, type_: str) -> KubeObject | None:
    """The `conditions` entry of this type in a status (conditions are a map by type), or None.

    The one reader of conditions: Workloads, Pods, the AdmissionCheck and our own status alike."""
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def condition(obj: KubeObject | None, type_: str) -> KubeObject | None:
    """The object's `status.conditions` entry of this type, or None."""
    return status_condition((obj or {}).get("status"), type_)


def condition_true(obj: KubeObject | None, type_: str) -> bool:
    cond = condition(obj, type_)
    return cond is not None and cond.get("status") == vocab.CONDITION_TRUE


def condition_reason(obj: KubeObject | None, type_: str) -> str:
    cond = condition(obj, type_)
    return str(cond.get("reason") or "") if cond is not None else ""


def workload_reserved(workload: KubeObject | None) -> bool:
    return workload is not None and condition_true(workload, vocab.KUEUE_COND_QUOTA_RESERVED)


def workload_admitted(workload: KubeObject | None) -> bool:
    return workload is not None and condition_true(workload, vocab.KUEUE_COND_ADMITTED)


def workload_evicted(workload: KubeObject | None) -> bool:
    return workload is not None and (condition_true(workload, vocab.KUEUE_COND_EVICTED)
                                     or condition_true(workload, vocab.KUEUE_COND_PREEMPTED))


def workload_evicted_while_running(workload: KubeObject | None) -> bool:
    """Evicted for a reason that stops a running group (preemption, a PodsReady timeout...), not
    by our deadlock release (a deactivation, or an admission check's Retry of an earlier version),
    which only ever touches groups that never ran."""
    return (workload is not None and workload_evicted(workload)
            and condition_reason(workload, vocab.KUEUE_COND_EVICTED) not in (vocab.KUEUE_EVICTED_BY_ADMISSION_CHECK,
                                                                             vocab.KUEUE_EVICTED_DEACTIVATED))


def workload_ran(workload: KubeObject | None) -> bool:
    """Admitted now, or evicted after our check had let it run: Kueue admits a reserved Workload
    exactly when every check is Ready, and records the check it reset on eviction."""
    if workload is None:
        return False
    if workload_admitted(workload):
        return True
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(entry, dict) and entry.get("name") == vocab.ADMISSION_CHECK_NAME:
            return (workload_evicted(workload)
                    and str(entry.get("message") or "").startswith(vocab.KUEUE_CHECK_RESET_AFTER_EVICTION))
    return False


def our_check(workload: KubeObject) -> KubeObject | None:
    """Our AdmissionCheck's entry on the Workload (None until Kueue lists it)."""
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(entry, dict) and entry.get("name") == vocab.ADMISSION_CHECK_NAME:
            return entry
    return None


def workload_deleting(workload: KubeObject | None) -> bool:
    """Deleted and held by Kueue's finalizer: it holds nothing for long and is never admitted again."""
    return workload is not None and bool((workload.get("metadata") or {}).get("deletionTimestamp"))


def workload_uid(workload: KubeObject) -> str:
    meta = workload.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or "")


def pod_ready(pod: KubeObject) -> bool:
    return condition_true(pod, vocab.POD_COND_READY)


def pod_terminating(pod: KubeObject) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_finished(pod: KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") in (vocab.POD_PHASE_FAILED, vocab.POD_PHASE_SUCCEEDED)


def pod_stopped_by_eviction(pod: KubeObject) -> bool:
    """Kueue stopped this Pod because its group was evicted (readable after the Workload is gone)."""
    return (condition_true(pod, vocab.KUEUE_POD_TERMINATION_TARGET)
            and condition_reason(pod, vocab.KUEUE_POD_TERMINATION_TARGET).startswith(vocab.KUEUE_STOP_REASON_EVICTED))


def _has_gate(pod: KubeObject, name: str) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == name for g in gates)


def pod_gated(pod: KubeObject) -> bool:
    """Still held by Kueue's admission gate: the Pod has never been allowed to run."""
    return _has_gate(pod, vocab.KUEUE_SCHEDULING_GATE)


def pod_topology_gated(pod: KubeObject) -> bool:
    """Still held by Kueue's topology gate: admitted, but not yet placed by Kueue's TopologyUngater."""
    return _has_gate(pod, vocab.KUEUE_TOPOLOGY_GATE)


def placement_hosts(workload: KubeObject | None) -> set[str] | None:
    """The hosts Kueue's topology-aware placement names for the Workload's Pods, when it spells
    each one out (None: no topology assignment, or one compressed past what is read here)."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    hosts: set[str] = set()
    for assignment in admission.get("podSetAssignments") or []:
        topology = assignment.get("topologyAssignment") if isinstance(assignment, dict) else None
        if not isinstance(topology, dict):
            continue
        levels = topology.get("levels") or []
        if vocab.LABEL_HOSTNAME not in levels:
            return None
        level = levels.index(vocab.LABEL_HOSTNAME)
        for piece in topology.get("slices") or []:
            values = piece.get("valuesPerLevel") if isinstance(piece, dict) else None
            if not isinstance(values, list) or level >= len(values) or not isinstance(values[level], dict) \
                    or not isinstance(values[level].get("universal"), str):
                return None
            hosts.add(values[level]["universal"])
    return hosts or None


def placement_drifted(workload: KubeObject | None, pods: list[KubeObject]) -> bool:
    """A live Pod of the group runs on a host its admitted Workload's placement does not name:
    Kueue re-placed the group after a node failure (docs/kueue.md) while its Pods could not move,
    so Kueue's accounting of that node no longer matches what runs there."""
    hosts = placement_hosts(workload)
    if hosts is None:
        return False
    return any(not pod_terminating(p) and (p.get("spec") or {}).get("nodeName")
               and (p.get("spec") or {}).get("nodeName") not in hosts for p in pods)


def pod_fingerprint(pod: KubeObject) -> str | None:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.ANNOTATION_FINGERPRINT)


def pod_incarnation(pod: KubeObject) -> int:
    """The incarnation of the instance this Pod belongs to (0 when unmarked: the first)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(vocab.ANNOTATION_INCARNATION, "0")
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 9 else 0


def pod_group_of(pod: KubeObject) -> str:
    """The Kueue pod group a Pod belongs to (its label; "" when unlabelled)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(vocab.LABEL_KUEUE_POD_GROUP_NAME, "")
    return value if isinstance(value, str) else ""


@dataclass
class ObservedInstance:
    """The Pods observed for one (role, ordinal): those of its newest incarnation, and apart from
    them any Pod of an earlier incarnation still listed (`earlier`: a replaced or departed
    instance stopping beside its replacement, docs/kueue.md#incarnation-slots)."""

    ordinal: int
    pods: list[KubeObject] = field(default_factory=list)
    earlier: list[KubeObject] = field(default_factory=list)

    def group(self) -> str:
        """The pod group of the newest incarnation's Pods ("" when none is labelled)."""
        return next((g for g in map(pod_group_of, self.pods) if g), "")

    def groups_in_use(self) -> set[str]:
        """Every pod group a listed Pod of the ordinal, of any incarnation, belongs to."""
        return {g for g in map(pod_group_of, [*self.pods, *self.earlier]) if g}

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
    def released(self) -> bool:
        """Every Pod is being deleted and none carries Kueue's finalizer: Kueue has let them go (their
        Workload was deleted) and only their kubelet's confirmation is awaited (docs/kueue.md#what-kueue-does-with-a-group)."""
        return bool(self.pods) and not self.live and not self.held_by_kueue

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
            newest = inst.incarnation()
            inst.earlier = sorted((p for p in inst.pods if pod_incarnation(p) != newest), key=pod_name)
            inst.pods = sorted((p for p in inst.pods if pod_incarnation(p) == newest), key=pod_name)
    return out


def pod_name(pod: KubeObject) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def as_child(observed: KubeObject) -> KubeObject:
    """An observed object returned unchanged as a desired child (kept, never updated: OnDelete).

    Only the fields we own are returned: server-set metadata and status would read as changes.
    """
    meta = observed.get("metadata") or {}
    keep_meta = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k) is not None}
    child = {"apiVersion": observed.get("apiVersion", vocab.CORE_API_VERSION), "kind": observed.get("kind", vocab.KIND_POD),
             "metadata": keep_meta}
    if "spec" in observed:
        child["spec"] = observed["spec"]
    return child
