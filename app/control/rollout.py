"""The rollout planner: for each role and replica ordinal, keep, create, replace or shed.

Pure: observed Pods and Workloads plus the role's current render in, desired Pods and intents out.
The rules (docs/kueue.md#rollout-cadence):

- scale-up is immediate: an ordinal nothing occupies is created on the first pass that sees it;
- scale-down sheds the highest ordinals, deleting each departing replica's Pods and its Workload;
- a replica whose render changed is replaced one per role at a time, and only while every replica
  the role declares holds an admitted Workload (a replacement is a fresh admission);
- the availability gate: a Ready replica is turned over only when every *other* replica
  the role declares is Ready, so an edit never takes more than one serving replica of a role down,
  however fast Kueue admits and however often Metacontroller calls; a replica that is not Ready
  serves nothing and is turned over at once, so a rollout that fixes a broken render never stalls
  on the breakage. The gate reads only the request: a view that lags the last answer (a Pod just
  omitted still listed, one just created not yet) shows the turned-over ordinal either as it was
  (the lowest outdated ordinal, chosen again) or as not Ready (which holds every other turnover);
- a replica that is queued (not admitted) on an obsolete render is superseded at once;
- a departed replica (a Pod deleted, evicted, failed, a member of a group that ran missing) is
  rebuilt whole; its standing Workload is deleted. A view that lists none or only some of a group's
  Pods beside its Workload in the slot being filled has not caught up: the Pods are returned under
  the same names and the Workload is left (docs/kueue.md#ready-on-composition);
- the pass that gives an instance up creates its replacement in the ordinal's other pod-group slot,
  admitted only once no Pod of the old one is left (docs/kueue.md#incarnation-slots);
- every new instance of an ordinal is a new incarnation (its Pods annotated with the number, a
  size-1 Pod also named after it, so a replacement never carries a departed Pod's name): the
  ordinal's next incarnation (status.roles[].nextIncarnations) moves past every incarnation a
  request has listed. Informer views only move forward, so once a view has listed incarnation k,
  no later pass creates k again; passes that have not seen the new Pods yet create them under the
  same names (Metacontroller identifies children by name). Departure events are named after it;
- a replica made by a newer render revision (another version of the operator, during an upgrade)
  from the spec as it is now is up to date: kept exactly as it is, never turned over, superseded
  or completed with this version's Pods (docs/operations.md#upgrading-the-operator);
- a group Kueue evicted before it ever ran (our own deadlock release, `Retry`) is not a departure:
  its Pods are still gated and Kueue requeues it as it is.

Whenever a replica's Pods are given up, its Workload is deleted in the same pass (it holds the
quota and Kueue's finalizer on the Pods).
Events: a replica that ran and goes away gets exactly one of ReplicaEvicted, ReplicaLeaving or
ReplicaRestarted, on the pass that decides it or first sees it (while its Workload stands or a Pod
of it is still listed), named after the replica and its incarnation (not after the reason) so that
a repeated pass repeats the name whatever it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from app import vocab
from app.api.objects import KubeObject
from app.control import memory
from app.control import observed as obs
from app.control.departures import delete_unless_deleting as _delete_workload
from app.control.departures import departure_event as _departure_event
from app.control.departures import replica_event as _event
from app.control.departures import workload_occurrence_key as _workload_occurrence_key
from app.control.departures import workload_delete
from app.control.intents import DeleteWorkload, Intent
from app.model.context import DeploymentContext
from app.render import names
from app.render.pod import RoleRender, instance_pods
from app.control.situation import Situation, classify
from app.control.skew import Standing, judge_render
from app.render.revision import effective_revision, pod_spec_generation


class Action(str, Enum):
    KEEP = "keep"
    CREATE = "create"
    WAIT = "wait"  # nothing to return: the ordinal is empty and may not be filled yet
    REPLACE = "replace"  # turnover for a changed render (the rollout cadence)
    SUPERSEDE = "supersede"  # a queued replica on an obsolete render
    REBUILD = "rebuild"  # a departure
    SHED = "shed"  # scale-down


@dataclass
class OrdinalPlan:
    ordinal: int
    action: Action
    pods: list[KubeObject] = field(default_factory=list)  # desired Pods for this ordinal
    up_to_date: bool = False
    admitted: bool = False
    reserved: bool = False
    ready: bool = False
    has_workload: bool = False
    # Some but not all of the instance's Pods exist (a group Kueue cannot compose yet).
    incomplete: bool = False
    # Made by a newer render revision from the current spec: up to date, kept as it is.
    newer: bool = False
    # The pod group (Workload name) of the instance this plan is about.
    group: str = ""
    # A Pod of an earlier incarnation of the ordinal is still listed: the instance is not admitted
    # until it is gone (docs/kueue.md#incarnation-slots).
    earlier_left: bool = False
    # When this pass creates Pods (`pods` holds new ones): the ordinal's listed Pods of earlier
    # incarnations, which must be gone before the new group is admitted.
    stopping_pods: tuple[str, ...] = ()
    # The instance's listed Pods ran: Kueue admitted them once (they lost its scheduling gate).
    ran: bool = False
    note: str = ""


@dataclass
class RolePlan:
    role: str
    ordinals: list[OrdinalPlan] = field(default_factory=list)
    intents: list[Intent] = field(default_factory=list)
    # Why no new replica of this role may start now (the render's hold), None when free.
    hold: str | None = None
    # Per ordinal, the incarnation its next new instance gets (written to status).
    next_incarnations: list[int] = field(default_factory=list)

    def pods(self) -> list[KubeObject]:
        return [pod for plan in self.ordinals for pod in plan.pods]

    def count(self, *actions: Action) -> int:
        return sum(1 for p in self.ordinals if p.action in actions)


def _kept(pod: KubeObject) -> KubeObject:
    child = obs.as_child(pod)
    annotations = dict(child["metadata"].get("annotations") or {})
    annotations.pop(vocab.ANNOTATION_LAST_APPLIED, None)
    child["metadata"]["annotations"] = annotations
    return child


def _earlier_workloads(p: "_RolePass", inst: obs.ObservedInstance | None, own: str) -> list[Intent]:
    """The Workload of an earlier incarnation still listed beside a newer one (the pass that gave it
    up deleted it; this repeats a delete that did not land), unless Kueue already let its Pods go
    (a Workload made again for terminating Pods is left, see _departed)."""
    if inst is None or not inst.earlier:
        return []
    out: list[Intent] = []
    for group in sorted(inst.groups_in_use() - {own}):
        pods = [pod for pod in inst.earlier if obs.pod_group_of(pod) == group]
        if pods and obs.ObservedInstance(inst.ordinal, pods).released:
            continue
        out += _delete_workload(p.ctx, group, p.ctx.world.workload(p.ctx.namespace, group), "replaced")
    return out


def _let_go(entry: OrdinalPlan) -> None:
    """The pass deletes this replica's Workload: it no longer counts as holding quota."""
    entry.admitted = entry.reserved = False



