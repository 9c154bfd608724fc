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
from app.control.rollout import Action, OrdinalPlan, RolePlan, Situation, _next_incarnations, classify, may_turn_over
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
    assert _next_incarnations(previous, insts) == expected


# --- gang ------------------------------------------------------------------------------------------


def test_release_bound_is_stretched_once_per_reservation_and_deterministic():
    bounds = {gang.release_bound("team-a", f"md-{i}", "2026-11-30T00:00:00Z", 600.0) for i in range(50)}
    assert all(600.0 <= b < 1200.0 for b in bounds)
    assert len(bounds) == 50  # two sets that started holding together do not release together
    again = gang.release_bound("team-a", "md-0", "2026-11-30T00:00:00Z", 600.0)
    assert again == gang.release_bound("team-a", "md-0", "2026-11-30T00:00:00Z", 600.0)
    assert again != gang.release_bound("team-a", "md-0", "2026-11-30T00:10:00Z", 600.0)  # a new round, a new draw


def ordinal(action: Action, *, admitted=False, reserved=False, up_to_date=True) -> OrdinalPlan:
    return OrdinalPlan(0, action, admitted=admitted, reserved=reserved, up_to_date=up_to_date)


@pytest.mark.parametrize("entries, hold, complete, have, want", [
    ([ordinal(Action.KEEP, admitted=True), ordinal(Action.KEEP, reserved=True)], None, True, 2, 2),
    ([ordinal(Action.KEEP, admitted=True), ordinal(Action.CREATE)], None, False, 1, 2),
    ([ordinal(Action.KEEP, reserved=True, up_to_date=False)], None, False, 0, 1),  # obsolete quota not counted
    ([ordinal(Action.KEEP, reserved=True)], "binding not Ready", False, 0, 1),  # held render not counted
    ([ordinal(Action.KEEP, admitted=True), ordinal(Action.SHED, admitted=True)], None, True, 1, 1),
])
def test_verdict_counts_the_declared_groups_that_hold_quota(entries, hold, complete, have, want):
    plan = RolePlan("server", ordinals=entries, hold=hold)
    assert gang.verdict([plan]) == gang.GangVerdict(complete=complete, have=have, want=want)


def group(state: str, *conditions: str, admissible: bool = True) -> gang._Group:
    return gang._Group("g", workload(*conditions), {"name": vocab.ADMISSION_CHECK_NAME, "state": state},
                       admissible=admissible, why_not="" if admissible else "obsolete render")


COMPLETE = gang.GangVerdict(True, 4, 4)
PARTIAL = gang.GangVerdict(False, 3, 4)


@pytest.mark.parametrize("case, grp, joint, verdict_, mode, expected_state", [
    ("admitted gets Ready once", group("Pending", "QuotaReserved", "Admitted"), True, PARTIAL, "", "Ready"),
    ("admitted and Ready: left alone", group("Ready", "QuotaReserved", "Admitted"), True, PARTIAL, "", None),
    ("single role: Ready on quota", group("Pending", "QuotaReserved"), False, PARTIAL, "", "Ready"),
    ("joint: Ready only on the whole set", group("Pending", "QuotaReserved"), True, PARTIAL, "", "Pending"),
    ("joint and complete: Ready", group("Pending", "QuotaReserved"), True, COMPLETE, "", "Ready"),
    ("no quota: Pending", group("Pending"), True, COMPLETE, "", "Pending"),
    ("obsolete render: never Ready", group("Pending", "QuotaReserved", admissible=False), False, COMPLETE, "",
     "Pending"),
    ("release: Retry", group("Pending", "QuotaReserved"), True, PARTIAL, "release", "Retry"),
    ("Retry while reserved: Kueue evicts it", group("Retry", "QuotaReserved"), True, PARTIAL, "", None),
])
def test_decide_one_group(case, grp, joint, verdict_, mode, expected_state):
    decision = gang._decide(grp, joint, verdict_, mode, "note")
    assert (decision[0] if decision else None) == expected_state, case


