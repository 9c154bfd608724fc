"""Why a replica is not serving: its stage, reason and message (app/control/stages.py,
docs/status.md#replica-stages), the ReplicaStuck Event, and a steady status over many passes."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from app import vocab
from app.api.hooks import hook_request
from app.control import stages
from app.control.rollout import Action, OrdinalPlan
from app.control.observed import ObservedInstance
from app.control.sync import SyncResult, SyncSettings, reconcile
from tests.helpers import NOW, parent, pods, request, sync, workload

KUEUE_QUOTA_MESSAGE = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                       "flavor gpu, 4 more needed")


def later(seconds: float) -> str:
    when = datetime.fromisoformat(NOW.replace("Z", "+00:00")) + timedelta(seconds=seconds)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str = "p-0", *, node: str | None = "node-a", conditions: list[dict[str, Any]] | None = None,
        containers: list[dict[str, Any]] | None = None, gates: list[str] | None = None,
        startup: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "engine", **({"startupProbe": startup} if startup else {})}]}
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": "Pending", "conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def waiting(reason: str, message: str = "", restarts: int = 0, last: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "engine", "ready": False, "restartCount": restarts,
                           "state": {"waiting": {"reason": reason, "message": message}}}
    if last:
        out["lastState"] = {"terminated": last}
    return out


def running_container(started: bool = False, restarts: int = 0, last: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "engine", "ready": False, "started": started, "restartCount": restarts,
                           "state": {"running": {"startedAt": "2026-11-29T11:55:00Z"}}}
    if last:
        out["lastState"] = {"terminated": last}
    return out


# --- one source each --------------------------------------------------------------------------------


def test_no_workload_yet_is_queued():
    stage = stages.workload_stage(None, "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_NO_WORKLOAD)


def test_a_workload_without_quota_is_queued_with_kueues_message():
    wl = workload("team-a", "wl", reserved=False, admitted=False)
    wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                   "message": KUEUE_QUOTA_MESSAGE}]
    stage = stages.workload_stage(wl, "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_QUOTA_PENDING)
    assert KUEUE_QUOTA_MESSAGE in stage.message and "wl" in stage.message


def test_an_evicted_workload_is_queued_with_the_eviction_message():
    wl = workload("team-a", "wl", reserved=False, admitted=False)
    wl["status"]["conditions"] = [{"type": "Evicted", "status": "True", "reason": "Preempted",
                                   "message": "Preempted to accommodate a higher priority Workload"}]
    stage = stages.workload_stage(wl, "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_EVICTED)
    assert "higher priority" in stage.message


def test_reserved_not_admitted_is_admitting_with_the_checks_message():
    wl = workload("team-a", "wl", reserved=True, admitted=False)
    wl["status"]["admissionChecks"] = [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Pending",
                                        "message": "waiting for 2 more replicas to reserve quota"}]
    stage = stages.workload_stage(wl, "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_ADMITTING, vocab.STAGE_REASON_ADMISSION_CHECK)
    assert "2 more replicas" in stage.message and vocab.ADMISSION_CHECK_NAME in stage.message


def test_an_admitted_workload_says_nothing():
    assert stages.workload_stage(workload("team-a", "wl"), "wl") is None


def test_an_unschedulable_pod_is_scheduling_with_the_schedulers_message():
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    stage = stages.pod_stage(pod(node=None, conditions=[{"type": "PodScheduled", "status": "False",
                                                          "reason": "Unschedulable", "message": message}]))
    assert (stage.stage, stage.reason) == (vocab.STAGE_SCHEDULING, vocab.STAGE_REASON_UNSCHEDULABLE)
    assert message in stage.message and "p-0" in stage.message


def test_a_pod_not_looked_at_by_the_scheduler_yet_is_scheduling():
    stage = stages.pod_stage(pod(node=None))
    assert (stage.stage, stage.reason) == (vocab.STAGE_SCHEDULING, vocab.STAGE_REASON_NOT_SCHEDULED)


@pytest.mark.parametrize("reason", ["ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull"])
def test_an_image_that_cannot_be_pulled_is_pulling_with_the_kubelets_reason(reason: str):
    stage = stages.pod_stage(pod(containers=[waiting(reason, "Container image \"x:1\" is not present")]))
    assert (stage.stage, stage.reason) == (vocab.STAGE_PULLING, reason)
    assert "not present" in stage.message and "engine" in stage.message


def test_a_container_being_created_is_pulling():
    for p in (pod(containers=[waiting("ContainerCreating")]), pod(containers=None)):
        stage = stages.pod_stage(p)
        assert (stage.stage, stage.reason) == (vocab.STAGE_PULLING, vocab.STAGE_REASON_CONTAINER_CREATING)


def test_an_engine_that_exits_is_failing_with_exit_code_and_restarts_through_its_back_off_and_next_run():
    last = {"exitCode": 3, "reason": "Error", "finishedAt": "2026-11-29T11:59:00Z"}
    backing_off = stages.pod_stage(pod(containers=[waiting("CrashLoopBackOff", "back-off 40s", 4, last)]))
    running_again = stages.pod_stage(pod(containers=[running_container(restarts=4, last=last)]))
    assert backing_off == running_again  # the same stage and text all through the crash loop
    assert (backing_off.stage, backing_off.reason) == (vocab.STAGE_FAILING, "Error")
    assert "exited with code 3" in backing_off.message and "restarted 4 time(s)" in backing_off.message


def test_a_container_that_exited_before_its_first_restart_is_failing():
    status = {"name": "engine", "ready": False, "restartCount": 0,
              "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
    stage = stages.pod_stage(pod(containers=[status]))
    assert (stage.stage, stage.reason) == (vocab.STAGE_FAILING, "Error")
    assert "exited with code 3" in stage.message and "restarted 0 time(s)" in stage.message


def test_a_container_the_kubelet_cannot_create_is_failing():
    stage = stages.pod_stage(pod(containers=[waiting("CreateContainerConfigError", "secret \"x\" not found")]))
    assert (stage.stage, stage.reason) == (vocab.STAGE_FAILING, "CreateContainerConfigError")
    assert "secret" in stage.message


def test_a_slow_start_is_starting_with_its_start_time_and_the_probes_budget():
    probe = {"periodSeconds": 10, "failureThreshold": 360}
    stage = stages.pod_stage(pod(containers=[running_container()], startup=probe))
    assert (stage.stage, stage.reason) == (vocab.STAGE_STARTING, vocab.STAGE_REASON_STARTUP_PROBE)
    assert stage.started_at == "2026-11-29T11:55:00Z" and stage.startup_budget_seconds == 3600
    assert "3600s" in stage.message


def test_started_but_not_ready_is_starting_on_the_readiness_probe():
    stage = stages.pod_stage(pod(containers=[running_container(started=True)], startup={"periodSeconds": 10}))
    assert (stage.stage, stage.reason) == (vocab.STAGE_STARTING, vocab.STAGE_REASON_READINESS_PROBE)
    assert stage.startup_budget_seconds is None


@pytest.mark.parametrize(("probe", "budget"), [({}, 30), ({"initialDelaySeconds": 5, "periodSeconds": 2,
                                                            "failureThreshold": 10}, 25), (None, None)])
def test_startup_budget(probe: dict[str, Any] | None, budget: int | None):
    assert stages.startup_budget(probe) == budget


def test_a_ready_pod_says_nothing():
    assert stages.pod_stage(pod(conditions=[{"type": "Ready", "status": "True"}])) is None


def test_a_group_speaks_through_its_member_furthest_from_serving():
    failing = stages.Stage(vocab.STAGE_FAILING, "Error", "x")
    starting = stages.Stage(vocab.STAGE_STARTING, vocab.STAGE_REASON_READINESS_PROBE, "y")
    scheduling = stages.Stage(vocab.STAGE_SCHEDULING, vocab.STAGE_REASON_UNSCHEDULABLE, "z")
    assert stages.first_by_precedence([starting, scheduling, failing]) == failing
    assert stages.first_by_precedence([starting, scheduling]) == scheduling
    assert stages.first_by_precedence([]) is None


def test_kueues_gates_are_admitting():
    inst = ObservedInstance(0, [pod(gates=[vocab.KUEUE_SCHEDULING_GATE])])
    entry = OrdinalPlan(0, Action.KEEP, admitted=True, reserved=True, has_workload=True)
    stage = stages.replica_stage(entry, inst, workload("team-a", "wl"), "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_ADMITTING, vocab.STAGE_REASON_ADMISSION_GATED)
    inst = ObservedInstance(0, [pod(gates=[vocab.KUEUE_TOPOLOGY_GATE])])
    stage = stages.replica_stage(entry, inst, workload("team-a", "wl"), "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_ADMITTING, vocab.STAGE_REASON_TOPOLOGY_GATED)


@pytest.mark.parametrize(("action", "reason"), [(Action.SHED, vocab.STAGE_REASON_SCALE_DOWN),
                                                (Action.REPLACE, vocab.STAGE_REASON_ROLLOUT),
                                                (Action.SUPERSEDE, vocab.STAGE_REASON_SUPERSEDED),
                                                (Action.REBUILD, vocab.STAGE_REASON_DEPARTED)])
def test_a_replica_given_up_is_leaving(action: Action, reason: str):
    stage = stages.replica_stage(OrdinalPlan(0, action), ObservedInstance(0, [pod()]), None, "wl")
    assert (stage.stage, stage.reason) == (vocab.STAGE_LEAVING, reason)


def test_a_shed_ordinal_with_nothing_running_is_not_listed():
    assert stages.replica_stage(OrdinalPlan(5, Action.SHED), None, None, "wl") is None


def test_held_and_created_replicas_are_queued():
    held = stages.replica_stage(OrdinalPlan(0, Action.WAIT, note="the binding is not ready"), None, None, "wl")
    assert (held.stage, held.reason, held.message) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_HELD,
                                                       "the binding is not ready")
    created = stages.replica_stage(OrdinalPlan(0, Action.CREATE), None, None, "wl")
    assert (created.stage, created.reason) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_CREATING)


def test_a_ready_replica_is_not_listed():
    entry = OrdinalPlan(0, Action.KEEP, ready=True)
    assert stages.replica_stage(entry, ObservedInstance(0, [pod()]), workload("team-a", "wl"), "wl") is None


@pytest.mark.parametrize("junk", [[], "x", 3, {"state": []}])
def test_a_forged_container_status_is_read_as_nothing_said(junk: Any):
    p = pod(containers=[{"name": "engine", "state": junk, "lastState": junk}])
    assert stages.pod_stage(p) is not None  # a stage (created or starting), never an exception


def test_since_moves_only_with_the_stage():
    assert stages.since((vocab.STAGE_PULLING, "2026-11-29T11:00:00Z"), vocab.STAGE_PULLING, NOW) == "2026-11-29T11:00:00Z"
    assert stages.since((vocab.STAGE_QUEUED, "2026-11-29T11:00:00Z"), vocab.STAGE_PULLING, NOW) == NOW
    assert stages.since((vocab.STAGE_PULLING, "not a time"), vocab.STAGE_PULLING, NOW) == NOW
    assert stages.since(None, vocab.STAGE_PULLING, NOW) == NOW


# --- through the sync ------------------------------------------------------------------------------


def _observed(result: SyncResult, pod_status: dict[str, Any], node: str | None = "node-a") -> list[dict[str, Any]]:
    out = []
    for i, p in enumerate(pods(result)):
        observed = copy.deepcopy(p)
        observed["metadata"]["uid"] = f"uid-{i}"
        if node:
            observed["spec"]["nodeName"] = node
        observed["status"] = copy.deepcopy(pod_status)
        out.append(observed)
    return out


def _workloads(observed: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    return [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME], **kwargs) for p in observed]


def _pass(md: dict[str, Any], observed: list[dict[str, Any]], related: list[dict[str, Any]], now: str,
          settings: SyncSettings | None = None) -> SyncResult:
    result = reconcile(hook_request(request(md, children=observed, extra_related=related)), settings or SyncSettings(),
                       now=now)
    assert isinstance(result, SyncResult)
    return result


PULL_STATUS = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
               "containerStatuses": [waiting("ErrImageNeverPull", "Container image \"stub:missing\" is not present "
                                                                  "with pull policy of Never")]}


def test_the_first_pass_lists_every_new_replica_as_queued_creating():
    role = sync(parent("qwen-chat")).status["roles"][0]
    assert [e["stage"] for e in role["notReady"]] == [vocab.STAGE_QUEUED] * 4
    assert {e["reason"] for e in role["notReady"]} == {vocab.STAGE_REASON_CREATING}
    assert all(e["since"] == NOW for e in role["notReady"])


def test_a_replica_stuck_in_one_stage_writes_a_byte_identical_status_on_every_pass():
    """The churn proof: a pass reads back the status the last one wrote (as Metacontroller hands
    it), and while nothing observed changes, every later pass, hours apart, writes the same bytes."""
    md = parent("qwen-chat")
    observed = _observed(sync(md), PULL_STATUS)
    related = _workloads(observed)
    first = _pass(md, observed, related, NOW)
    written = json.dumps(first.status, sort_keys=True)
    for step in range(1, 50):
        md = copy.deepcopy(md)
        md["status"] = json.loads(written)
        again = _pass(md, observed, related, later(step * 97))
        assert json.dumps(again.status, sort_keys=True) == written, f"pass {step} rewrote the status"
    entry = first.status["roles"][0]["notReady"][0]
    assert (entry["stage"], entry["reason"], entry["since"]) == (vocab.STAGE_PULLING, "ErrImageNeverPull", NOW)


def test_since_is_carried_over_and_moves_when_the_stage_does():
    md = parent("qwen-chat")
    observed = _observed(sync(md), PULL_STATUS)
    related = _workloads(observed)
    md["status"] = _pass(md, observed, related, NOW).status
    starting = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [running_container()]}
    moved = _pass(md, _observed(sync(parent("qwen-chat")), starting), related, later(300)).status
    entry = moved["roles"][0]["notReady"][0]
    assert (entry["stage"], entry["since"]) == (vocab.STAGE_STARTING, later(300))
    assert entry["startupBudgetSeconds"] == vocab.STARTUP_PERIOD_SECONDS * vocab.STARTUP_FAILURE_THRESHOLD


def _short_of_quota() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A deployment whose Pods wait for quota: (it, its Pods, their Workloads with Kueue's message)."""
    md = parent("qwen-chat")
    observed = _observed(sync(md), {"phase": "Pending"}, node=None)
    related = _workloads(observed, reserved=False, admitted=False)
    for wl in related:
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                       "message": KUEUE_QUOTA_MESSAGE}]
    return md, observed, related