# --- one pass over a role -------------------------------------------------------------------------


@dataclass
class _RolePass:
    """What every rule of one role's pass may read, and the plan it writes."""

    ctx: DeploymentContext
    render: RoleRender
    observed: dict[int, obs.ObservedInstance]
    finalizing: bool
    plan: RolePlan
    previous_desired: int
    admission_gate: bool = False
    not_serving: set[int] = field(default_factory=set)
    ready_turnover_taken: bool = False

    @property
    def role(self) -> Any:
        return self.render.role

    def group(self, ordinal: int) -> str:
        """The pod group of the ordinal's newest listed incarnation; for an empty ordinal, the slot
        its next incarnation is created in (docs/kueue.md#incarnation-slots)."""
        inst = self.observed.get(ordinal)
        if inst is not None and inst.pods:
            return inst.group() or self.slot_group(ordinal, 0)
        # No Pod of it is listed: a Workload standing in either slot holds quota for Pods that are
        # gone, and is freed before the ordinal is refilled.
        upcoming = self.slot_group(ordinal, names.slot_of(self.next_incarnation(ordinal)))
        standing = [g for g in names.pod_groups(self.ctx.namespace, self.ctx.name, self.role.name, ordinal)
                    if self.ctx.world.workload(self.ctx.namespace, g) is not None]
        return upcoming if upcoming in standing or not standing else standing[0]

    def slot_group(self, ordinal: int, slot: int) -> str:
        return names.pod_group(self.ctx.namespace, self.ctx.name, self.role.name, ordinal, slot)

    def slot(self, inst: obs.ObservedInstance) -> int:
        """The slot a listed instance was created in (read off its pod group; 0 when unlabelled)."""
        group = inst.group()
        return next((s for s in range(names.SLOTS) if self.slot_group(inst.ordinal, s) == group), 0)

    def workload(self, ordinal: int) -> KubeObject | None:
        return self.ctx.world.workload(self.ctx.namespace, self.group(ordinal))

    def next_incarnation(self, ordinal: int) -> int:
        values = self.plan.next_incarnations
        return values[ordinal] if ordinal < len(values) else 0

    def event(self, reason: str, ordinal: int, key: str, what: str) -> None:
        self.plan.intents.append(_event(self.ctx, reason, self.role.name, ordinal, key, what))

    def delete_workload(self, ordinal: int, workload: KubeObject | None, why: str) -> None:
        self.plan.intents += _delete_workload(self.ctx, self.group(ordinal), workload, why)


