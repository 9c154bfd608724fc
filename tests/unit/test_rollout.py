"""The rollout planner's rules and the joint-admission verdicts, each tested directly (tables).

The simulator (tests/sim) plays them together under Metacontroller's and Kueue's behaviour; here
every rule is pinned on its own: the classification of one ordinal, the turnover gates, the
incarnation counter, and gang's release bound and per-group decisions.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import vocab
from app.api.v1 import ModelDeployment
from app.control import gang
from app.control import observed as obs
from app.control.departures import workload_occurrence_key
from app.control.memory import next_incarnations
from app.control.rollout import Action, OrdinalPlan, RolePlan, Situation, classify, may_turn_over
from app.model.context import RenderOptions, build_context
from app.render import names
from app.world import World, related_map
from tests.conftest import example, world_objects

FP = "fp-current"


def pod(member: int = 0, *, fingerprint: str = FP, ready: bool = True, gated: bool = False,
        deleting: bool = False, phase: str = "Running", incarnation: int | None = None) -> dict[str, Any]:
    annotations = {vocab.ANNOTATION_FINGERPRINT: fingerprint}
    if incarnation is not None:
        annotations[vocab.ANNOTATION_INCARNATION] = str(incarnation)
    meta: dict[str, Any] = {"name": f"p-m{member}", "uid": f"uid-{member}",
                            "labels": {vocab.LABEL_MEMBER_INDEX: str(member)}, "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    spec: dict[str, Any] = {"schedulingGates": [{"name": vocab.KUEUE_SCHEDULING_GATE}]} if gated else {}
    return {"metadata": meta, "spec": spec,
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def instance(*pods: dict[str, Any]) -> obs.ObservedInstance:
    return obs.ObservedInstance(0, list(pods))


def workload(*conditions: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "wl", "uid": "wl-uid"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


ADMITTED = workload("QuotaReserved", "Admitted")
RESERVED = workload("QuotaReserved")


@pytest.mark.parametrize("case, declared, inst, wl, size, held, expected", [
    ("scaled away, nothing left", False, None, None, 1, False, Situation.GONE_UNDECLARED),
    ("scaled away, Pods left", False, instance(pod()), ADMITTED, 1, False, Situation.UNDECLARED),
    ("scaled away, only the Workload", False, None, ADMITTED, 1, False, Situation.UNDECLARED),
    ("empty ordinal", True, None, None, 1, False, Situation.EMPTY),
    ("empty ordinal, held render", True, None, None, 1, True, Situation.EMPTY),
    ("Pods gone, Workload stands", True, None, ADMITTED, 1, False, Situation.EMPTY_WITH_WORKLOAD),
    ("a Pod deleted", True, instance(pod(deleting=True)), ADMITTED, 1, False, Situation.DEPARTED),
    ("a Pod failed", True, instance(pod(phase="Failed", ready=False)), ADMITTED, 1, False, Situation.DEPARTED),
    ("evicted after running", True, instance(pod()), workload("Evicted"), 1, False, Situation.DEPARTED),
    ("evicted while gated is requeued", True, instance(pod(gated=True, ready=False)), workload("Evicted"), 1,
     False, Situation.CURRENT),
    ("its Workload being deleted", True, instance(pod()), workload("Admitted", deleting=True), 1, False,
     Situation.DEPARTED),
    ("admitted group lost a member", True, instance(pod(0)), ADMITTED, 2, False, Situation.DEPARTED),
    # A view that does not list every member yet lists the others still gated: it lags.
    ("admitted, a member not listed yet", True, instance(pod(0, gated=True, ready=False)), ADMITTED, 2, False,
     Situation.INCOMPLETE),
    ("admitted obsolete group lost a gated member", True,
     instance(pod(0, fingerprint="old", gated=True, ready=False)), ADMITTED, 2, False, Situation.DEPARTED),
    ("queued on an obsolete render", True, instance(pod(fingerprint="old", gated=True, ready=False)), RESERVED, 1,
     False, Situation.SUPERSEDED),
    ("queued obsolete while held stays", True, instance(pod(fingerprint="old", gated=True, ready=False)), RESERVED,
     1, True, Situation.OBSOLETE),
    ("queued group lacks a member", True, instance(pod(0, gated=True, ready=False)), RESERVED, 2, False,
     Situation.INCOMPLETE),
    ("on the current render", True, instance(pod()), ADMITTED, 1, False, Situation.CURRENT),
    ("admitted on an obsolete render", True, instance(pod(fingerprint="old")), ADMITTED, 1, False,
     Situation.OBSOLETE),
])
def test_classify_names_the_situation_of_one_ordinal(case, declared, inst, wl, size, held, expected):
    assert classify(declared=declared, inst=inst, workload=wl, fingerprint=FP, size=size, held=held) == expected, case


@pytest.mark.parametrize("wl, upcoming_slot, expected", [
    # Its group's Workload in the slot being filled: the Pods a pass created, not listed yet.
    (ADMITTED, True, Situation.UNLISTED),
    # Not admitted: it may be an older incarnation's, made again by Kueue from Pods that were stopping.
    (RESERVED, True, Situation.EMPTY_WITH_WORKLOAD),
    (workload("Admitted", deleting=True), True, Situation.EMPTY_WITH_WORKLOAD),
    # In the other slot: an earlier incarnation's Workload left without Pods.
    (ADMITTED, False, Situation.EMPTY_WITH_WORKLOAD),
])
def test_an_empty_ordinal_beside_the_upcoming_slots_workload_is_a_view_that_lags(wl, upcoming_slot, expected):
    assert classify(declared=True, inst=None, workload=wl, fingerprint=FP, size=1, held=False,
                    upcoming_slot=upcoming_slot) == expected


@pytest.mark.parametrize("serving, held, admission_gate, others_not_serving, taken, expected", [
    # A replica that serves nothing goes at once, whatever the others do: a fix never stalls.
    (False, False, False, True, True, True),
    (False, True, True, False, False, False),  # ... unless new replicas are held (nothing could replace it)
    # A Ready replica: only with every replica admitted, every other one Ready, one per pass.
    (True, False, True, False, False, True),
    (True, False, False, False, False, False),
    (True, False, True, True, False, False),
    (True, False, True, False, True, False),
])
def test_the_turnover_gates(serving, held, admission_gate, others_not_serving, taken, expected):
    assert may_turn_over(serving=serving, held=held, admission_gate=admission_gate,
                         others_not_serving=others_not_serving, ready_turnover_taken=taken) is expected


@pytest.mark.parametrize("previous, observed, expected", [
    ([], {}, []),
    ([], {0: [None], 2: [None]}, [1, 0, 1]),  # every listed incarnation is passed
    ([3], {0: [1]}, [3]),  # never below what status carried (a lagging view)
    ([1, 5], {1: [5]}, [1, 6]),
    ([2, 0, 0], {}, [2]),  # trailing zeros dropped: a status that never changes for nothing
    ([], {0: []}, []),  # an ordinal with no Pod listed moves nothing
])
def test_next_incarnations_move_past_every_listed_incarnation(previous, observed, expected):
    insts = {o: obs.ObservedInstance(o, [pod(incarnation=k) for k in ks]) for o, ks in observed.items()}
    assert next_incarnations(previous, insts) == expected


@pytest.mark.parametrize("name, upcoming, expected", [
    ("g-s0", 0, "incarnation:0"),  # created in slot 0, never listed
    ("g-s1", 0, "workload:wl-uid"),  # nothing was ever created in slot 1
    ("g-s0", 1, "incarnation:0"),  # 0 was listed (the next is 1): its Workload
    ("g-s1", 1, "incarnation:1"),  # 1 created in slot 1, not listed yet
    ("g-s0", 4, "incarnation:4"),
    ("g-s1", 4, "incarnation:3"),
    ("elsewhere", 3, "workload:wl-uid"),
])
def test_a_workload_without_listed_pods_is_named_after_the_newest_incarnation_of_its_slot(name, upcoming, expected):
    wl = {"metadata": {"name": name, "uid": "wl-uid"}}
    assert workload_occurrence_key(wl, ["g-s0", "g-s1"], upcoming) == expected


# --- gang ------------------------------------------------------------------------------------------


def holder(name: str, have: int, want: int, *, created: str = "2026-11-30T00:00:00Z", uid: str = "",
           cqs: tuple[str, ...] = ("h20",)) -> gang.Holder:
    return gang.Holder("team-a", name, uid or f"uid-{name}", created, have, want, "2026-11-30T00:00:00Z",
                       frozenset(cqs), frozenset())


def test_the_yield_order_is_the_smaller_share_then_the_newer_deployment_then_the_uid():
    a, b = holder("a", 3, 4), holder("b", 1, 4)
    assert gang._first(a, [a, b]) is b and gang._first(b, [a, b]) is b  # both passes agree: b yields
    older, newer = holder("old", 2, 4), holder("new", 1, 2, created="2026-11-30T00:00:05Z")
    assert gang._first(older, [newer]) is newer and gang._first(newer, [older]) is newer  # same share
    x, y = holder("x", 1, 4, uid="uid-1"), holder("y", 1, 4, uid="uid-2")
    assert gang._first(x, [y]) is x and gang._first(y, [x]) is x
    other_pool = holder("z", 1, 8, cqs=("a10g",))
    assert gang._first(a, [other_pool]) is a  # a holder on another pool is not a rival
    # Of any number of holders reaching their bound together, exactly one comes first in its own view.
    many = [holder(f"m{i}", h, 4) for i, h in enumerate((1, 2, 3, 1))]
    assert sum(gang._first(m, many) is m for m in many) == 1


def test_holders_are_read_from_the_listed_deployments_status_and_malformed_records_are_skipped():
    listed = [
        {"metadata": {"name": "a", "namespace": "team-a", "uid": "u-a", "creationTimestamp": "2026-11-30T00:00:00Z"},
         "status": {"jointAdmission": {"holdingSince": "2026-11-30T00:00:01Z", "have": 1, "want": 4,
                                       "clusterQueues": ["h20"], "localQueues": ["team-a/h20"]}}},
        {"metadata": {"name": "b", "namespace": "team-a", "uid": "u-b"}, "status": {"jointAdmission": {"have": "x"}}},
        {"metadata": {"name": "c", "namespace": "team-a", "uid": "u-c"}, "status": {}},
        {"metadata": {"name": "d", "namespace": "team-a", "uid": "u-d", "deletionTimestamp": "2026-11-30T00:00:00Z"},
         "status": {"jointAdmission": {"holdingSince": "2026-11-30T00:00:01Z", "have": 1, "want": 4}}},
    ]
    (only,) = gang.holders(listed)
    assert (only.name, only.have, only.want, only.cluster_queues, only.local_queues) == (
        "a", 1, 4, frozenset({"h20"}), frozenset({"team-a/h20"}))


def ordinal(action: Action, *, admitted=False, reserved=False, up_to_date=True, ran=False) -> OrdinalPlan:
    return OrdinalPlan(0, action, admitted=admitted, reserved=reserved, up_to_date=up_to_date, ran=ran)


@pytest.mark.parametrize("entries, hold, complete, have, want", [
    ([ordinal(Action.KEEP, admitted=True), ordinal(Action.KEEP, reserved=True)], None, True, 2, 2),
    ([ordinal(Action.KEEP, admitted=True), ordinal(Action.CREATE)], None, False, 1, 2),
    ([ordinal(Action.KEEP, reserved=True, up_to_date=False)], None, False, 0, 1),  # obsolete quota not counted
    ([ordinal(Action.KEEP, reserved=True)], "binding not Ready", False, 0, 1),  # held render not counted
    ([ordinal(Action.KEEP, admitted=True), ordinal(Action.SHED, admitted=True)], None, True, 1, 1),
    # Pods that ran beside a Workload not admitted: Kueue's new one for stopping Pods, not counted.
    ([ordinal(Action.KEEP, reserved=True, ran=True)], None, False, 0, 1),
    ([ordinal(Action.KEEP, admitted=True, reserved=True, ran=True)], None, True, 1, 1),
])
def test_verdict_counts_the_declared_groups_that_hold_quota(entries, hold, complete, have, want):
    plan = RolePlan("server", ordinals=entries, hold=hold)
    assert gang.verdict([plan]) == gang.GangVerdict(complete=complete, have=have, want=want)


@pytest.mark.parametrize("ran, admitted, expected", [
    (True, False, True),  # ran under an admission this Workload does not hold
    (True, True, False),  # serving under its own admission
    (False, False, False),  # still gated: a group waiting for its first admission
])
def test_a_group_that_ran_is_admitted_only_by_the_workload_that_admitted_it(ran, admitted, expected):
    entry = ordinal(Action.KEEP, admitted=admitted, reserved=True, ran=ran)
    assert gang._ran_unadmitted(entry) is expected
    assert gang._admissible(RolePlan("server", ordinals=[entry]), entry) is not expected


def group(state: str, *conditions: str, admissible: bool = True) -> gang._Group:
    return gang._Group("g", workload(*conditions), {"name": vocab.ADMISSION_CHECK_NAME, "state": state},
                       admissible=admissible, why_not="" if admissible else "obsolete render")


COMPLETE = gang.GangVerdict(True, 4, 4)
PARTIAL = gang.GangVerdict(False, 3, 4)


@pytest.mark.parametrize("case, grp, joint, verdict_, expected_state", [
    ("admitted gets Ready once", group("Pending", "QuotaReserved", "Admitted"), True, PARTIAL, "Ready"),
    ("admitted and Ready: left alone", group("Ready", "QuotaReserved", "Admitted"), True, PARTIAL, None),
    ("single role: Ready on quota", group("Pending", "QuotaReserved"), False, PARTIAL, "Ready"),
    ("joint: Ready only on the whole set", group("Pending", "QuotaReserved"), True, PARTIAL, "Pending"),
    ("joint and complete: Ready", group("Pending", "QuotaReserved"), True, COMPLETE, "Ready"),
    ("no quota: Pending", group("Pending"), True, COMPLETE, "Pending"),
    ("single role, no quota yet: Ready, admitted when Kueue reserves", group("Pending"), False, PARTIAL, "Ready"),
    ("single role, held or an earlier incarnation still stopping: Pending", group("Pending", admissible=False), False,
     COMPLETE, "Pending"),
    ("obsolete render: never Ready", group("Pending", "QuotaReserved", admissible=False), False, COMPLETE,
     "Pending"),
    ("Retry while reserved: Kueue evicts it", group("Retry", "QuotaReserved"), True, PARTIAL, None),
    ("an earlier version's Retry, unreserved: Pending", group("Retry"), True, PARTIAL, "Pending"),
])
def test_decide_one_group(case, grp, joint, verdict_, expected_state):
    decision = gang._decide(grp, joint, verdict_)
    assert (decision[0] if decision else None) == expected_state, case


def _pd_set(reserved: int, *, since: str = "2026-11-30T00:00:00Z", extra: dict[str, Any] | None = None):
    """pd-pair (2 + 2 groups) whose first `reserved` groups hold quota since `since`; `extra` merges
    into every Workload's metadata."""
    md = copy.deepcopy(example("pd-pair"))
    md["metadata"].update(uid="uid-pd", creationTimestamp="2026-11-29T00:00:00Z")
    del md["spec"]["router"]
    groups = [(role["name"], o, names.pod_group("team-a", "pd-demo", role["name"], o)) for role in md["spec"]["roles"]
              for o in range(role["replicas"])]

    def wl(name: str, holds: bool) -> dict[str, Any]:
        conditions = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": since}] if holds else []
        meta = {"name": name, "namespace": "team-a", "resourceVersion": "7", "uid": f"wl-{name}", **(extra or {})}
        return {"apiVersion": vocab.KUEUE_API_VERSION, "kind": "Workload", "metadata": meta,
                "spec": {"queueName": "h20", "active": "annotations" not in (extra or {})},
                "status": {"conditions": conditions, "admission": {"clusterQueue": "h20"} if holds else {},
                           "admissionChecks": [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending", "message": "",
                                                "lastTransitionTime": since}]}}

    workloads = [wl(g, holds=i < reserved) for i, (_, _, g) in enumerate(groups)]
    ctx = build_context(ModelDeployment.model_validate(md), World.from_related(related_map(world_objects() + workloads)),
                        RenderOptions())
    held = {(r, o) for i, (r, o, _) in enumerate(groups) if i < reserved}
    plans = [RolePlan(role["name"], ordinals=[OrdinalPlan(o, Action.KEEP, reserved=(role["name"], o) in held,
                                                          up_to_date=True,
                                                          group=names.pod_group("team-a", "pd-demo", role["name"], o))
                                              for o in range(role["replicas"])])
             for role in md["spec"]["roles"]]
    return ctx, plans, [g for _, _, g in groups]


