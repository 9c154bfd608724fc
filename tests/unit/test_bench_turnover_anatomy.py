"""bench/turnover_anatomy.py: the milestones of one turnover, from Pod and Workload events."""

from __future__ import annotations

from bench.turnover_anatomy import TurnoverAnatomy

REPLICA = ("d", "server/0")


def _pod(uid: str, *, node: str = "", gated: bool = False, deleting: bool = False, finalizers: bool = False,
         group: str = "g1") -> dict:
    meta: dict = {"uid": uid, "labels": {TurnoverAnatomy.GROUP_LABEL: group}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if finalizers:
        meta["finalizers"] = ["kueue.x-k8s.io/managed"]
    spec: dict = {"nodeName": node} if node else {}
    if gated:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return {"metadata": meta, "spec": spec}


def test_a_pipelined_turnover_reads_each_milestone_from_its_going_down():
    a = TurnoverAnatomy()
    a.seen(REPLICA, "ADDED", _pod("old", node="n1", finalizers=True, group="g0"), 0.0)
    a.seen(REPLICA, "ADDED", _pod("new", gated=True), 10.0)  # created beside it, gated
    a.down(REPLICA, 10.0)
    a.seen(REPLICA, "MODIFIED", _pod("old", node="n1", deleting=True, finalizers=True, group="g0"), 10.5)
    a.seen(REPLICA, "MODIFIED", _pod("old", node="n1", deleting=True, group="g0"), 12.0)
    a.seen(REPLICA, "DELETED", _pod("old", node="n1", deleting=True, group="g0"), 12.5)
    a.workload("ADDED", {"metadata": {"name": "g1"}}, 13.0)
    a.workload("MODIFIED", {"metadata": {"name": "g1"}, "status": {
        "conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
        "admissionChecks": [{"state": "Ready"}]}}, 14.0)
    a.seen(REPLICA, "MODIFIED", _pod("new"), 15.0)
    a.seen(REPLICA, "MODIFIED", _pod("new", node="n2"), 16.0)
    a.up(REPLICA, 18.0)
    assert a.means() == {"new_seen": 0.0, "old_deleting": 0.5, "old_released": 2.0, "old_gone": 2.5,
                         "wl_created": 3.0, "reserved": 4.0, "check_ready": 4.0, "admitted": 4.0,
                         "ungated": 5.0, "bound": 6.0, "ready": 8.0}


def test_a_replacement_under_the_same_pod_name_is_told_apart_by_uid():
    a = TurnoverAnatomy()
    a.seen(REPLICA, "ADDED", _pod("u1", node="n1"), 0.0)
    a.down(REPLICA, 1.0)
    a.seen(REPLICA, "DELETED", _pod("u1", node="n1"), 1.5)
    a.seen(REPLICA, "ADDED", _pod("u2"), 2.0)
    a.seen(REPLICA, "MODIFIED", _pod("u2", node="n1"), 3.0)
    a.up(REPLICA, 4.0)
    assert a.means() == {"new_seen": 1.0, "old_deleting": 0.5, "old_released": 0.5, "old_gone": 0.5,
                         "ungated": 1.0, "bound": 2.0, "ready": 3.0}
