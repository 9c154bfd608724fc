"""A replica Kueue admitted and never placed is named in the status and a Warning Event
(app/control/stalls.py, docs/kueue.md#an-admitted-replica-kueue-never-places)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from app import timestamps, vocab
from app.api.hooks import hook_request
from app.control import stalls
from app.control.sync import SyncResult, SyncSettings, reconcile
from tests.helpers import NOW, parent, pods, request, sync, workload


def at(seconds_before_now: float) -> str:
    when = datetime.fromisoformat(NOW.replace("Z", "+00:00")) - timedelta(seconds=seconds_before_now)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pending_pod(pod: dict[str, Any], uid: str, gates: list[str]) -> dict[str, Any]:
    """An observed Pod Kueue let through its admission gate but holds by `gates`."""
    observed = copy.deepcopy(pod)
    observed["metadata"]["uid"] = uid
    observed["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    observed["status"] = {"phase": "Pending"}
    return observed


def observed_pass(admitted_seconds_ago: float, gates: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request of a pass that sees ordinal 0's Pod held by `gates` and every Workload admitted
    that long before NOW; and that Pod."""
    first = sync(parent("qwen-chat"))
    observed = [pending_pod(p, f"uid-{i}", gates if i == 0 else []) for i, p in enumerate(pods(first))]
    groups = []
    for p in observed:
        wl = workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME])
        wl["metadata"]["uid"] = f"wl-{p['metadata']['uid']}"
        for cond in wl["status"]["conditions"]:
            cond["lastTransitionTime"] = at(admitted_seconds_ago)
        groups.append(wl)
    return request(parent("qwen-chat"), children=observed, extra_related=groups), observed[0]


def at_time(body: dict[str, Any], now: str) -> SyncResult:
    result = reconcile(hook_request(copy.deepcopy(body)), SyncSettings(), now=now)
    assert isinstance(result, SyncResult)
    return result


def one_pass(admitted_seconds_ago: float, gates: list[str]) -> tuple[SyncResult, dict[str, Any]]:
    body, pod = observed_pass(admitted_seconds_ago, gates)
    return at_time(body, NOW), pod


def stall_events(result: Any) -> list[Any]:
    return [i for i in result.intents if getattr(i, "reason", None) == vocab.EVENT_REPLICA_UNGATE_STALLED]


def test_an_admitted_replica_still_topology_gated_after_a_minute_is_named_with_the_way_out():
    result, stuck = one_pass(stalls.UNGATE_STALL_SECONDS + 30, [vocab.KUEUE_TOPOLOGY_GATE])
    group = stuck["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]
    message = result.status["phaseMessage"]
    assert "qwen-chat-server-r0" in message and group in message
    assert vocab.KUEUE_TOPOLOGY_GATE in message and "restart kueue-controller-manager" in message
    [event] = stall_events(result)
    assert event.type == vocab.EVENT_TYPE_WARNING and group in event.message


@pytest.mark.parametrize(("seconds_ago", "gates"), [
    (5, [vocab.KUEUE_TOPOLOGY_GATE]),  # Kueue places an admitted Pod within a second or two
    (stalls.UNGATE_STALL_SECONDS + 30, []),  # placed: waiting on the scheduler, not on Kueue
    (stalls.UNGATE_STALL_SECONDS + 30, [vocab.KUEUE_SCHEDULING_GATE, vocab.KUEUE_TOPOLOGY_GATE]),  # not let through yet
])
def test_a_replica_kueue_is_placing_or_has_placed_is_not_called_stalled(seconds_ago: float, gates: list[str]):
    result, _ = one_pass(seconds_ago, gates)
    assert stall_events(result) == []
    assert "topology" not in result.status["phaseMessage"]


def test_the_stall_repeats_the_same_event_name_and_status_on_every_later_pass():
    """Nothing in either moves with the clock, or every pass would rewrite the status (a hot loop)."""
    body, _ = observed_pass(stalls.UNGATE_STALL_SECONDS + 30, [vocab.KUEUE_TOPOLOGY_GATE])
    first, later = at_time(body, NOW), at_time(body, "2026-11-29T12:05:00Z")
    assert [e.name for e in stall_events(first)] == [e.name for e in stall_events(later)] != []
    assert first.status["phaseMessage"] == later.status["phaseMessage"]


@pytest.mark.parametrize(("admitted_at", "expected"), [
    (at(stalls.UNGATE_STALL_SECONDS), True),
    (at(stalls.UNGATE_STALL_SECONDS - 1), False),
    (None, False),
    ("not a time", False),
])
def test_stalled(admitted_at: str | None, expected: bool):
    now = datetime.fromisoformat(NOW.replace("Z", "+00:00"))
    assert stalls.stalled(timestamps.parse(admitted_at), now) is expected


def test_a_replica_kueue_has_not_placed_yet_asks_for_no_pass():
    """Kueue places an admitted Pod within a second, and its update brings the next pass; a pass
    asked for on every admission would cost one more sync per replica. A stall is named by the
    CompositeController's periodic resync (docs/metacontroller.md#what-starts-a-pass)."""
    result, _ = one_pass(stalls.UNGATE_STALL_SECONDS - 10, [vocab.KUEUE_TOPOLOGY_GATE])
    assert result.resync_after is None
