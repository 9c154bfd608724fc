"""Joint admission: our Kueue AdmissionCheck verdict for every pod group of a deployment.

Every replica is its own Kueue Workload; a multi-role deployment must be admitted as a set, or
a full pool admits prefillers and strands them waiting for decoders that never arrive. Kueue
admits a Workload in the same write that reserves its quota when every check is already Ready,
so Ready is written only on a Workload that holds quota, and (two or more roles) only once every
declared (role, replica) group of the deployment holds quota (docs/kueue.md#joint-admission).

A single-role deployment's groups are independent: each is a set of one, so an admissible group is
Ready as soon as its Workload exists, and Kueue admits it in the write that reserves its quota.

The set is every declared group, with no exemption: a group being refilled (a rollout's
replacement, a departed replica's rebuild) counts as not holding quota until its new Workload
reserves. This is stricter than exempting the replacement slot and never earlier; it costs
nothing to a rollout, which turns a replica over only while every other group is admitted.

Deadlock release (docs/kueue.md#deadlock-release). Two sets can each hold part of a pool while
waiting for the rest.

- **Who yields**: a set holding part of its pool (some of its groups hold quota, not all) says so in
  its status (`status.jointAdmission`: since when, have of want, its queues). Once its oldest
  reservation still waiting is `release_after_seconds` old, the hook handler hands the pass every
  deployment's record (one list), and the set yields only if it comes first among the holders
  sharing a queue with it, by the share of its own want it holds (smaller first), then creation
  time (newer first), then UID. Every pass computes the same order, so of several sets that reach
  their bound in the same second exactly one yields; a set that is not first waits for the one that
  is (which reaches its own bound no later than one bound after it started holding). A set alone
  yields at its bound.
- **How**: every Workload of the set that is not admitted is deactivated (`spec.active: false`) with
  our `released-at` annotation. Kueue evicts the reserved ones (their quota is released, our check
  reset to Pending) and takes them all out of its queue; an eviction and a deactivation are both
  requeue triggers for every Workload Kueue parked in the ClusterQueue, so the freed quota goes to
  the others. The check is never set to Retry: Kueue parks a Workload whose check says Retry and
  does not look at it again when the check goes back to Pending.
- **Back-off**: one bound after `released-at` the set activates the Workloads it deactivated again
  (`spec.active: true`, annotation removed), with our check reading Pending first. `spec.active`
  going true is a spec change and Kueue marks the Workload `Requeued` (`Reactivated`): both move a
  parked Workload back into the queue, which a check's change does not.
- Admitted Workloads are never touched: Ready is never taken back from a serving replica; only a
  Workload carrying our annotation is ever activated again.
- `release_after_seconds <= 0` disables the release (and activates what an earlier release left).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from fractions import Fraction
from typing import Any, Iterable

from app import timestamps, vocab
from app.api.objects import KubeObject
from app.control import composition
from app.control import observed as obs
from app.control.intents import Intent, SetAdmissionCheck, SetWorkloadActive
from app.control.rollout import Action, OrdinalPlan, RolePlan
from app.model.context import DeploymentContext
from app.render import names

# The plan deletes these replicas' Workloads in the same pass: nothing is written on them.
LETTING_GO = (Action.SHED, Action.REPLACE, Action.SUPERSEDE, Action.REBUILD)
# A set waiting for another to yield comes back this often once the other's bound has passed (its
# pass may lag); before that, at the moment it passes.
OVERDUE_RIVAL_SECONDS = 5.0

# A replacement waits beside its predecessor's stopping Pods for seconds; that reason is written on
# its Workload only once it has waited this long (docs/kueue.md#incarnation-slots).
STOPPING_REASON_AFTER_SECONDS = 30.0


@dataclass(frozen=True)
class GangVerdict:
    complete: bool
    have: int
    want: int


@dataclass(frozen=True)
class Holder:
    """A deployment holding part of its pool, as its `status.jointAdmission` says."""

    namespace: str
    name: str
    uid: str
    created: str
    have: int
    want: int
    holding_since: str
    cluster_queues: frozenset[str] = frozenset()
    local_queues: frozenset[str] = frozenset()
    # Set (and holding_since "") while it backs off after yielding: the others keep what they hold.
    released_at: str = ""

    def key(self) -> tuple[Fraction, float, str]:
        """The yield order: the smaller share of its own want first, then the newer deployment, then
        the UID. Every pass computes the same order from the same records."""
        created = timestamps.parse(self.created)
        return (Fraction(self.have, max(self.want, 1)), -(created.timestamp() if created else 0.0), self.uid)

    def shares_a_queue(self, other: Holder) -> bool:
        return bool(self.cluster_queues & other.cluster_queues or self.local_queues & other.local_queues)

    def record(self) -> KubeObject:
        """`status.jointAdmission`."""
        when = {"releasedAt": self.released_at} if self.released_at else {"holdingSince": self.holding_since}
        return {**when, "have": self.have, "want": self.want,
                "clusterQueues": sorted(self.cluster_queues), "localQueues": sorted(self.local_queues)}


def holders(deployments: Iterable[KubeObject]) -> list[Holder]:
    """Every deployment whose status says it holds part of its pool (a listed ModelDeployment is read,
    never trusted: a malformed record is skipped)."""
    out = []
    for md in deployments:
        meta = md.get("metadata") or {}
        record = (md.get("status") or {}).get("jointAdmission")
        if not isinstance(record, dict) or meta.get("deletionTimestamp"):
            continue
        have, want = record.get("have"), record.get("want")
        since, released = record.get("holdingSince"), record.get("releasedAt")
        stamp = released if released is not None else since
        if not (isinstance(have, int) and isinstance(want, int) and want > 0 and isinstance(stamp, str)
                and timestamps.parse(stamp)):
            continue
        cqs, lqs = (frozenset(q for q in record.get(k) or [] if isinstance(q, str)) for k in ("clusterQueues", "localQueues"))
        yielded = released is not None
        out.append(Holder(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
                          str(meta.get("creationTimestamp") or ""), have, want, "" if yielded else stamp, cqs, lqs,
                          released_at=stamp if yielded else ""))
    return out


@dataclass
class GangDecision:
    """What the pass does about joint admission: check writes and releases (`intents`), the
    `status.jointAdmission` record (None while the set holds no part of its pool), when to come
    back (`wait`, seconds; None: a watched object brings the next pass), and `needs_peers`: the set
    reached its bound and cannot decide whether it yields without the other holders' records (the
    hook handler lists them and runs the pass again)."""

    intents: list[Intent] = field(default_factory=list)
    record: KubeObject | None = None
    wait: float | None = None
    needs_peers: bool = False


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


def _admissible(plan: RolePlan, entry: OrdinalPlan) -> bool:
    """A group we may let start: on the role's current render, the role is not held, and its Pods
    have not run already under an admission its Workload does not hold (see _ran_unadmitted)."""
    return entry.up_to_date and plan.hold is None and not _ran_unadmitted(entry)


def _ran_unadmitted(entry: OrdinalPlan) -> bool:
    """Its listed Pods ran, so Kueue admitted them once, yet its Workload is not admitted: Kueue
    stops the Pods of a Workload it evicts or that is deleted, and composes a new Workload for Pods
    still stopping, so this is that new one, or the view has not caught up with their stop. Admitting
    it would let the departed incarnation hold quota beside its replacement (docs/kueue.md#joint-admission,
    rule 4)."""
    return entry.ran and not entry.admitted


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
    # Not admissible only while an earlier incarnation's Pods stop (a wait of seconds).
    behind_predecessor: bool = False

    @property
    def admitted(self) -> bool:
        return obs.workload_admitted(self.workload)

    @property
    def reserved(self) -> bool:
        return obs.workload_reserved(self.workload)

    @property
    def state(self) -> str | None:
        return self.check.get("state")

    @property
    def active(self) -> bool:
        return (self.workload.get("spec") or {}).get("active") is not False

    @property
    def released_at(self) -> str | None:
        """Our release's stamp: this Workload was deactivated by our deadlock release (None: it was not)."""
        stamp = ((self.workload.get("metadata") or {}).get("annotations") or {}).get(vocab.ANNOTATION_GANG_RELEASED_AT)
        return stamp if isinstance(stamp, str) else None

    @property
    def uid(self) -> str:
        return str((self.workload.get("metadata") or {}).get("uid") or "")

    @property
    def resource_version(self) -> str:
        return str((self.workload.get("metadata") or {}).get("resourceVersion") or "")

    @property
    def local_queue(self) -> str:
        queue = (self.workload.get("spec") or {}).get("queueName")
        namespace = (self.workload.get("metadata") or {}).get("namespace")
        return f"{namespace}/{queue}" if isinstance(queue, str) and queue else ""

    @property
    def cluster_queue(self) -> str:
        admission = (self.workload.get("status") or {}).get("admission") or {}
        queue = admission.get("clusterQueue") if isinstance(admission, dict) else None
        return queue if isinstance(queue, str) else ""


