"""The soak watcher's turnover invariant, replayed on histories (bench/soak.md#invariants)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import certifi
import pytest

from app import vocab
from app.model.context import RenderOptions
from bench.soak_ledger import Ledger
from bench.soak_watch import Observation, Watcher, ready_between_polls

WALL = 1_800_000_000.0  # the epoch second of the first observation in these histories
MD_UID = "uid-chat-0"


def stamp(t: float) -> str:
    return datetime.fromtimestamp(int(t), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(ordinal: int, name: str, *, ready_at: float | None = None, deleted_at: float | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "ownerReferences": [{"uid": MD_UID}],
                            "labels": {vocab.LABEL_INSTANCE: "chat-0", vocab.LABEL_COMPONENT: "server",
                                       vocab.LABEL_POD_ORDINAL: str(ordinal)}}
    if deleted_at is not None:
        meta["deletionTimestamp"] = stamp(deleted_at)
    conditions = [] if ready_at is None else [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(ready_at)}]
    return {"metadata": meta, "status": {"phase": "Running" if ready_at is not None else "Pending",
                                         "conditions": conditions}}


def observe(watcher: Watcher, t: float, pods: list[dict[str, Any]]) -> None:
    md = {"metadata": {"name": "chat-0", "uid": MD_UID},
          "spec": {"roles": [{"name": "server", "replicas": 2, "size": 1}]}}
    obs = Observation(0, t, t, {"chat-0": md}, pods, {}, [], wall0=WALL + t)
    obs.pods_of[MD_UID] = pods
    watcher.check_turnovers(obs)


@pytest.fixture()
def watcher() -> Watcher:
    return Watcher(None, Ledger(), [], render_options=RenderOptions(), webhook_url="https://127.0.0.1:1",  # type: ignore[arg-type]
                   webhook_verify=certifi.where(), operator_pid=lambda: None, hooks_url="http://127.0.0.1:1",
                   scalers=False)


def workload_delete_of_ordinal_0(ledger: Ledger, start: float) -> None:
    action = ledger.finish(ledger.begin("departure", "workload-delete", "chat-0/server/0", touch=["chat-0"]))
    action.start, action.end = start, start + 0.1
    ledger.explain(action, "chat-0", "server", 0)


def test_a_ready_window_between_two_ticks_ends_the_earlier_loss(watcher: Watcher) -> None:
    """bench/soak.md#bugs-found-on-the-way: ordinal 0 rolled (lost to the turnover), its new Pod Ready for a
    quarter of a second and then taken by a Workload delete; the rollout went on to ordinal 1 in
    that window. One turnover loss and one departure, not two turnover losses."""
    observe(watcher, 0.0, [pod(0, "r0-old", ready_at=WALL - 60), pod(1, "r1-old", ready_at=WALL - 60)])
    observe(watcher, 1.0, [pod(0, "r0-new"), pod(1, "r1-old", ready_at=WALL - 60)])
    workload_delete_of_ordinal_0(watcher.ledger, 4.0)
    observe(watcher, 5.0, [pod(0, "r0-new", ready_at=WALL + 3, deleted_at=WALL + 4),
                           pod(1, "r1-old", ready_at=WALL - 60, deleted_at=WALL + 4)])

    assert watcher.ledger.violations == []
    assert watcher.stats["Ready replicas lost, explained by a departure"] == 1
    assert watcher.stats["Ready replicas lost to a turnover"] == 2


def test_two_replicas_rolled_at_once_are_still_a_violation(watcher: Watcher) -> None:
    """The same history without the Ready window: ordinal 0's new Pod never turned Ready, so the
    rollout took ordinal 1 while ordinal 0 was still down."""
    observe(watcher, 0.0, [pod(0, "r0-old", ready_at=WALL - 60), pod(1, "r1-old", ready_at=WALL - 60)])
    observe(watcher, 1.0, [pod(0, "r0-new"), pod(1, "r1-old", ready_at=WALL - 60)])
    workload_delete_of_ordinal_0(watcher.ledger, 4.0)
    observe(watcher, 5.0, [pod(0, "r0-new", deleted_at=WALL + 4), pod(1, "r1-old", ready_at=WALL - 60, deleted_at=WALL + 4)])

    assert [v.invariant for v in watcher.ledger.violations] == ["turnover"]


@pytest.mark.parametrize(("pods", "size", "expected"), [
    ([pod(0, "a", ready_at=WALL + 2)], 1, True),
    ([pod(0, "a", ready_at=WALL + 2, deleted_at=WALL + 3)], 1, True),
    # Ready and deleted within one second: the timestamps cannot tell which came first.
    ([pod(0, "a", ready_at=WALL + 2, deleted_at=WALL + 2)], 1, False),
    # Ready before the loss was seen: that is the Ready state that was lost.
    ([pod(0, "a", ready_at=WALL, deleted_at=WALL + 3)], 1, False),
    ([pod(0, "a"), pod(0, "b", ready_at=WALL + 2)], 2, False),
    # The leader went away before the worker turned Ready: never Ready together.
    ([pod(0, "a", ready_at=WALL + 1, deleted_at=WALL + 2), pod(0, "b", ready_at=WALL + 3)], 2, False),
    ([pod(0, "a", ready_at=WALL + 1, deleted_at=WALL + 4), pod(0, "b", ready_at=WALL + 3)], 2, True),
])
def test_ready_between_polls(pods: list[dict[str, Any]], size: int, expected: bool) -> None:
    assert ready_between_polls(pods, size, WALL + 0.5) is expected


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
    orphan = pod(0, "r0", ready_at=WALL)
    orphan["spec"] = {"nodeName": "a10g-0"}
    other = pod(1, "r1", ready_at=WALL)
    other["spec"] = {"nodeName": "a10g-1"}
    watcher._nodes = [{"metadata": {"name": "a10g-1"}}]
    obs = Observation(0, 0.0, 0.0, {}, [orphan, other], {}, [])
    assert watcher.on_missing_nodes(obs, ["Pod/r0", "Pod/r1", "Workload/x"]) == ["Pod/r0"]