def _admitted_and_whole(p: _RolePass, ordinal: int) -> bool:
    """The cadence guard's test of one declared replica: every member there, admitted, not leaving."""
    inst = p.observed.get(ordinal)
    workload = p.workload(ordinal)
    return (inst is not None and len(inst.pods) == p.role.size and len(inst.members()) == p.role.size
            and not inst.terminating and not inst.finished and obs.workload_admitted(workload)
            and not obs.workload_evicted(workload) and not obs.workload_deleting(workload))


def _serving(p: _RolePass, ordinal: int) -> bool:
    inst = p.observed.get(ordinal)
    return inst is not None and inst.ready(p.role.size)


def may_turn_over(*, serving: bool, held: bool, admission_gate: bool, others_not_serving: bool,
                  ready_turnover_taken: bool) -> bool:
    """The rollout gates (docs/kueue.md#rollout-cadence). A replica that serves nothing goes at once (unless new replicas
    are held); a Ready one only while every declared replica holds an admitted Workload (the
    admission gate), every other one is Ready (the availability gate), and no other Ready replica
    of the role turned over this pass."""
    if not serving:
        return not held
    return admission_gate and not others_not_serving and not ready_turnover_taken


# --- the rules, one per situation -----------------------------------------------------------------


def _gone_undeclared(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
                     workload: KubeObject | None) -> None:
    p.plan.ordinals.remove(entry)  # nothing of this ordinal reads on the API server
    if p.role.replicas <= entry.ordinal < p.previous_desired:
        # The first pass after a scale-down: its Workloads may stand unseen. Deleted by name, once
        # (the status this pass writes no longer declares the ordinal), in every slot.
        p.plan.intents += [DeleteWorkload(p.ctx.namespace, p.slot_group(entry.ordinal, slot), "scale-down")
                           for slot in range(names.SLOTS)]


def _undeclared(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
                workload: KubeObject | None) -> None:
    """Scale-down (or deletion) sheds it: Pods omitted, Workload deleted, ReplicaLeaving."""
    entry.action = Action.SHED
    _let_go(entry)
    # Deleted even when not observed: customize no longer lists a shed ordinal's Workload. One the
    # request shows being deleted already is not deleted again, nor one Kueue made again for Pods it
    # already let go (see _departed).
    released = inst is not None and inst.released
    if not released and (workload is None or not obs.workload_deleting(workload)):
        p.plan.intents.append(workload_delete(p.ctx.namespace, p.group(entry.ordinal), workload,
                                              "deployment deleted" if p.finalizing else "scale-down"))
    if inst is None or not inst.ran or p.finalizing:
        return
    if inst.live:
        p.event(vocab.EVENT_REPLICA_LEAVING, entry.ordinal, inst.occurrence_key(), "is leaving: the role was scaled down")
    elif inst.held_by_kueue:
        # It had departed already (evicted, a Pod deleted) and nothing acted on it yet (its Workload
        # still holds the Pods): say so, under the name a departure pass would use.
        p.plan.intents.append(_departure_event(p.ctx, p.role.name, entry.ordinal, inst, workload))