def test_a_partial_set_holds_says_so_and_at_its_bound_yields_only_when_first():
    ctx, plans, groups = _pd_set(3)  # 3 of 4 hold quota
    early = gang.decide(ctx, plans, now="2026-11-30T00:01:00Z", release_after_seconds=600)
    assert early.intents == []  # Pending already: only the count would change, and that is not written
    assert early.record == {"holdingSince": "2026-11-30T00:00:00Z", "have": 3, "want": 4, "clusterQueues": ["h20"],
                            "localQueues": ["team-a/h20"]}
    assert early.wait == pytest.approx(540) and not early.needs_peers

    obsolete = [RolePlan(p.role, ordinals=[OrdinalPlan(o.ordinal, Action.KEEP, reserved=o.reserved, up_to_date=False, group=o.group)
                                           for o in p.ordinals]) for p in plans]
    reasons = gang.decide(ctx, obsolete, now="2026-11-30T00:01:00Z", release_after_seconds=600).intents
    assert {i.workload for i in reasons} == set(groups)  # a group that may not start says why
    assert {i.state for i in reasons} == {"Pending"} and "obsolete render" in reasons[0].message

    late = "2026-11-30T00:10:00Z"
    assert gang.decide(ctx, plans, now=late, release_after_seconds=600).needs_peers  # the handler lists them
    alone = gang.decide(ctx, plans, now=late, release_after_seconds=600, peers=[])
    assert {(type(i).__name__, i.active, i.released_at) for i in alone.intents} == {("SetWorkloadActive", False, late)}
    assert {i.workload for i in alone.intents} == set(groups) and all(i.resource_version == "7" for i in alone.intents)
    assert alone.record == {"releasedAt": late, "have": 3, "want": 4, "clusterQueues": ["h20"],
                            "localQueues": ["team-a/h20"]}  # it yielded: the others keep what they hold

    yielded = gang.Holder("team-a", "other", "uid-other", "2026-11-30T00:00:00Z", 1, 4, "", frozenset({"h20"}),
                          released_at="2026-11-30T00:09:00Z")
    keeps = gang.decide(ctx, plans, now=late, release_after_seconds=600, peers=[yielded])
    assert keeps.intents == [] and keeps.wait == pytest.approx(540)  # until the other queues again

    smaller = gang.Holder("team-a", "other", "uid-other", "2026-11-30T00:00:00Z", 1, 4, "2026-11-30T00:05:00Z",
                          frozenset({"h20"}))
    waits = gang.decide(ctx, plans, now=late, release_after_seconds=600, peers=[smaller])
    assert waits.intents == [] and waits.record is not None
    assert waits.wait == pytest.approx(300)  # when the other reaches its own bound
    elsewhere = gang.Holder("team-a", "other", "uid-other", "2026-11-30T00:00:00Z", 1, 4, "2026-11-30T00:05:00Z",
                            frozenset({"a10g"}), frozenset({"team-b/a10g"}))
    assert gang.decide(ctx, plans, now=late, release_after_seconds=600, peers=[elsewhere]).intents


