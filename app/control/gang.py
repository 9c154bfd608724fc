"""Joint admission: our Kueue AdmissionCheck verdict for every pod group of a deployment.

Every replica is its own Kueue Workload; a multi-role deployment must be admitted as a set, or
a full pool admits prefillers and strands them waiting for decoders that never arrive. Kueue
admits a Workload in the same write that reserves its quota when every check is already Ready,
so Ready is written only once the whole set holds quota (SPEC §8, NOTES "Kueue").

Deadlock: two deployments can each hold part of a pool while waiting for the rest. A Workload
that has held quota longer than `release_after_seconds` while its set is incomplete gets `Retry`:
Kueue evicts it, releasing the quota, and requeues it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app import vocab
from app.control import observed as obs
from app.control.intents import SetAdmissionCheck
from app.control.rollout import Action, RolePlan
from app.render import names
from app.render.context import DeploymentContext

PENDING, READY, RETRY = "Pending", "Ready", "Retry"
# Replicas being turned over: their slot is exempt from the set while it is refilled.
REPLACEMENT_ACTIONS = (Action.REPLACE, Action.SUPERSEDE, Action.REBUILD, Action.WAIT)


@dataclass(frozen=True)
class GangVerdict:
    complete: bool
    have: int
    want: int


def _check_entry(workload: dict[str, Any]) -> dict[str, Any] | None:
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(entry, dict) and entry.get("name") == vocab.ADMISSION_CHECK_NAME:
            return entry
    return None


def _reserved_since(workload: dict[str, Any]) -> str | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "QuotaReserved" and cond.get("status") == "True":
            return cond.get("lastTransitionTime")
    return None


def _seconds_between(start: str | None, end: str) -> float:
    if not start:
        return 0.0
    try:
        return (datetime.fromisoformat(end.replace("Z", "+00:00"))
                - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return 0.0


def verdict(plans: list[RolePlan]) -> GangVerdict:
    """Whether every declared (role, replica) group holds quota, replacement slots exempt."""
    counted = [p for plan in plans for p in plan.ordinals if p.action not in (Action.SHED, *REPLACEMENT_ACTIONS)]
    have = sum(1 for p in counted if p.reserved or p.admitted)
    return GangVerdict(complete=have == len(counted), have=have, want=len(counted))


def admission_checks(
    ctx: DeploymentContext, plans: list[RolePlan], *, now: str, release_after_seconds: float
) -> list[SetAdmissionCheck]:
    """The check state to write on each of the deployment's Workloads (only where it changes)."""
    joint = len(ctx.md.spec.roles) > 1
    gang = verdict(plans)
    intents: list[SetAdmissionCheck] = []
    for plan in plans:
        for entry in plan.ordinals:
            if entry.action == Action.SHED:
                continue
            group = names.pod_group(ctx.namespace, ctx.name, plan.role, entry.ordinal)
            workload = ctx.world.workload(ctx.namespace, group)
            if workload is None:
                continue
            current = _check_entry(workload)
            if current is None:
                # The Workload's ClusterQueue does not list our check: nothing to decide.
                continue
            state, message = _decide(workload, joint, gang, now=now, release_after_seconds=release_after_seconds)
            if current.get("state") == state and current.get("message") == message:
                continue
            if current.get("state") == READY and state != READY and obs.workload_admitted(workload):
                # Never take Ready back from an admitted group: that would evict a serving replica.
                continue
            same_state = current.get("state") == state and current.get("lastTransitionTime")
            intents.append(SetAdmissionCheck(
                namespace=ctx.namespace,
                workload=group,
                resource_version=(workload.get("metadata") or {}).get("resourceVersion", ""),
                state=state,
                message=message,
                last_transition_time=current["lastTransitionTime"] if same_state else now,
            ))
    return intents


def _decide(workload: dict[str, Any], joint: bool, gang: GangVerdict, *, now: str,
            release_after_seconds: float) -> tuple[str, str]:
    if obs.workload_admitted(workload):
        return READY, "admitted"
    if not obs.workload_reserved(workload):
        if joint:
            return PENDING, f"waiting for quota; {gang.have} of {gang.want} replicas have reserved quota"
        return PENDING, "waiting for quota"
    if not joint:
        return READY, "quota reserved"
    if gang.complete:
        return READY, f"all {gang.want} replicas of the deployment have reserved quota"
    held = _seconds_between(_reserved_since(workload), now)
    if held >= release_after_seconds:
        return RETRY, (f"{gang.have} of {gang.want} replicas have reserved quota after {int(held)}s; releasing this "
                       f"replica's quota so other deployments are not blocked, then requeueing")
    return PENDING, f"{gang.have} of {gang.want} replicas have reserved quota"
