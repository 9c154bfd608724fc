"""The settle window (docs/status.md#settling): progress within a transition is written at most
SETTLE_SECONDS after the last write; what a later pass reads back, a condition's status, the phase
and an eviction's words are written at once."""

from __future__ import annotations

import copy
from typing import Any

from app import vocab
from app.control.stages import EVICTED_BY
from app.control.status import SETTLE_SECONDS, settle

T0 = "2026-03-01T12:00:00Z"


def at(seconds: int) -> str:
    return f"2026-03-01T12:00:{seconds:02d}Z"


def written() -> dict[str, Any]:
    """A status as Metacontroller stored it: this operator's answer plus observedGeneration."""
    return {
        "phase": vocab.PHASE_DEGRADED,
        "phaseMessage": "role(s) server have fewer Ready replicas than declared",
        "roleSummary": "4S",
        "roles": [{"name": "server", "kind": "Server", "desired": 5, "ready": 4, "quotaReserved": 4, "admitted": 4,
                   "unmanaged": False, "image": "vllm:1", "nextIncarnations": [2, 1, 1, 1, 1],
                   "notReady": [{"ordinal": 1, "stage": vocab.STAGE_QUEUED, "reason": vocab.STAGE_REASON_CREATING,
                                 "message": "its Pods are created on this pass", "since": T0}]}],
        "conditions": [{"type": vocab.COND_QUOTA_RESERVED, "status": "False", "reason": vocab.REASON_PENDING,
                        "message": "4 of 5 replicas have reserved quota; the rest are queued",
                        "lastTransitionTime": T0, "observedGeneration": 2}],
        "endpoint": "http://qwen-chat-server.team-a.svc:8000",
        "newestRender": {"revision": 7, "renewedAt": T0},
        "observedGeneration": 2,
    }


def fresh_of(last: dict[str, Any]) -> dict[str, Any]:
    """This pass's status before its newestRender is added (sync.reconcile)."""
    return {k: v for k, v in copy.deepcopy(last).items() if k not in ("newestRender", "observedGeneration")}


def progressed(last: dict[str, Any]) -> dict[str, Any]:
    """The replica moved on within its transition: its stage, the role's counts, a condition's words."""
    fresh = fresh_of(last)
    role = fresh["roles"][0]
    role["notReady"][0].update(stage=vocab.STAGE_ADMITTING, reason=vocab.STAGE_REASON_ADMISSION_CHECK,
                               message="Workload x: joint Pending", since=at(2))
    role["admitted"] = 5
    fresh["conditions"][0]["message"] = "5 of 5 replicas have reserved quota"
    return fresh


def test_an_unchanged_status_is_answered_as_it_is_and_asks_for_no_pass():
    last = written()
    fresh = fresh_of(last)
    assert settle(last, fresh, at(2)) == (fresh, None)
    assert settle(last, fresh, at(59)) == (fresh, None)


def test_progress_shortly_after_the_last_write_answers_the_last_written_status_until_the_window_ends():
    last = written()
    answer, after = settle(last, progressed(last), at(2))
    assert answer == fresh_of(last)
    assert after == SETTLE_SECONDS - 2


def test_progress_once_the_window_has_passed_is_written():
    last = written()
    fresh = progressed(last)
    assert settle(last, fresh, at(int(SETTLE_SECONDS))) == (fresh, None)


def test_without_a_render_record_or_a_readable_clock_nothing_is_held():
    last = written()
    del last["newestRender"]
    fresh = progressed(last)
    assert settle(last, fresh, at(1)) == (fresh, None)
    assert settle(None, fresh, at(1)) == (fresh, None)
    future = written()
    future["newestRender"]["renewedAt"] = at(30)  # another replica's clock ahead of ours
    assert settle(future, progressed(future), at(1)) == (progressed(future), None)


def test_what_the_planner_reads_back_is_written_at_once():
    last = written()
    for change in (lambda r: r.update(nextIncarnations=[2, 2, 1, 1, 1]), lambda r: r.update(desired=6)):
        fresh = progressed(last)
        change(fresh["roles"][0])
        assert settle(last, fresh, at(1)) == (fresh, None)
    fresh = progressed(last)
    fresh["jointAdmission"] = {"since": at(1)}
    assert settle(last, fresh, at(1)) == (fresh, None)


def test_the_ready_condition_or_the_phase_moving_is_written_at_once():
    last = written()
    last["conditions"].append({"type": vocab.COND_READY, "status": "False", "reason": "NotReady", "message": "",
                               "lastTransitionTime": at(0)})
    fresh = progressed(last)
    fresh["conditions"][-1].update(status="True", reason="Ready", lastTransitionTime=at(1))
    assert settle(last, fresh, at(1)) == (fresh, None)
    fresh = progressed(last)
    fresh["phase"] = vocab.PHASE_READY
    assert settle(last, fresh, at(1)) == (fresh, None)


def test_another_condition_moving_settles_with_the_progress():
    last = written()
    fresh = progressed(last)
    fresh["conditions"][0].update(status="True", reason=vocab.REASON_RESERVED, lastTransitionTime=at(1))
    answer, after = settle(last, fresh, at(1))
    assert answer["conditions"] == last["conditions"] and after == SETTLE_SECONDS - 1


def test_a_new_generation_is_written_at_once():
    last = written()
    fresh = progressed(last)
    fresh["conditions"][0]["observedGeneration"] = 3
    assert settle(last, fresh, at(1)) == (fresh, None)


def test_a_replica_entering_failing_is_written_at_once_its_restarts_then_settle():
    last = written()
    fresh = fresh_of(last)
    fresh["roles"][0]["notReady"][0].update(stage=vocab.STAGE_FAILING, reason="Error",
                                            message="exited with code 1 (Error); restarted 1 time(s)", since=at(1))
    assert settle(last, fresh, at(1)) == (fresh, None)
    failing = {**fresh, "newestRender": {"revision": 7, "renewedAt": at(1)}}
    again = copy.deepcopy(fresh)
    again["roles"][0]["notReady"][0]["message"] = "exited with code 1 (Error); restarted 2 time(s)"
    assert settle(failing, again, at(3)) == (fresh, SETTLE_SECONDS - 2)


def test_kueues_eviction_words_are_written_at_once_so_the_next_pass_can_carry_them():
    last = written()
    fresh = fresh_of(last)
    fresh["roles"][0]["notReady"][0].update(
        stage=vocab.STAGE_LEAVING, reason=vocab.STAGE_REASON_DEPARTED,
        message=f"Pod p is being deleted; rebuilt whole once it is gone; {EVICTED_BY}Preempted to accommodate x")
    assert settle(last, fresh, at(1)) == (fresh, None)


def test_the_first_ready_replica_of_a_deployment_that_served_none_is_written_at_once():
    """What the endpoint switch and the activator read (app/model/serving.py) is never held back."""
    last = written()
    last["roles"][0]["ready"] = 0
    fresh = fresh_of(last)
    fresh["roles"][0]["ready"] = 1
    assert settle(last, fresh, at(1)) == (fresh, None)
    more = fresh_of(last)
    more["roles"][0]["ready"] = 1
    serving_one = {**more, "newestRender": {"revision": 7, "renewedAt": at(1)}}
    two = copy.deepcopy(more)
    two["roles"][0]["ready"] = 2
    assert settle(serving_one, two, at(2)) == (more, SETTLE_SECONDS - 1)
