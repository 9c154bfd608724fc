"""Joint admission: our Kueue AdmissionCheck verdict for every pod group of a deployment.

Every replica is its own Kueue Workload; a multi-role deployment must be admitted as a set, or
a full pool admits prefillers and strands them waiting for decoders that never arrive. Kueue
admits a Workload in the same write that reserves its quota when every check is already Ready,
so Ready is written only on a Workload that holds quota, and (two or more roles) only once every
declared (role, replica) group of the deployment holds quota (docs/kueue.md#joint-admission).

A single-role deployment's groups are independent: each is Ready as soon as it holds quota.

The set is every declared group, with no exemption: a group being refilled (a rollout's
replacement, a departed replica's rebuild) counts as not holding quota until its new Workload
reserves. This is stricter than exempting the replacement slot and never earlier; it costs
nothing to a rollout, which turns a replica over only while every other group is admitted.

Deadlock release. Two sets can each hold part of a pool while waiting for the rest. When the
oldest reservation of a set that is still incomplete is older than its release bound, the set
yields: every Workload of it that is not admitted gets `Retry`. Kueue evicts the reserved ones
(releasing their quota, resetting the check to Pending and requeueing them behind the
Workloads already waiting) and treats the unreserved ones as inadmissible while the check reads
Retry, so the set's own queued groups cannot grab the quota it just gave back. The set holds
that state for one back-off (the configured bound) and then writes Pending again, which puts
its groups back in the queue.

- The bound is `release_after_seconds` stretched by a factor in [1, 2) drawn from a hash of the
  deployment and the time of the reservation being released. Two sets that started holding at
  the same moment therefore release at different moments (the first one to yield lets the other
  complete), and the draw changes every round, so a collision does not repeat.
- Admitted Workloads are never touched: Ready is never taken back from a serving replica.
- `release_after_seconds <= 0` disables the release.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app import timestamps, vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.intents import SetAdmissionCheck
from app.control.rollout import Action, OrdinalPlan, RolePlan
from app.model.context import DeploymentContext
from app.render import names

# The plan deletes these replicas' Workloads in the same pass: nothing is written on them.
LETTING_GO = (Action.SHED, Action.REPLACE, Action.SUPERSEDE, Action.REBUILD)


@dataclass(frozen=True)
class GangVerdict:
    complete: bool
    have: int
    want: int


def _check_entry(workload: KubeObject) -> dict[str, Any] | None:
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(entry, dict) and entry.get("name") == vocab.ADMISSION_CHECK_NAME:
            return entry
    return None


def _reserved_since(workload: KubeObject) -> str | None:
    """When the Workload's quota reservation began (None while it holds none)."""
    cond = obs.condition(workload, vocab.KUEUE_COND_QUOTA_RESERVED)
    if cond is None or cond.get("status") != vocab.CONDITION_TRUE:
        return None
    return cond.get("lastTransitionTime")


def _time_of(stamp: str | None) -> datetime:
    """The time of a stamp known to parse (the callers filter with _parse): a sort key."""
    when = timestamps.parse(stamp)
    if when is None:
        raise ValueError(f"not a timestamp: {stamp!r}")
    return when


def _seconds_between(start: str | None, end: str) -> float:
    a, b = timestamps.parse(start), timestamps.parse(end)
    if a is None or b is None:
        return 0.0
    return (b - a).total_seconds()


def release_bound(namespace: str, deployment: str, since: str, release_after_seconds: float) -> float:
    """How long this set may hold a partial reservation that started at `since` before it yields."""
    draw = names.fnv64a(f"{namespace}/{deployment}/{since}") / float(1 << 64)
    return release_after_seconds * (1.0 + draw)


def _admissible(plan: RolePlan, entry: OrdinalPlan) -> bool:
    """A group we may let start: on the role's current render, and the role is not held."""
    return entry.up_to_date and plan.hold is None


def verdict(plans: list[RolePlan]) -> GangVerdict:
    """Whether every declared (role, replica) group holds quota after this pass.

    A group counts when it is admitted, or holds quota and may start (an obsolete or held render
    holding quota is not what the set waits for).
    """
    counted = [(plan, p) for plan in plans for p in plan.ordinals if p.action != Action.SHED]
    have = sum(1 for plan, p in counted if p.admitted or (p.reserved and _admissible(plan, p)))
    return GangVerdict(complete=have == len(counted), have=have, want=len(counted))


@dataclass
class _Group:
    name: str
    workload: KubeObject
    check: dict[str, Any]
    # On the current render and not held: may be admitted (see _admissible).
    admissible: bool = True
    why_not: str = ""

    @property
    def admitted(self) -> bool:
        return obs.workload_admitted(self.workload)

    @property
    def reserved(self) -> bool:
        return obs.workload_reserved(self.workload)

    @property
    def state(self) -> str | None:
        return self.check.get("state")


def _groups(ctx: DeploymentContext, plans: list[RolePlan]) -> list[_Group]:
    out = []
    for plan in plans:
        for entry in plan.ordinals:
            if entry.action in LETTING_GO:
                continue
            group = names.pod_group(ctx.namespace, ctx.name, plan.role, entry.ordinal)
            workload = ctx.world.workload(ctx.namespace, group)
            if workload is None or obs.workload_deleting(workload):
                continue
            check = _check_entry(workload)
            if check is None:
                # The Workload's ClusterQueue does not list our check: nothing to decide.
                continue
            why_not = ""
            if plan.hold is not None:
                why_not = f"new replicas of role {plan.role} are held: {plan.hold}"
            elif not entry.up_to_date:
                why_not = f"these Pods are an obsolete render of role {plan.role}; they are replaced, never admitted"
            out.append(_Group(group, workload, check, admissible=not why_not, why_not=why_not))
    return out