def test_a_released_set_backs_off_then_reads_pending_and_is_activated_again():
    released = {"annotations": {vocab.ANNOTATION_GANG_RELEASED_AT: "2026-11-30T00:10:00Z"}}
    ctx, plans, groups = _pd_set(0, extra=released)
    backing = gang.decide(ctx, plans, now="2026-11-30T00:12:00Z", release_after_seconds=600)
    assert backing.intents == [] and backing.wait == pytest.approx(480)
    assert backing.record == {"releasedAt": "2026-11-30T00:10:00Z", "have": 0, "want": 4, "clusterQueues": [],
                              "localQueues": ["team-a/h20"]}
    over = gang.decide(ctx, plans, now="2026-11-30T00:20:00Z", release_after_seconds=600)
    assert {(type(i).__name__, i.active, i.released_at) for i in over.intents} == {("SetWorkloadActive", True, "")}
    assert {i.workload for i in over.intents} == set(groups) and over.record is None
    # A check that does not read Pending is set to Pending first: Kueue would park the Workload again.
    for g in groups:
        workload = ctx.world.workload("team-a", g)
        assert workload is not None
        workload["status"]["admissionChecks"][0]["state"] = "Retry"
    first = gang.decide(ctx, plans, now="2026-11-30T00:20:00Z", release_after_seconds=600).intents
    assert {(type(i).__name__, getattr(i, "state", None)) for i in first} == {("SetAdmissionCheck", "Pending")}
    # Disabling the release activates at once what an earlier release left.
    assert len(gang.decide(ctx, plans, now="2026-11-30T00:12:00Z", release_after_seconds=0).intents) == 4