def _groups(ctx: DeploymentContext, plans: list[RolePlan]) -> list[_Group]:
    out = []
    for plan in plans:
        for entry in plan.ordinals:
            if entry.action in LETTING_GO:
                continue
            group = entry.group
            workload = ctx.world.workload(ctx.namespace, group)
            if workload is None or obs.workload_deleting(workload):
                continue
            check = obs.our_check(workload)
            if check is None:
                # The Workload's ClusterQueue does not list our check: nothing to decide.
                continue
            why_not, behind_predecessor = "", False
            if plan.hold is not None:
                why_not = f"new replicas of role {plan.role} are held: {plan.hold}"
            elif not entry.up_to_date:
                why_not = f"these Pods are an obsolete render of role {plan.role}; they are replaced, never admitted"
            elif _ran_unadmitted(entry):
                why_not = (f"replica {names.instance(ctx.name, plan.role, entry.ordinal)} ran under an earlier "
                           f"admission and is stopping; this Workload is never admitted")
            elif entry.earlier_left:
                why_not = (f"replica {names.instance(ctx.name, plan.role, entry.ordinal)} replaces an earlier instance "
                           f"whose Pods are still stopping; it is admitted once they are gone")
                behind_predecessor = True
            out.append(_Group(group, workload, check, admissible=not why_not, why_not=why_not,
                              behind_predecessor=behind_predecessor))
    return out