def test_a_quota_shortfall_lists_kueues_message_through_the_sync():
    md, observed, related = _short_of_quota()
    entry = _pass(md, observed, related, NOW).status["roles"][0]["notReady"][0]
    assert (entry["stage"], entry["reason"]) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_QUOTA_PENDING)
    assert KUEUE_QUOTA_MESSAGE in entry["message"]


def test_a_ready_deployment_lists_nothing():
    md = parent("qwen-chat")
    observed = _observed(sync(md), {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    role = _pass(md, observed, _workloads(observed), NOW).status["roles"][0]
    assert "notReady" not in role and "notReadyUnlisted" not in role


def test_the_list_is_bounded_and_the_rest_counted():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["replicas"] = vocab.MAX_LISTED_NOT_READY + 3
    role = sync(md).status["roles"][0]
    assert [e["ordinal"] for e in role["notReady"]] == list(range(vocab.MAX_LISTED_NOT_READY))
    assert role["notReadyUnlisted"] == 3


def _stuck(result: SyncResult) -> list[Any]:
    return [i for i in result.intents if getattr(i, "reason", None) == vocab.EVENT_REPLICA_STUCK]


def test_replica_stuck_is_told_once_per_stage_past_the_threshold():
    settings = SyncSettings(replica_stuck_after_seconds=600)
    md = parent("qwen-chat")
    observed = _observed(sync(md), PULL_STATUS)
    related = _workloads(observed)
    md["status"] = _pass(md, observed, related, NOW, settings).status
    assert _stuck(_pass(md, observed, related, later(599), settings)) == []
    events = _stuck(_pass(md, observed, related, later(600), settings))
    assert len(events) == 4 and all(e.type == vocab.EVENT_TYPE_WARNING for e in events)
    assert vocab.STAGE_PULLING in events[0].message and "ErrImageNeverPull" in events[0].message
    assert "qwen-chat-server-r0" in events[0].message
    # A later pass names the same occurrences (so nothing new is created): one Event per stage.
    assert [e.name for e in _stuck(_pass(md, observed, related, later(5000), settings))] == [e.name for e in events]


def test_a_long_message_is_cut_to_the_limit():
    stage = stages.Stage(vocab.STAGE_SCHEDULING, "x" * 500, "m" * 100_000)
    wired = stages.ReplicaStage("server", 0, 0, stage, NOW).wire()
    assert len(wired["message"]) == stages.MESSAGE_LIMIT and len(wired["reason"]) == stages.REASON_LIMIT


KUEUE_PREEMPTED_MESSAGE = ("Preempted to accommodate a workload (UID: 0a1b, JobUID: UNKNOWN) due to reclamation within "
                           "the cohort; preemptor path: /pool/lender; preemptee path: /pool/borrower")


def test_a_replica_rebuilt_after_a_preemption_stays_queued_evicted_with_kueues_words_until_admitted():
    """Kueue deletes the preempted Workload with its Pods; the rebuilt replica's new Workload waits
    for quota. The last written status (Leaving: evicted by Kueue) is the one place left that says
    why: the Queued entry keeps Kueue's words, on every pass alike, until Kueue admits it again."""
    md, observed, related = _short_of_quota()
    role = sync(md).status["roles"][0]["name"]
    md["status"] = {"roles": [{"name": role, "notReady": [
        {"ordinal": 0, "stage": vocab.STAGE_LEAVING, "reason": vocab.STAGE_REASON_DEPARTED, "since": NOW,
         "message": f"{stages.EVICTED_BY}{KUEUE_PREEMPTED_MESSAGE}; rebuilt whole"}]}]}
    first = _pass(md, observed, related, later(5))
    entry, other = first.status["roles"][0]["notReady"][:2]
    assert (entry["stage"], entry["reason"], entry["since"]) == (vocab.STAGE_QUEUED, vocab.STAGE_REASON_EVICTED, later(5))
    assert KUEUE_QUOTA_MESSAGE in entry["message"] and entry["message"].endswith(KUEUE_PREEMPTED_MESSAGE), entry
    assert other["reason"] == vocab.STAGE_REASON_QUOTA_PENDING  # never evicted: nothing carried
    md["status"] = json.loads(json.dumps(first.status))
    assert _pass(md, observed, related, later(600)).status == first.status

    # Admitted again (quota reserved, our check pending): the eviction is behind it.
    reserved = _workloads(observed, reserved=True, admitted=False)
    entry = _pass(md, observed, reserved, later(700)).status["roles"][0]["notReady"][0]
    assert entry["stage"] == vocab.STAGE_ADMITTING and KUEUE_PREEMPTED_MESSAGE not in entry["message"]


def test_an_eviction_is_kept_while_the_departed_replicas_pods_terminate():
    terminating = stages.Stage(vocab.STAGE_LEAVING, vocab.STAGE_REASON_DEPARTED,
                               "Pod p-0 is being deleted; rebuilt whole once it is gone")
    kept = stages.carry_eviction(terminating, KUEUE_PREEMPTED_MESSAGE)
    assert (kept.stage, kept.reason) == (vocab.STAGE_LEAVING, vocab.STAGE_REASON_DEPARTED)
    assert kept.message == f"{terminating.message}; {stages.EVICTED_BY}{KUEUE_PREEMPTED_MESSAGE}"
    assert stages.carry_eviction(kept, KUEUE_PREEMPTED_MESSAGE) == kept  # found again, said once
    assert stages.previous_evictions({"roles": [{"name": "main", "notReady": [
        {"ordinal": 0, "stage": kept.stage, "message": kept.message}]}]}, "main") == {0: KUEUE_PREEMPTED_MESSAGE}


@pytest.mark.parametrize("stage, reason", [(vocab.STAGE_QUEUED, vocab.STAGE_REASON_HELD),
                                           (vocab.STAGE_ADMITTING, vocab.STAGE_REASON_ADMISSION_CHECK),
                                           (vocab.STAGE_PULLING, vocab.STAGE_REASON_CONTAINER_CREATING)])
def test_an_eviction_is_carried_only_while_the_rebuilt_replica_waits_for_kueue(stage: str, reason: str):
    waiting_stage = stages.Stage(stage, reason, "its own message")
    assert stages.carry_eviction(waiting_stage, KUEUE_PREEMPTED_MESSAGE) is waiting_stage
    queued = stages.Stage(vocab.STAGE_QUEUED, vocab.STAGE_REASON_QUOTA_PENDING, "Workload wl: no quota")
    assert stages.carry_eviction(queued, None) is queued


def test_the_eviction_words_are_found_in_a_leaving_or_evicted_entry_only():
    evicted = stages.workload_stage(
        {"status": {"conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted",
                                    "message": KUEUE_PREEMPTED_MESSAGE}]}}, "wl")
    assert evicted is not None
    status = {"roles": [{"name": "main", "notReady": [
        {"ordinal": 0, "stage": evicted.stage, "message": evicted.message},
        {"ordinal": 1, "stage": vocab.STAGE_LEAVING, "message": "Pod p-1 failed: Error; rebuilt whole"},
        {"ordinal": 2, "stage": vocab.STAGE_STARTING, "message": f"{stages.EVICTED_BY}forged"},
        {"ordinal": 3, "stage": vocab.STAGE_LEAVING, "message": 7}]}]}
    assert stages.previous_evictions(status, "main") == {0: KUEUE_PREEMPTED_MESSAGE}
    assert stages.previous_evictions(status, "other") == {}