def _empty_with_workload(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
                         workload: KubeObject | None) -> None:
    """A Workload standing for an empty ordinal holds quota for Pods that are gone (removed by
    force, or before any pass saw them): free it, then refill the ordinal."""
    assert workload is not None
    entry.action = Action.REBUILD
    entry.up_to_date = True
    entry.note = "waiting for the departed replica's Workload to be deleted"
    _let_go(entry)
    key = _workload_occurrence_key(workload, names.pod_groups(p.ctx.namespace, p.ctx.name, p.role.name, entry.ordinal),
                                   p.next_incarnation(entry.ordinal))
    if obs.workload_deleting(workload) or not obs.workload_ran(workload):
        pass  # already being deleted (whoever deleted it decided), or it never served
    elif obs.workload_evicted_while_running(workload):
        p.event(vocab.EVENT_REPLICA_EVICTED, entry.ordinal, key, "was evicted by Kueue and is rebuilt")
    else:
        p.event(vocab.EVENT_REPLICA_RESTARTED, entry.ordinal, key, "lost its Pods and is rebuilt")
    p.delete_workload(entry.ordinal, workload, "departed replica")


def _empty(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
           workload: KubeObject | None) -> None:
    """Scale-up is immediate, a departed ordinal is refilled: unless new replicas are held. An ordinal
    whose Pods the view has not listed yet (UNLISTED: their group's Workload stands) gets them again
    under the same names, which Metacontroller finds already there; their Workload is left alone."""
    entry.up_to_date = True  # nothing obsolete runs here; a hold is reported on its own
    if p.render.hold is not None:
        entry.action = Action.WAIT
        entry.note = p.render.hold
        return
    entry.action = Action.CREATE
    entry.pods = instance_pods(p.ctx, p.render, entry.ordinal, p.next_incarnation(entry.ordinal))


def _departed(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
              workload: KubeObject | None) -> None:
    """The instance is rebuilt whole: Pods omitted, Workload deleted, one departure event."""
    assert inst is not None
    entry.action = Action.REBUILD
    _let_go(entry)
    _refill_beside(p, entry, inst)
    if inst.released:
        # Its Workload was deleted and Kueue let the Pods go; while they terminate (a kubelet that does
        # not answer keeps them for as long as it is away) Kueue makes a new Workload for them at once.
        # Deleting that frees nothing and only starts the loop again, many times a second; the garbage
        # collector removes it with its Pods (docs/kueue.md#what-kueue-does-with-a-group).
        if inst.ran:
            # Whoever deleted the Workload (a user, a script) told nobody: this pass may be the first
            # to see the departure. Named after the incarnation, so when a pass of ours decided it
            # (a turnover, a departure) this is that pass's Event again and creates nothing.
            p.plan.intents.append(_departure_event(p.ctx, p.role.name, entry.ordinal, inst, workload))
        return
    if inst.ran and ((workload is not None and not obs.workload_deleting(workload)) or inst.live):
        p.plan.intents.append(_departure_event(p.ctx, p.role.name, entry.ordinal, inst, workload))
    p.delete_workload(entry.ordinal, workload, "departed replica")


def _superseded(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
                workload: KubeObject | None) -> None:
    """Queued on an obsolete render: superseded at once, so the obsolete render is never admitted."""
    assert inst is not None
    entry.action = Action.SUPERSEDE
    _let_go(entry)
    p.delete_workload(entry.ordinal, workload, "superseded by a newer render")
    _refill_beside(p, entry, inst)


