"""Replicas Kueue admitted whose Pods it never placed (docs/kueue.md#an-admitted-replica-kueue-never-places).

Kueue's topology-aware scheduling keeps an admitted Pod behind its `kueue.x-k8s.io/topology` gate
until its TopologyUngater writes the Pod's node selector and removes the gate, normally within a
second. That ungater can stall for good on a Workload name; nothing the operator may write releases
it, a restart of Kueue does. So the operator says so, naming the replica, its Workload and the way
out, rather than leaving a deployment Degraded with no reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app import timestamps, vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.gang import LETTING_GO
from app.control.intents import RecordEvent, parent_event
from app.control.rollout import RolePlan
from app.model.context import DeploymentContext
from app.render import names

# How long an admitted replica may wait for Kueue to place it before the operator calls it stalled.
UNGATE_STALL_SECONDS = 60.0
# The way out the message names (the chaos soak follows it: bench/soak.md#invariants).
WAY_OUT = "restart kueue-controller-manager to release it"


@dataclass(frozen=True)
class UngateStall:
    role: str
    ordinal: int
    workload: str
    workload_uid: str
    admitted_at: str  # the Workload's Admitted condition's lastTransitionTime


def stalled(admitted_at: datetime | None, now: datetime) -> bool:
    """Admitted at least UNGATE_STALL_SECONDS ago (an unread admission time decides nothing)."""
    return admitted_at is not None and (now - admitted_at).total_seconds() >= UNGATE_STALL_SECONDS


def _waiting_on_the_ungater(pod: KubeObject) -> bool:
    """Let through Kueue's admission gate, still behind its topology gate, not being deleted."""
    return obs.pod_topology_gated(pod) and not obs.pod_gated(pod) and not obs.pod_terminating(pod)


def ungate_stalls(ctx: DeploymentContext, plans: list[RolePlan],
                  observed: dict[str, dict[int, obs.ObservedInstance]], *, now: str) -> list[UngateStall]:
    """Every kept replica whose Workload was admitted UNGATE_STALL_SECONDS ago or more while a live
    Pod of it still waits on the ungater."""
    clock = timestamps.parse(now)
    if clock is None:
        return []
    out = []
    for plan in plans:
        for entry in plan.ordinals:
            if not entry.admitted or entry.action in LETTING_GO:
                continue
            inst = observed.get(plan.role, {}).get(entry.ordinal)
            if inst is None or not any(_waiting_on_the_ungater(p) for p in inst.pods):
                continue
            group = entry.group
            workload = ctx.world.workload(ctx.namespace, group)
            since = (obs.condition(workload, vocab.KUEUE_COND_ADMITTED) or {}).get("lastTransitionTime")
            if workload is None or not stalled(timestamps.parse(since), clock):
                continue
            out.append(UngateStall(plan.role, entry.ordinal, group, obs.workload_uid(workload), str(since)))
    return out


def message(ctx: DeploymentContext, stall: UngateStall) -> str:
    replica = names.instance(ctx.name, stall.role, stall.ordinal)
    return (f"Kueue admitted replica {replica} (Workload {stall.workload}) at {stall.admitted_at} but has not "
            f"removed the {vocab.KUEUE_TOPOLOGY_GATE} scheduling gate of its Pods: Kueue's topology ungater is "
            f"not placing them; if the kueue-controller-manager log repeats \"pending ungate operations\" for "
            f"that Workload, {WAY_OUT}")


def phase_note(ctx: DeploymentContext, stalls: list[UngateStall]) -> str:
    """What the phase message adds: the first stall, and how many more."""
    if not stalls:
        return ""
    more = f" ({len(stalls) - 1} more replica(s) likewise)" if len(stalls) > 1 else ""
    return f"{message(ctx, stalls[0])}{more}"


def events(ctx: DeploymentContext, stalls: list[UngateStall]) -> list[RecordEvent]:
    """One Warning per stalled Workload (named after its UID: a later pass repeats the name)."""
    return [parent_event(ctx.md.metadata, vocab.EVENT_REPLICA_UNGATE_STALLED, message(ctx, s),
                         occurrence=(vocab.EVENT_NAME_UNGATE_STALL, s.workload_uid)) for s in stalls]