def test_a_workload_delete_carries_the_requests_copy():
    from app.control.rollout import workload_delete

    copy_ = {"metadata": {"name": "g", "uid": "wl-1", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "qwen-server-r0-x", "uid": "p"}]}}
    intent = workload_delete("team-a", "g", copy_, "rollout")
    assert (intent.uid, intent.owners) == ("wl-1", (("Pod", "qwen-server-r0-x"),))
    # Without a copy (a shed ordinal no longer listed) the executor reads it.
    assert (workload_delete("team-a", "g", None, "scale-down").uid, workload_delete("team-a", "g", {}, "x").uid) == ("", "")


def placed(host: str, *, levels: tuple[str, ...] = (vocab.LABEL_HOSTNAME,)) -> dict[str, Any]:
    """An admitted Workload whose topology-aware placement names `host` (Kueue v1beta2's form)."""
    wl = copy.deepcopy(ADMITTED)
    values = [{"universal": "rack-0"}] * (len(levels) - 1) + [{"universal": host}]
    wl["status"]["admission"] = {"podSetAssignments": [{"name": "server", "count": 1, "topologyAssignment": {
        "levels": list(levels), "slices": [{"domainCount": 1, "podCounts": {"universal": 1},
                                             "valuesPerLevel": values}]}}]}
    return wl