def decide(ctx: DeploymentContext, plans: list[RolePlan], *, now: str, release_after_seconds: float,
           peers: list[Holder] | None = None) -> GangDecision:
    """The pass's joint admission: the check state to write on each of the deployment's Workloads
    (where the state changes, or the reason a group may not be admitted does), and the deadlock
    release's steps. `peers`: every deployment's holding record, listed by the hook handler once
    this set reached its bound (None: not listed)."""
    joint = len(ctx.md.spec.roles) > 1
    gang = verdict(plans)
    groups = _groups(ctx, plans)
    decision = GangDecision()
    ours = [g for g in groups if g.released_at is not None and not g.admitted]
    if ours:
        # Our release's back-off: the Workloads it deactivated come back once it is over.
        decision.intents += _back_off(ctx, ours, now=now, release_after_seconds=release_after_seconds, decision=decision)
        if decision.wait is not None:
            decision.record = _yielded(ctx, groups, gang, ours).record()
    elif joint and not gang.complete and release_after_seconds > 0:
        me = _holding(ctx, groups, gang)
        if me is not None:
            decision.record = me.record()
            held = _seconds_between(me.holding_since, now)
            if held < release_after_seconds:
                decision.wait = release_after_seconds - held
            elif peers is None:
                decision.needs_peers = True
            else:
                rivals = [p for p in peers if p.uid != me.uid and p.shares_a_queue(me)]
                yielded = sorted((p.released_at for p in rivals if p.released_at), key=_time_of)
                first = _first(me, rivals)
                if yielded:
                    # Another set sharing a queue released its part this round: keep what this one
                    # holds (the quota it freed may complete it) until that set queues again.
                    due = _seconds_between(now, yielded[-1]) + release_after_seconds
                elif first is me:
                    decision.record = replace(me, holding_since="", released_at=now).record()
                    decision.intents += _release(ctx, groups, now=now)
                    return decision
                else:
                    due = _seconds_between(now, first.holding_since) + release_after_seconds
                decision.wait = due if due > 0 else OVERDUE_RIVAL_SECONDS
    decision.intents += _checks(ctx, [g for g in groups if g.active and g.released_at is None], joint, gang, now=now)
    if not joint:
        decision.intents += composition.ready_on_composition(ctx, plans)
    return decision