def admission_checks(
    ctx: DeploymentContext, plans: list[RolePlan], *, now: str, release_after_seconds: float
) -> list[SetAdmissionCheck]:
    """The check state to write on each of the deployment's Workloads: where the state changes, or
    the reason a group may not be admitted does."""
    joint = len(ctx.md.spec.roles) > 1
    gang = verdict(plans)
    groups = _groups(ctx, plans)
    mode, note = _yield_mode(ctx, groups, joint, gang, now=now, release_after_seconds=release_after_seconds)
    intents: list[SetAdmissionCheck] = []
    for group in groups:
        decision = _decide(group, joint, gang, mode, note)
        if decision is None:
            continue
        state, message = decision
        if group.state == state and (group.check.get("message") == message or group.admissible):
            # The request shows this state already. An admissible group's message only says how far
            # the set is (the deployment's status carries the count): not worth a write on every
            # Workload of the set at each change of the count, nor one racing Kueue's reservation
            # of a new Workload. A held or obsolete group's reason is written.
            continue
        if group.admitted and group.state == vocab.CHECK_STATE_READY and state != vocab.CHECK_STATE_READY:
            # Never take Ready back from an admitted group: that would evict a serving replica.
            continue
        same_state = group.state == state and group.check.get("lastTransitionTime")
        intents.append(SetAdmissionCheck(
            namespace=ctx.namespace,
            workload=group.name,
            resource_version=(group.workload.get("metadata") or {}).get("resourceVersion", ""),
            state=state,
            message=message,
            last_transition_time=group.check["lastTransitionTime"] if same_state else now,
        ))
    return intents


def _yield_mode(ctx: DeploymentContext, groups: list[_Group], joint: bool, gang: GangVerdict, *, now: str,
                release_after_seconds: float) -> tuple[str, str]:
    """"release": yield now; "hold": keep yielding (back-off); "": admit normally."""
    if not joint or gang.complete or release_after_seconds <= 0:
        return "", ""
    waiting = [g for g in groups if not g.admitted]
    held_since = sorted((s for g in waiting if g.reserved and g.state != vocab.CHECK_STATE_RETRY
                         for s in [_reserved_since(g.workload)] if s and timestamps.parse(s)), key=_time_of)
    if held_since:
        oldest = held_since[0]
        held = _seconds_between(oldest, now)
        bound = release_bound(ctx.namespace, ctx.name, oldest, release_after_seconds)
        if held >= bound:
            return "release", (f"{gang.have} of {gang.want} replicas have reserved quota after {int(held)}s; "
                               f"the deployment releases what it holds so that other deployments are not "
                               f"blocked, and queues again in {int(release_after_seconds)}s")
    backing_off = sorted((g.check.get("lastTransitionTime") for g in waiting
                          if g.state == vocab.CHECK_STATE_RETRY and not g.reserved
                          and timestamps.parse(g.check.get("lastTransitionTime"))),
                         key=_time_of)
    if backing_off and _seconds_between(backing_off[0], now) < release_after_seconds:
        return "hold", (f"{gang.have} of {gang.want} replicas have reserved quota; the deployment released its "
                        f"partial reservation and queues again {int(release_after_seconds)}s after "
                        f"{backing_off[0]}")
    return "", ""


def seconds_until_release(ctx: DeploymentContext, plans: list[RolePlan], *, now: str,
                          release_after_seconds: float) -> float | None:
    """How long until this set's wait ends on time rather than on a watched object: its partial
    reservation reaching its release bound, or its back-off ending. None when it waits on nothing
    but Kueue (a reservation, an admission) and Metacontroller's watches bring the next pass."""
    joint = len(ctx.md.spec.roles) > 1
    gang = verdict(plans)
    if not joint or gang.complete or release_after_seconds <= 0:
        return None
    waiting = [g for g in _groups(ctx, plans) if not g.admitted]
    ends = []
    for g in waiting:
        if g.reserved and g.state != vocab.CHECK_STATE_RETRY:
            since = _reserved_since(g.workload)
            if since and timestamps.parse(since):
                bound = release_bound(ctx.namespace, ctx.name, since, release_after_seconds)
                ends.append(bound - _seconds_between(since, now))
        elif g.state == vocab.CHECK_STATE_RETRY and not g.reserved and timestamps.parse(g.check.get("lastTransitionTime")):
            ends.append(release_after_seconds - _seconds_between(g.check.get("lastTransitionTime"), now))
    return max(min(ends), 0.0) if ends else None


def _decide(group: _Group, joint: bool, gang: GangVerdict, mode: str, note: str) -> tuple[str, str] | None:
    """The state for one group, or None to leave its check as it is."""
    if group.admitted:
        return None if group.state == vocab.CHECK_STATE_READY else (vocab.CHECK_STATE_READY, "admitted")
    if group.state == vocab.CHECK_STATE_RETRY and (group.reserved or mode):
        # Kueue evicts a reserved one and resets its check itself; an unreserved one stays
        # inadmissible until the back-off ends.
        return None
    if mode:
        return vocab.CHECK_STATE_RETRY, note
    if not group.admissible:
        return vocab.CHECK_STATE_PENDING, group.why_not
    if not group.reserved:
        if joint:
            return (vocab.CHECK_STATE_PENDING,
                    f"waiting for quota; {gang.have} of {gang.want} replicas have reserved quota")
        return vocab.CHECK_STATE_PENDING, "waiting for quota"
    if not joint:
        return vocab.CHECK_STATE_READY, "quota reserved"
    if gang.complete:
        return vocab.CHECK_STATE_READY, f"all {gang.want} replicas of the deployment have reserved quota"
    return vocab.CHECK_STATE_PENDING, f"{gang.have} of {gang.want} replicas have reserved quota"