def test_admission_checks_hold_a_partial_set_and_release_it_after_the_bound():
    md = copy.deepcopy(example("pd-pair"))
    md["metadata"]["uid"] = "uid-pd"
    del md["spec"]["router"]
    groups = [names.pod_group("team-a", "pd-demo", role["name"], o) for role in md["spec"]["roles"]
              for o in range(role["replicas"])]

    def wl(name: str, reserved: bool) -> dict[str, Any]:
        conditions = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z"}] \
            if reserved else []
        return {"apiVersion": vocab.KUEUE_API_VERSION, "kind": "Workload",
                "metadata": {"name": name, "namespace": "team-a", "resourceVersion": "7"},
                "status": {"conditions": conditions, "admissionChecks": [
                    {"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending", "message": "",
                     "lastTransitionTime": "2026-11-30T00:00:00Z"}]}}

    workloads = [wl(g, reserved=i < 3) for i, g in enumerate(groups)]  # 3 of 4 hold quota
    world = World.from_related(related_map(world_objects() + workloads))
    ctx = build_context(ModelDeployment.model_validate(md), world, RenderOptions())
    plans = [RolePlan(role["name"], ordinals=[
        OrdinalPlan(o, Action.KEEP, reserved=o == 0 or role["name"] == "prefill", up_to_date=True)
        for o in range(role["replicas"])]) for role in md["spec"]["roles"]]

    early = gang.admission_checks(ctx, plans, now="2026-11-30T00:01:00Z", release_after_seconds=600)
    assert early == []  # Pending already: only the count would change, and that is not written

    obsolete = [RolePlan(p.role, ordinals=[OrdinalPlan(o.ordinal, Action.KEEP, reserved=o.reserved, up_to_date=False)
                                           for o in p.ordinals]) for p in plans]
    reasons = gang.admission_checks(ctx, obsolete, now="2026-11-30T00:01:00Z", release_after_seconds=600)
    assert {i.workload for i in reasons} == set(groups)  # a group that may not start says why
    assert {i.state for i in reasons} == {"Pending"} and "obsolete render" in reasons[0].message

    late = gang.admission_checks(ctx, plans, now="2026-11-30T01:00:00Z", release_after_seconds=600)
    assert {i.state for i in late} == {"Retry"} and all(i.resource_version == "7" for i in late)


def test_a_workload_delete_carries_the_requests_copy():
    from app.control.rollout import workload_delete

    copy_ = {"metadata": {"name": "g", "uid": "wl-1", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "qwen-server-r0-x", "uid": "p"}]}}
    intent = workload_delete("team-a", "g", copy_, "rollout")
    assert (intent.uid, intent.owners) == ("wl-1", (("Pod", "qwen-server-r0-x"),))
    # Without a copy (a shed ordinal no longer listed) the executor reads it.
    assert (workload_delete("team-a", "g", None, "scale-down").uid, workload_delete("team-a", "g", {}, "x").uid) == ("", "")


def test_a_joint_set_asks_to_come_back_when_its_partial_reservation_is_released():
    md = copy.deepcopy(example("pd-pair"))
    md["metadata"]["uid"] = "uid-pd"
    del md["spec"]["router"]
    groups = [names.pod_group("team-a", "pd-demo", role["name"], o) for role in md["spec"]["roles"]
              for o in range(role["replicas"])]
    since = "2026-11-30T00:00:00Z"
    workloads = [{"apiVersion": vocab.KUEUE_API_VERSION, "kind": "Workload",
                  "metadata": {"name": g, "namespace": "team-a", "resourceVersion": "7"},
                  "status": {"conditions": [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": since}]
                             if i == 0 else [],
                             "admissionChecks": [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending",
                                                  "message": "", "lastTransitionTime": since}]}}
                 for i, g in enumerate(groups)]
    ctx = build_context(ModelDeployment.model_validate(md),
                        World.from_related(related_map(world_objects() + workloads)), RenderOptions())
    plans = [RolePlan(role["name"], ordinals=[OrdinalPlan(o, Action.KEEP, reserved=(role["name"], o) == ("prefill", 0),
                                                          up_to_date=True) for o in range(role["replicas"])])
             for role in md["spec"]["roles"]]
    bound = gang.release_bound("team-a", "pd-demo", since, 600)
    left = gang.seconds_until_release(ctx, plans, now="2026-11-30T00:01:00Z", release_after_seconds=600)
    assert left == pytest.approx(bound - 60)
    assert gang.seconds_until_release(ctx, plans, now=since, release_after_seconds=0) is None
    whole = [RolePlan(p.role, ordinals=[OrdinalPlan(o.ordinal, Action.KEEP, reserved=True, up_to_date=True)
                                        for o in p.ordinals]) for p in plans]
    assert gang.seconds_until_release(ctx, whole, now=since, release_after_seconds=600) is None


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