def _holding(ctx: DeploymentContext, groups: list[_Group], gang: GangVerdict) -> Holder | None:
    """This set as a holder of part of its pool: some group that may start holds quota, not admitted
    yet (None when none does: a set waiting for its first reservation holds nothing)."""
    waiting = sorted((s for g in groups if g.active and not g.admitted and g.reserved and g.admissible
                      and g.state != vocab.CHECK_STATE_RETRY
                      for s in [_reserved_since(g.workload)] if s and timestamps.parse(s)), key=_time_of)
    if not waiting:
        return None
    meta = ctx.md.metadata
    return Holder(ctx.namespace, ctx.name, meta.uid, meta.creation_timestamp or "", gang.have, gang.want, waiting[0],
                  frozenset(g.cluster_queue for g in groups if g.reserved and g.cluster_queue),
                  frozenset(g.local_queue for g in groups if g.local_queue))


def _first(me: Holder, peers: list[Holder]) -> Holder:
    """The holder that yields first among this set and the holders sharing a queue with it."""
    rivals = [p for p in peers if p.uid != me.uid and p.shares_a_queue(me) and not p.released_at]
    return min([me, *rivals], key=Holder.key)


def _yielded(ctx: DeploymentContext, groups: list[_Group], gang: GangVerdict, ours: list[_Group]) -> Holder:
    """This set while it backs off after yielding: what it released and in which queues (the
    ClusterQueues its reservations were in come from the record it wrote when it released)."""
    previous = (ctx.md.status or {}).get("jointAdmission") if isinstance(ctx.md.status, dict) else None
    held = {q for q in (previous or {}).get("clusterQueues") or [] if isinstance(q, str)}
    stamps = sorted((g.released_at for g in ours if g.released_at and timestamps.parse(g.released_at)), key=_time_of)
    meta = ctx.md.metadata
    return Holder(ctx.namespace, ctx.name, meta.uid, meta.creation_timestamp or "", gang.have, gang.want, "",
                  frozenset(held | {g.cluster_queue for g in groups if g.reserved and g.cluster_queue}),
                  frozenset(g.local_queue for g in groups if g.local_queue), released_at=stamps[0] if stamps else "")


def _release(ctx: DeploymentContext, groups: list[_Group], *, now: str) -> list[Intent]:
    """Yield: every Workload of the set that is not admitted is deactivated, stamped with `now`."""
    return [SetWorkloadActive(namespace=ctx.namespace, workload=g.name, uid=g.uid, resource_version=g.resource_version,
                              active=False, released_at=now)
            for g in groups if not g.admitted and g.active]