def _incarnation(name: str, number: int, fingerprint: str, **kwargs: Any) -> dict[str, Any]:
    p = pod(name, **kwargs)
    p["metadata"].setdefault("annotations", {}).update({vocab.ANNOTATION_INCARNATION: str(number),
                                                         vocab.ANNOTATION_FINGERPRINT: fingerprint})
    p["metadata"].setdefault("labels", {})[vocab.LABEL_KUEUE_POD_GROUP_NAME] = f"g-{number % 2}"
    return p


def test_a_replacement_beside_its_stopping_predecessor_reads_leaving_for_the_predecessors_reason():
    """docs/kueue.md#incarnation-slots: the replacement waits for its predecessor, which is what the
    entry says."""
    stopping = _incarnation("r0-a", 0, "old")
    stopping["metadata"]["deletionTimestamp"] = NOW
    replacement = _incarnation("r0-b", 1, "new")
    rolled = stages.predecessor_stage(ObservedInstance(0, [replacement], [stopping]), None)
    assert (rolled.stage, rolled.reason) == (vocab.STAGE_LEAVING, vocab.STAGE_REASON_ROLLOUT)
    same_render = _incarnation("r0-b", 1, "old")
    departed = stages.predecessor_stage(ObservedInstance(0, [same_render], [stopping]), None)
    assert (departed.stage, departed.reason) == (vocab.STAGE_LEAVING, vocab.STAGE_REASON_DEPARTED)
    assert "is being deleted" in departed.message