def _incomplete(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
                workload: KubeObject | None) -> None:
    """A group not yet admitted lacks a member (a create that failed): complete it on the render it
    was started with; never mix renders in one group."""
    assert inst is not None
    entry.incomplete = True
    # Under the spec generation its listed members were created with: they are returned as created,
    # and a missing member joins them under the same one (docs/operations.md#upgrading-the-operator).
    wanted = instance_pods(p.ctx, p.render, entry.ordinal, inst.incarnation(), _spec_generation(inst),
                           slot=p.slot(inst))
    have = inst.members()
    ours = entry.up_to_date and not entry.newer
    if ours:
        entry.pods = [pod for member, pod in enumerate(wanted) if member in have]
    else:
        entry.pods = [_kept(pod) for pod in inst.pods]
    adding = ours and p.render.hold is None
    if adding:
        entry.pods += [pod for member, pod in enumerate(wanted) if member not in have]
        entry.stopping_pods = tuple(map(obs.pod_name, inst.earlier))
    entry.action = Action.CREATE if adding else Action.KEEP


def _current(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
             workload: KubeObject | None) -> None:
    """On the current render: returned exactly as rendered (byte-identical to what was created)."""
    assert inst is not None
    entry.action = Action.KEEP
    entry.pods = instance_pods(p.ctx, p.render, entry.ordinal, inst.incarnation(), _spec_generation(inst),
                               slot=p.slot(inst))
    entry.ready = inst.ready(p.role.size)


def _spec_generation(inst: obs.ObservedInstance) -> int | None:
    """The spec generation the instance's Pods were rendered from (None: unmarked, the deployment's own)."""
    return max((g for g in map(pod_spec_generation, inst.pods) if g is not None), default=None)


def _newer(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
           workload: KubeObject | None) -> None:
    """Made by a newer render revision from the current spec (docs/operations.md#upgrading-the-operator):
    returned exactly as it is, whatever this version would render."""
    assert inst is not None
    entry.action = Action.KEEP
    entry.pods = [_kept(pod) for pod in inst.pods]
    entry.ready = inst.ready(p.role.size)


def _obsolete(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
              workload: KubeObject | None) -> None:
    """A turnover candidate: replaced when the gates allow, else kept as it is."""
    _turn_over(p, entry, inst, workload, "is restarted to roll out a changed render", "rollout")


def _drifted(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None,
             workload: KubeObject | None) -> None:
    """Kueue re-placed the group after a node failure while its Pods could not move, so its
    accounting of the node they run on is wrong (docs/kueue.md): the replica is replaced like a
    rollout's, under the same gates, so that what Kueue accounts matches what runs again."""
    _turn_over(p, entry, inst, workload, "runs on a node Kueue no longer places it on (Kueue re-placed it "
               "after a node failure) and is restarted where Kueue places it", "placement drift")


def _turn_over(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance | None, workload: KubeObject | None,
               what: str, why: str) -> None:
    assert inst is not None
    serving = inst.ready(p.role.size)
    turn_over = may_turn_over(serving=serving, held=p.render.hold is not None, admission_gate=p.admission_gate,
                              others_not_serving=bool(p.not_serving - {entry.ordinal}),
                              ready_turnover_taken=p.ready_turnover_taken)
    if not turn_over:
        entry.action = Action.KEEP
        entry.pods = [_kept(pod) for pod in inst.pods]
        entry.ready = serving
        return
    p.ready_turnover_taken = p.ready_turnover_taken or serving
    entry.action = Action.REPLACE
    _let_go(entry)
    p.event(vocab.EVENT_REPLICA_RESTARTED, entry.ordinal, inst.occurrence_key(), what)
    p.delete_workload(entry.ordinal, workload, why)
    _refill_beside(p, entry, inst)