def on(node: str, **kw: Any) -> dict[str, Any]:
    p = pod(**kw)
    p["spec"]["nodeName"] = node
    return p


def test_a_group_kueue_placed_elsewhere_than_its_pods_run_is_drifted():
    """bench/soak.md, bug 3: after a node failure Kueue re-places the group's Workload while its Pod
    cannot move; the replica is replaced (under the rollout's gates) so Kueue's accounting matches
    what runs again."""
    drifted = dict(declared=True, inst=instance(on("node-a")), workload=placed("node-b"), fingerprint=FP, size=1,
                   held=False)
    assert classify(**drifted) == Situation.DRIFTED
    assert classify(**{**drifted, "workload": placed("node-a")}) == Situation.CURRENT
    racks = placed("node-b", levels=("topology.gpustack.ai/rack", vocab.LABEL_HOSTNAME))
    assert classify(**{**drifted, "workload": racks}) == Situation.DRIFTED
    # A departure still wins: the Pod is going anyway.
    assert classify(**{**drifted, "inst": instance(on("node-a", deleting=True))}) == Situation.DEPARTED
    # Nothing to compare: no placement, a Pod not bound yet, or an encoding not spelt out per host.
    assert classify(**{**drifted, "workload": ADMITTED}) == Situation.CURRENT
    assert classify(**{**drifted, "inst": instance(pod())}) == Situation.CURRENT
    compressed = placed("node-b")
    compressed["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"][0]["valuesPerLevel"] = [
        {"individual": {"prefix": "node-", "roots": ["a", "b"]}}]
    assert classify(**{**drifted, "workload": compressed}) == Situation.CURRENT
    assert obs.placement_hosts(placed("node-b")) == {"node-b"}
