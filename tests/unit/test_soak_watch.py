"""The soak watcher's turnover invariant, replayed on histories (bench/soak.md#invariants)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import certifi
import pytest

from app import vocab
from app.model.context import RenderOptions
from bench.soak_ledger import Ledger
from bench.soak_readylog import ReadyLog
from bench.soak_watch import Observation, Watcher

WALL = 1_800_000_000.0  # an epoch second, for the Events' stamps
MD_UID = "uid-chat-0"


def stamp(t: float) -> str:
    return datetime.fromtimestamp(int(t), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(ordinal: int, name: str, *, ready: bool = False, deleting: bool = False, member: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "ownerReferences": [{"uid": MD_UID}],
                            "labels": {vocab.LABEL_INSTANCE: "chat-0", vocab.LABEL_COMPONENT: "server",
                                       vocab.LABEL_POD_ORDINAL: str(ordinal), vocab.LABEL_MEMBER_INDEX: str(member)}}
    if deleting:
        meta["deletionTimestamp"] = stamp(WALL + 30)
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": meta, "status": {"phase": "Running" if ready else "Pending", "conditions": conditions}}


def observe(watcher: Watcher, t: float, pods: list[dict[str, Any]]) -> None:
    """One observation at soak second `t`; the Pod watch saw the same Pods then."""
    for p in pods:
        watcher.ready_log.apply("MODIFIED", p, t)
    md = {"metadata": {"name": "chat-0", "uid": MD_UID},
          "spec": {"roles": [{"name": "server", "replicas": 2, "size": 1}]}}
    obs = Observation(0, t, t, {"chat-0": md}, pods, {}, [])
    obs.pods_of[MD_UID] = pods
    watcher.check_turnovers(obs)


@pytest.fixture()
def watcher() -> Watcher:
    return Watcher(None, Ledger(), [], render_options=RenderOptions(), webhook_url="https://127.0.0.1:1",  # type: ignore[arg-type]
                   webhook_verify=certifi.where(), operators=lambda: [(None, "http://127.0.0.1:1")],
                   scalers=False)


def workload_delete_of_ordinal_0(ledger: Ledger, start: float) -> None:
    action = ledger.finish(ledger.begin("departure", "workload-delete", "chat-0/server/0", touch=["chat-0"]))
    action.start, action.end = start, start + 0.1
    ledger.explain(action, "chat-0", "server", 0)


def test_a_ready_window_between_two_observations_ends_the_earlier_loss(watcher: Watcher) -> None:
    """bench/soak.md#bugs-found-on-the-way: ordinal 0 rolled (lost to the turnover), its new Pod Ready for a
    fifth of a second and then taken by a Workload delete, gone before the next observation; the
    rollout went on to ordinal 1 in that window. One turnover loss and one departure, not two
    turnover losses: the Pod watch saw the window no observation did."""
    observe(watcher, 0.0, [pod(0, "r0-old", ready=True), pod(1, "r1-old", ready=True)])
    watcher.ready_log.apply("DELETED", pod(0, "r0-old", ready=True, deleting=True), 0.9)
    observe(watcher, 1.0, [pod(0, "r0-new"), pod(1, "r1-old", ready=True)])
    watcher.ready_log.apply("MODIFIED", pod(0, "r0-new", ready=True), 3.2)
    workload_delete_of_ordinal_0(watcher.ledger, 3.3)
    watcher.ready_log.apply("MODIFIED", pod(0, "r0-new", ready=True, deleting=True), 3.4)
    watcher.ready_log.apply("DELETED", pod(0, "r0-new", ready=True, deleting=True), 3.5)
    observe(watcher, 4.0, [pod(0, "r0-newer"), pod(1, "r1-old", ready=True, deleting=True)])

    assert watcher.ledger.violations == []
    assert watcher.stats["Ready replicas lost, explained by a departure"] == 1
    assert watcher.stats["Ready replicas lost to a turnover"] == 2


def test_two_replicas_rolled_at_once_are_still_a_violation(watcher: Watcher) -> None:
    """The same history without the Ready window: ordinal 0's new Pod never turned Ready, so the
    rollout took ordinal 1 while ordinal 0 was still down. The report shows what the watch saw."""
    observe(watcher, 0.0, [pod(0, "r0-old", ready=True), pod(1, "r1-old", ready=True)])
    watcher.ready_log.apply("DELETED", pod(0, "r0-old", ready=True, deleting=True), 0.9)
    observe(watcher, 1.0, [pod(0, "r0-new"), pod(1, "r1-old", ready=True)])
    workload_delete_of_ordinal_0(watcher.ledger, 3.3)
    watcher.ready_log.apply("DELETED", pod(0, "r0-new", deleting=True), 3.5)
    observe(watcher, 4.0, [pod(0, "r0-newer"), pod(1, "r1-old", ready=True, deleting=True)])

    [violation] = watcher.ledger.violations
    assert violation.invariant == "turnover"
    assert "ordinal 0 lost since 1.00s" in violation.message and "r0-new: Ready never" in violation.message
    assert "r0-old: Ready 0.00-0.90" in violation.message


def test_the_lost_pods_own_end_delivered_late_does_not_end_its_loss(watcher: Watcher) -> None:
    """The watch delivers a change a moment after an observation may have read it: the window the
    loss ended must not read as Ready after the loss."""
    observe(watcher, 0.0, [pod(0, "r0-old", ready=True), pod(1, "r1-old", ready=True)])
    watcher.ledger.violations.clear()
    pods = [pod(0, "r0-old", ready=True, deleting=True), pod(1, "r1-old", ready=True)]
    obs = Observation(0, 1.0, 1.0, {"chat-0": {"metadata": {"name": "chat-0", "uid": MD_UID},
                                               "spec": {"roles": [{"name": "server", "replicas": 2}]}}}, pods, {}, [])
    obs.pods_of[MD_UID] = pods
    watcher.check_turnovers(obs)  # the observation saw the loss; the watch has not yet
    watcher.ready_log.apply("MODIFIED", pods[0], 1.1)
    observe(watcher, 2.0, [pod(0, "r0-new"), pod(1, "r1-old", ready=True, deleting=True)])

    assert [v.invariant for v in watcher.ledger.violations] == ["turnover"]


def ready_log(*windows: tuple[str, int, float, float | None]) -> ReadyLog:
    """A log with one Pod per (name, member, Ready from, until) of ordinal 0."""
    from bench.soak_watch import pod_ready, replica_key

    log = ReadyLog(replica_key, lambda p: p["metadata"]["labels"][vocab.LABEL_MEMBER_INDEX], pod_ready)
    for name, member, start, end in windows:
        log.apply("ADDED", pod(0, name, member=member), start - 0.1)
        log.apply("MODIFIED", pod(0, name, member=member, ready=True), start)
        if end is not None:
            log.apply("DELETED", pod(0, name, member=member, ready=True, deleting=True), end)
    return log


@pytest.mark.parametrize(("windows", "size", "expected"), [
    ([("a", 0, 2.0, None)], 1, True),
    ([("a", 0, 2.0, 2.1)], 1, True),
    # Ready across the loss (its end delivered late): that is the Ready state that was lost.
    ([("a", 0, 0.0, 3.0)], 1, False),
    ([("a", 0, 0.0, 0.4)], 1, False),
    # A worker Ready throughout, a new leader Ready after the loss: whole again.
    ([("a", 0, 2.0, None), ("b", 1, 0.0, None)], 2, True),
    # The leader went away before the worker turned Ready: never Ready together.
    ([("a", 0, 1.0, 2.0), ("b", 1, 3.0, None)], 2, False),
    ([("a", 0, 1.0, 4.0), ("b", 1, 3.0, None)], 2, True),
    # Two Pods of one member are not a whole pair.
    ([("a", 0, 1.0, None), ("a2", 0, 1.5, None)], 2, False),
])
def test_ready_after(windows: list[tuple[str, int, float, float | None]], size: int, expected: bool) -> None:
    assert ready_log(*windows).ready_after((MD_UID, "server", 0), size, 0.5) is expected


def test_a_relist_ends_the_windows_of_pods_deleted_while_the_watch_was_broken() -> None:
    log = ready_log(("a", 0, 0.0, None))
    log.relisted([pod(0, "b", ready=True)], 5.0)
    assert log.history((MD_UID, "server", 0), 0.0) == ["a: Ready 0.00-5.00", "b: Ready 5.00-…"]
    assert log.ready_after((MD_UID, "server", 0), 1, 4.0)
    assert not log.ready_after((MD_UID, "server", 0), 1, 5.0)


def test_an_events_latest_occurrence_is_read_from_its_reporters_stamps() -> None:
    from bench.soak_watch import event_last_occurred

    md = {"kind": "ModelDeployment", "name": "chat-0"}
    events = [
        {"reason": "SyncError", "involvedObject": md, "lastTimestamp": stamp(WALL + 3)},
        {"reason": "SyncError", "involvedObject": md, "lastTimestamp": stamp(WALL + 1)},
        {"reason": "ReplicaRestarted", "involvedObject": md, "eventTime": "2027-01-15T08:00:00.123456Z",
         "series": {"lastObservedTime": stamp(WALL + 9)}},
        {"reason": "Undated", "involvedObject": md},
    ]
    assert event_last_occurred(events) == {("SyncError", "ModelDeployment", "chat-0"): WALL + 3,
                                           ("ReplicaRestarted", "ModelDeployment", "chat-0"): WALL + 9}


def test_a_leftover_pod_on_a_node_that_is_gone_waits_for_the_pod_garbage_collector(watcher: Watcher) -> None:
    orphan = pod(0, "r0", ready=True)
    orphan["spec"] = {"nodeName": "a10g-0"}
    other = pod(1, "r1", ready=True)
    other["spec"] = {"nodeName": "a10g-1"}
    watcher._nodes = [{"metadata": {"name": "a10g-1"}}]
    obs = Observation(0, 0.0, 0.0, {}, [orphan, other], {}, [])
    assert watcher.on_missing_nodes(obs, ["Pod/r0", "Pod/r1", "Workload/x"]) == ["Pod/r0"]


def test_a_fault_under_way_widened_to_another_deployment_keeps_it_from_being_judged_untouched() -> None:
    """bench/soak.md#bugs-found-on-the-way: a node fault picked its node from an observation in which
    a just-admitted replica of another deployment was not bound there yet; read again, the fault
    covers it too."""
    ledger = Ledger()
    action = ledger.begin("departure", "node-delete", "a10g-2", touch=["chat-1"])
    assert not ledger.in_flight("wide-0")
    ledger.widen(action, ["wide-0"])
    assert ledger.in_flight("wide-0") and action.touches == ["chat-1", "wide-0"]
    ledger.finish(action)
    assert not ledger.in_flight("wide-0")