def _refill_beside(p: _RolePass, entry: OrdinalPlan, inst: obs.ObservedInstance) -> None:
    """The turnover, pipelined (docs/kueue.md#incarnation-slots): the pass that gives an instance up
    creates its replacement at once, as the ordinal's next incarnation in the other pod-group slot,
    so Kueue composes the new group and queues it for quota while the old one stops; our check
    admits it only once no Pod of the old one is left. Not when new replicas are held, nor while that
    slot is still taken (a Pod or a Workload of an older incarnation in it): the ordinal is then
    refilled once it is empty, as before."""
    if p.render.hold is not None:
        return
    incarnation = p.next_incarnation(entry.ordinal)
    group = p.slot_group(entry.ordinal, names.slot_of(incarnation))
    standing = p.ctx.world.workload(p.ctx.namespace, group)
    if group in inst.groups_in_use() or standing is not None:
        return
    entry.pods = instance_pods(p.ctx, p.render, entry.ordinal, incarnation)
    entry.stopping_pods = tuple(map(obs.pod_name, [*inst.pods, *inst.earlier]))


RULES = {
    Situation.GONE_UNDECLARED: _gone_undeclared,
    Situation.UNDECLARED: _undeclared,
    Situation.EMPTY_WITH_WORKLOAD: _empty_with_workload,
    Situation.EMPTY: _empty,
    Situation.UNLISTED: _empty,
    Situation.DEPARTED: _departed,
    Situation.SUPERSEDED: _superseded,
    Situation.INCOMPLETE: _incomplete,
    Situation.CURRENT: _current,
    Situation.NEWER: _newer,
    Situation.OBSOLETE: _obsolete,
    Situation.DRIFTED: _drifted,
}


def plan_role(
    ctx: DeploymentContext,
    render: RoleRender,
    observed: dict[int, obs.ObservedInstance],
    *,
    finalizing: bool = False,
) -> RolePlan:
    """Classify every ordinal the role has or had, and apply that situation's rule."""
    role = render.role
    replicas = 0 if finalizing else role.replicas
    plan = RolePlan(role.name, hold=render.hold)
    plan.next_incarnations = memory.next_incarnations(memory.previous_incarnations(ctx, role.name), observed)
    p = _RolePass(ctx, render, observed, finalizing, plan, previous_desired=memory.previous_desired(ctx, role.name))
    p.admission_gate = render.hold is None and all(_admitted_and_whole(p, o) for o in range(replicas))
    p.not_serving = {o for o in range(replicas) if not _serving(p, o)}
    revision, generation = effective_revision(ctx.options.render_rehearsal), ctx.md.metadata.generation
    # Ordinals the last status declared are looked at too: after a scale-down, customize no longer
    # lists their Workloads, and one may stand without Pods (its Pods removed by force).
    for ordinal in sorted(set(range(max(role.replicas, p.previous_desired))) | set(observed)):
        group = p.group(ordinal)
        workload = p.workload(ordinal)
        inst = observed.get(ordinal)
        entry = OrdinalPlan(ordinal, Action.KEEP, admitted=obs.workload_admitted(workload),
                            reserved=obs.workload_reserved(workload), has_workload=workload is not None,
                            group=group, earlier_left=inst is not None and bool(inst.earlier),
                            ran=inst is not None and inst.ran)
        plan.intents += _earlier_workloads(p, inst, group)
        if obs.workload_deleting(workload):
            _let_go(entry)
        if inst is not None and inst.pods:
            standing = judge_render(inst, fingerprint=render.fingerprint, revision=revision, generation=generation)
            entry.up_to_date = standing is not Standing.OBSOLETE
            entry.newer = standing is Standing.NEWER
        plan.ordinals.append(entry)
        upcoming_slot = group == p.slot_group(ordinal, names.slot_of(p.next_incarnation(ordinal)))
        situation = classify(declared=ordinal < replicas, inst=inst, workload=workload,
                             fingerprint=render.fingerprint, size=role.size, held=render.hold is not None,
                             revision=revision, generation=generation, upcoming_slot=upcoming_slot)
        RULES[situation](p, entry, inst, workload)
    return plan