def _back_off(ctx: DeploymentContext, ours: list[_Group], *, now: str, release_after_seconds: float,
              decision: GangDecision) -> list[Intent]:
    """While the back-off runs, nothing; then our check reads Pending on each Workload we deactivated
    (Kueue's scheduler parks a Workload whose check says anything else) and, once it does, the
    Workload is activated again, which Kueue requeues."""
    stamps = sorted((g.released_at for g in ours if timestamps.parse(g.released_at)), key=_time_of)
    since = stamps[0] if stamps else None
    left = release_after_seconds - _seconds_between(since, now) if since else 0.0
    if release_after_seconds > 0 and left > 0:
        decision.wait = left
        return []
    intents: list[Intent] = []
    for g in ours:
        if g.state != vocab.CHECK_STATE_PENDING:
            intents.append(SetAdmissionCheck(
                namespace=ctx.namespace, workload=g.name, resource_version=g.resource_version,
                state=vocab.CHECK_STATE_PENDING, message="queued again after releasing a partial reservation",
                last_transition_time=now))
        else:  # (active already, when someone else activated it: then only our mark goes)
            intents.append(SetWorkloadActive(namespace=ctx.namespace, workload=g.name, uid=g.uid,
                                             resource_version=g.resource_version, active=True))
    return intents


def _checks(ctx: DeploymentContext, groups: list[_Group], joint: bool, gang: GangVerdict, *,
            now: str) -> list[Intent]:
    intents: list[Intent] = []
    for group in groups:
        decision = _decide(group, joint, gang)
        if decision is None:
            continue
        state, message = decision
        if group.state == state and group.behind_predecessor and _waited(group, now) < STOPPING_REASON_AFTER_SECONDS:
            # Kueue's own Pending holds it already; a reason written for a wait of seconds would be
            # one more Workload write (and event for Kueue and Metacontroller) per turnover.
            continue
        if group.state == state and (group.check.get("message") == message or group.admissible):
            # The request shows this state already. An admissible group's message only says how far
            # the set is (the deployment's status carries the count): not worth a write on every
            # Workload of the set at each change of the count, nor one racing Kueue's reservation
            # of a new Workload. A held or obsolete group's reason is written.
            continue
        if group.admitted and group.state == vocab.CHECK_STATE_READY and state != vocab.CHECK_STATE_READY:
            # Never take Ready back from an admitted group: that would evict a serving replica.
            continue
        if group.behind_predecessor and group.state == vocab.CHECK_STATE_READY:
            # Whoever wrote Ready read the predecessor's Pods gone (a follow-up reads them live,
            # docs/kueue.md#ready-on-composition), and they never come back: this pass's view lags.
            continue
        same_state = group.state == state and group.check.get("lastTransitionTime")
        intents.append(SetAdmissionCheck(
            namespace=ctx.namespace,
            workload=group.name,
            resource_version=group.resource_version,
            state=state,
            message=message,
            last_transition_time=group.check["lastTransitionTime"] if same_state else now,
        ))
    return intents


def _waited(group: _Group, now: str) -> float:
    """Seconds since the group's Workload was made (0 when it does not say)."""
    created = (group.workload.get("metadata") or {}).get("creationTimestamp")
    return _seconds_between(created, now) if isinstance(created, str) else 0.0


def _decide(group: _Group, joint: bool, gang: GangVerdict) -> tuple[str, str] | None:
    """The state for one group, or None to leave its check as it is."""
    if group.admitted:
        return None if group.state == vocab.CHECK_STATE_READY else (vocab.CHECK_STATE_READY, "admitted")
    if group.state == vocab.CHECK_STATE_RETRY and group.reserved:
        # Kueue evicts it and resets its check itself (a Retry an earlier version wrote).
        return None
    if not group.admissible:
        return vocab.CHECK_STATE_PENDING, group.why_not
    if not joint:
        # A set of one: admitted the moment it fits (docs/kueue.md#joint-admission).
        return vocab.CHECK_STATE_READY, composition.SINGLE_ROLE_READY
    if not group.reserved:
        return (vocab.CHECK_STATE_PENDING,
                f"waiting for quota; {gang.have} of {gang.want} replicas have reserved quota")
    if gang.complete:
        return vocab.CHECK_STATE_READY, f"all {gang.want} replicas of the deployment have reserved quota"
    return vocab.CHECK_STATE_PENDING, f"{gang.have} of {gang.want} replicas have reserved quota"
