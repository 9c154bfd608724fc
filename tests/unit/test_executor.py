"""The executor turns intents into exactly the API calls the RBAC allows, idempotently, and only
for the parent that exists with the request's UID (docs/metacontroller.md#trust)."""

from __future__ import annotations

import asyncio

import pytest

from app import vocab
from app.control.intents import DeleteWorkload, RecordEvent, SetAdmissionCheck
from app.kube.executor import Executor, ParentMismatch, ParentRef, workload_check_body
from app.render import names

QWEN = ParentRef("team-a", "qwen", "uid-1")
GROUP_0 = names.pod_group("team-a", "qwen", "server", 0)
GROUP_1 = names.pod_group("team-a", "qwen", "server", 1)


def workload(name, owners=("qwen-server-r0-abc",), uid="wl-uid"):
    return {"metadata": {"name": name, "namespace": "team-a", "uid": uid,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": o, "uid": o} for o in owners]}}


class FakeKube:
    def __init__(self, admission_check=None, parent_uid="uid-1", workloads=None):
        self.calls: list[tuple] = []
        self._admission_check = admission_check
        self.parent_uid = parent_uid
        self.workloads = {GROUP_0: workload(GROUP_0)} if workloads is None else workloads

    async def model_deployment(self, namespace, name):
        self.calls.append(("get_parent", namespace, name))
        if self.parent_uid is None or (namespace, name) != ("team-a", "qwen"):
            return None
        return {"metadata": {"name": name, "namespace": namespace, "uid": self.parent_uid},
                "spec": {"roles": [{"name": "server"}]}}

    async def workload(self, namespace, name):
        return self.workloads.get(name)

    async def delete_workload(self, namespace, name, uid):
        self.calls.append(("delete_workload", namespace, name, uid))
        return True

    async def create_event(self, body):
        self.calls.append(("create_event", body))

    async def apply_workload_check(self, namespace, name, body):
        self.calls.append(("apply_workload_check", namespace, name, body))

    async def admission_check(self):
        return self._admission_check

    async def apply_admission_check(self, spec, status):
        self.calls.append(("apply_admission_check", spec, status))


def run(coro):
    return asyncio.run(coro)


def test_intents_become_their_api_calls():
    kube = FakeKube()
    run(Executor(kube).run(QWEN, [
        DeleteWorkload("team-a", GROUP_0, "scale-down"),
        RecordEvent("team-a", "qwen", "uid-1", "qwen.replicaleaving.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "bye"),
        SetAdmissionCheck("team-a", GROUP_1, "7", "Ready", "all 4 replicas", "2026-11-29T00:00:00Z"),
    ]))
    assert kube.calls[0] == ("get_parent", "team-a", "qwen")
    # Deleted with the Workload's own uid as the precondition.
    assert kube.calls[1] == ("delete_workload", "team-a", GROUP_0, "wl-uid")
    event = kube.calls[2][1]
    assert event["metadata"] == {"name": "qwen.replicaleaving.1", "namespace": "team-a"}
    assert event["involvedObject"]["kind"] == "ModelDeployment" and event["involvedObject"]["uid"] == "uid-1"
    assert event["reason"] == vocab.EVENT_REPLICA_LEAVING
    _, namespace, name, body = kube.calls[3]
    assert (namespace, name) == ("team-a", GROUP_1)
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["status"]["admissionChecks"] == [{"name": vocab.ADMISSION_CHECK_NAME, "state": "Ready",
                                                   "message": "all 4 replicas",
                                                   "lastTransitionTime": "2026-11-29T00:00:00Z"}]


def test_workload_check_body_is_a_server_side_apply_of_our_entry_only():
    body = workload_check_body(SetAdmissionCheck("ns", "w", "", "Pending", "m", "t"))
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    assert "resourceVersion" not in body["metadata"]
    assert set(body["status"]) == {"admissionChecks"}


def test_the_keeper_writes_status_only_when_the_check_is_not_active():
    inactive = FakeKube(admission_check=None)
    run(Executor(inactive).keep_admission_check_active())
    (_, spec, status), = inactive.calls
    assert spec["spec"] == {"controllerName": vocab.ADMISSION_CHECK_CONTROLLER}
    assert status["status"]["conditions"][0]["type"] == "Active"
    active = FakeKube(admission_check={"status": {"conditions": [{"type": "Active", "status": "True"}]}})
    run(Executor(active).keep_admission_check_active())
    assert active.calls == [("apply_admission_check", inactive.calls[0][1], None)]


def test_without_an_api_server_intents_are_skipped():
    run(Executor(None).run(QWEN, [DeleteWorkload("ns", "w", "x")]))
    run(Executor(None).keep_admission_check_active())


def test_a_pass_without_intents_reads_nothing():
    kube = FakeKube()
    run(Executor(kube).run(QWEN, []))
    assert kube.calls == []


@pytest.mark.parametrize("parent_uid, status", [(None, 404), ("uid-other", 409)])
def test_a_parent_that_does_not_exist_with_the_uid_gets_no_write(parent_uid, status):
    kube = FakeKube(parent_uid=parent_uid)
    with pytest.raises(ParentMismatch) as raised:
        run(Executor(kube).run(QWEN, [
            DeleteWorkload("team-a", GROUP_0, "scale-down"),
            RecordEvent("team-a", "qwen", "uid-1", "qwen.x.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "bye"),
        ]))
    assert raised.value.status_code == status
    assert "no side effect" in str(raised.value)
    assert kube.calls == [("get_parent", "team-a", "qwen")]


def test_intents_about_anything_but_the_parent_are_dropped():
    elsewhere = names.pod_group("kube-system", "qwen", "server", 0)
    other_deployment = names.pod_group("team-a", "other", "server", 0)
    kube = FakeKube(workloads={elsewhere: workload(elsewhere), other_deployment: workload(other_deployment)})
    run(Executor(kube).run(QWEN, [
        DeleteWorkload("kube-system", elsewhere, "forged"),
        DeleteWorkload("team-a", other_deployment, "forged"),
        DeleteWorkload("team-a", "not-a-pod-group", "forged"),
        RecordEvent("kube-system", "qwen", "uid-1", "qwen.x.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "forged"),
        RecordEvent("team-a", "other", "uid-1", "other.x.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "forged"),
        RecordEvent("team-a", "qwen", "uid-2", "qwen.x.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "forged"),
        SetAdmissionCheck("team-a", other_deployment, "7", "Ready", "forged", "2026-11-29T00:00:00Z"),
    ]))
    assert kube.calls == [("get_parent", "team-a", "qwen")]


def test_a_workload_owned_by_pods_of_another_replica_is_left_alone():
    kube = FakeKube(workloads={GROUP_0: workload(GROUP_0, owners=("qwen-server-r1-abc",)),
                               GROUP_1: workload(GROUP_1, owners=())})
    run(Executor(kube).run(QWEN, [DeleteWorkload("team-a", GROUP_0, "scale-down"),
                                  DeleteWorkload("team-a", GROUP_1, "scale-down")]))
    # GROUP_1 has no owners left (its Pods are gone): its name ties it to the replica.
    assert kube.calls == [("get_parent", "team-a", "qwen"), ("delete_workload", "team-a", GROUP_1, "wl-uid")]


def test_a_workload_already_gone_is_not_deleted():
    kube = FakeKube(workloads={})
    run(Executor(kube).run(QWEN, [DeleteWorkload("team-a", GROUP_0, "scale-down")]))
    assert kube.calls == [("get_parent", "team-a", "qwen")]


def test_the_workload_delete_carries_a_uid_precondition():
    """app/kube/client.py sends DeleteOptions{preconditions.uid} (lightkube's delete() sends no body);
    a 409 (the name now holds another object) leaves it alone, a 404 counts as done."""
    import json

    import httpx2
    from lightkube import KubeConfig

    from app.kube.client import Kube

    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x"})
    kube = Kube(config, timeout=1)
    sent = []
    answers = iter([200, 409, 404])

    async def send(request):
        sent.append(request)
        code = next(answers)
        body = {"kind": "Status", "apiVersion": "v1", "status": "Success" if code == 200 else "Failure", "code": code,
                "message": "m", "reason": "Conflict" if code == 409 else "NotFound"}
        return httpx2.Response(code, json=body, request=request)

    kube.client._client.send = send  # type: ignore[method-assign]
    assert run(kube.delete_workload("team-a", GROUP_0, "wl-uid")) is True
    assert run(kube.delete_workload("team-a", GROUP_0, "wl-uid")) is False
    assert run(kube.delete_workload("team-a", GROUP_0, "wl-uid")) is True
    request = sent[0]
    assert request.method == "DELETE"
    assert request.url.path == f"/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/{GROUP_0}"
    assert json.loads(request.content) == {"apiVersion": "v1", "kind": "DeleteOptions",
                                           "preconditions": {"uid": "wl-uid"}}
    run(kube.close())


# --- cheaper, not looser: the request's copy, remembered confirmations, writes not repeated ----------


def copy_delete(name=GROUP_0, uid="wl-uid", owners=(("Pod", "qwen-server-r0-abc"),)):
    return DeleteWorkload("team-a", name, "rollout", uid=uid, owners=owners)


def test_a_delete_carrying_the_requests_copy_reads_no_workload():
    kube = FakeKube(workloads={})  # a read would find nothing: the copy alone decides
    run(Executor(kube).run(QWEN, [copy_delete()]))
    assert kube.calls == [("get_parent", "team-a", "qwen"), ("delete_workload", "team-a", GROUP_0, "wl-uid")]


def test_the_copys_owners_must_tie_it_to_the_replica():
    kube = FakeKube()
    run(Executor(kube).run(QWEN, [copy_delete(owners=(("Pod", "qwen-server-r1-abc"),)),
                                  copy_delete(name=GROUP_1, owners=(("ReplicaSet", "qwen-server-r1-abc"),))]))
    assert kube.calls == [("get_parent", "team-a", "qwen")]


def test_a_confirmed_parent_is_not_read_again_until_the_confirmation_ages():
    now = [0.0]
    kube = FakeKube()
    executor = Executor(kube, clock=lambda: now[0])
    check = SetAdmissionCheck("team-a", GROUP_1, "7", "Ready", "m", "2026-11-29T00:00:00Z")
    run(executor.run(QWEN, [check]))
    run(executor.run(QWEN, [SetAdmissionCheck("team-a", GROUP_1, "8", "Ready", "m", "t")]))
    assert [c[0] for c in kube.calls] == ["get_parent", "apply_workload_check", "apply_workload_check"]
    now[0] = executor.confirmed.seconds
    run(executor.run(QWEN, [SetAdmissionCheck("team-a", GROUP_1, "9", "Ready", "m", "t")]))
    assert [c[0] for c in kube.calls][-2:] == ["get_parent", "apply_workload_check"]


def test_a_remembered_confirmation_never_stands_for_another_uid():
    kube = FakeKube()
    executor = Executor(kube)
    run(executor.run(QWEN, [copy_delete()]))
    kube.parent_uid = "uid-2"  # deleted and created again under the same name
    recreated = ParentRef("team-a", "qwen", "uid-2")
    # The new parent's UID is not the remembered one: read, and remembered in its place.
    run(executor.run(recreated, [copy_delete(uid="wl-new")]))
    with pytest.raises(ParentMismatch) as raised:
        run(executor.run(QWEN, [copy_delete(uid="wl-newer")]))
    assert raised.value.status_code == 409
    assert [c[0] for c in kube.calls] == ["get_parent", "delete_workload", "get_parent", "delete_workload",
                                          "get_parent"]


def test_a_finalize_pass_reads_the_parent_afresh_and_forgets_it():
    kube = FakeKube()
    executor = Executor(kube)
    run(executor.run(QWEN, [copy_delete()]))
    finalizing = ParentRef("team-a", "qwen", "uid-1", finalizing=True)
    run(executor.run(finalizing, [copy_delete(uid="wl-2")]))
    run(executor.run(QWEN, [copy_delete(uid="wl-3")]))
    assert [c[0] for c in kube.calls] == ["get_parent", "delete_workload", "get_parent", "delete_workload",
                                          "get_parent", "delete_workload"]


def test_a_workload_of_a_role_the_memory_does_not_know_reads_the_parent_again():
    kube = FakeKube()
    executor = Executor(kube)
    run(executor.run(QWEN, [copy_delete()]))
    other_role = names.pod_group("team-a", "qwen", "decode", 0)
    run(executor.run(QWEN, [SetAdmissionCheck("team-a", other_role, "7", "Ready", "forged", "t")]))
    assert [c[0] for c in kube.calls] == ["get_parent", "delete_workload", "get_parent"]


def test_writes_the_lagging_copy_does_not_show_yet_are_not_repeated():
    kube = FakeKube()
    executor = Executor(kube)
    event = RecordEvent("team-a", "qwen", "uid-1", "qwen.x.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "bye")
    check = SetAdmissionCheck("team-a", GROUP_1, "7", "Ready", "m", "2026-11-29T00:00:00Z")
    run(executor.run(QWEN, [copy_delete(), event, check]))
    run(executor.run(QWEN, [copy_delete(), event, check]))  # the same copy: all three already done
    assert [c[0] for c in kube.calls] == ["get_parent", "delete_workload", "create_event", "apply_workload_check"]
    # A copy that moved (another resourceVersion, another Workload UID) is acted on.
    run(executor.run(QWEN, [copy_delete(uid="wl-2"), SetAdmissionCheck("team-a", GROUP_1, "8", "Ready", "m", "t")]))
    assert [c[0] for c in kube.calls][4:] == ["delete_workload", "apply_workload_check"]


def test_a_failed_write_is_not_remembered():
    class Failing(FakeKube):
        async def apply_workload_check(self, namespace, name, body):
            from lightkube.core.exceptions import ApiError
            import httpx2

            self.calls.append(("apply_workload_check", namespace, name, body))
            response = httpx2.Response(409, json={"kind": "Status", "code": 409, "message": "conflict"},
                                       request=httpx2.Request("PATCH", "http://x"))
            raise ApiError(response=response)

    kube = Failing()
    executor = Executor(kube)
    check = SetAdmissionCheck("team-a", GROUP_1, "7", "Ready", "m", "t")
    run(executor.run(QWEN, [check]))
    run(executor.run(QWEN, [check]))
    assert [c[0] for c in kube.calls] == ["get_parent", "apply_workload_check", "apply_workload_check"]


def test_the_recent_memory_is_bounded_in_size_and_age():
    from app.kube.executor import Recent

    now = [0.0]
    recent: Recent[str, int] = Recent(2, 10.0, clock=lambda: now[0])
    for key in "abc":
        recent.put(key, 1)
    assert recent.get("a") is None and recent.get("c") == 1
    now[0] = 10.0
    assert recent.get("c") is None


def test_the_mutating_webhooks_read_asks_for_instance_types_only():
    """Kube.world_for(instance_types_only=True): one GET per InstanceType, no artifact, Binding or lists."""
    import copy as copy_
    import pathlib

    import httpx2
    import yaml
    from lightkube import KubeConfig

    from app.api.v1 import ModelDeployment
    from app.kube.client import Kube

    config = KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x"})
    kube = Kube(config, timeout=1)
    paths = []

    async def send(request):
        paths.append(request.url.path)
        name = request.url.path.rsplit("/", 1)[-1]
        body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType", "metadata": {"name": name}}
        return httpx2.Response(200, json=body, request=request)

    kube.client._client.send = send  # type: ignore[method-assign]
    root = pathlib.Path(__file__).resolve().parents[2] / "examples"
    pd = next(d for p in sorted((root / "deployments").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
              if d and d.get("kind") == "ModelDeployment" and (d.get("spec") or {}).get("kvCache"))
    md = copy_.deepcopy(pd)
    md["metadata"].setdefault("namespace", "team-a")
    run(kube.world_for(ModelDeployment.model_validate(md), instance_types_only=True))
    wanted = sorted({r["instanceType"] for r in md["spec"]["roles"]})
    assert sorted(paths) == [f"/apis/worker.gpustack.ai/v1/instancetypes/{name}" for name in wanted]
    run(kube.close())


def test_a_teardown_after_its_answer_runs_after_the_last_one_of_its_parent_and_never_raises():
    """docs/metacontroller.md#finalize: the deletes of two unfinished teardowns of one parent do not
    race (the later skips what the earlier deleted), and a failure is handed on, not raised."""
    finalizing = ParentRef("team-a", "qwen", "uid-1", finalizing=True)
    failures: list[BaseException] = []

    async def two_passes() -> None:
        kube = FakeKube()
        executor = Executor(kube)
        executor.run_after_answer(finalizing, [copy_delete()], failures.append)
        executor.run_after_answer(finalizing, [copy_delete(), copy_delete(uid="wl-2")], failures.append)
        assert len(executor.after_answer) == 1
        await asyncio.wait([executor.after_answer[("team-a", "qwen")]])
        assert executor.after_answer == {}
        assert [c[-1] for c in kube.calls if c[0] == "delete_workload"] == ["wl-uid", "wl-2"]

        taken = FakeKube(parent_uid="uid-2")  # the name holds another deployment now
        executor = Executor(taken)
        executor.run_after_answer(finalizing, [copy_delete()], failures.append)
        await asyncio.wait(list(executor.after_answer.values()))
        assert [c[0] for c in taken.calls] == ["get_parent"]

    run(two_passes())
    assert [(type(f).__name__, getattr(f, "status_code", None)) for f in failures] == [("ParentMismatch", 409)]


def test_a_finalize_whose_parent_is_gone_already_is_done_not_failed():
    """Two replicas: a finalize on the other one answered `finalized: true` and the parent went; this
    replica's teardown of it (after its answer, or in a pass answered now) finds a 404. Nothing is
    written and nothing fails (docs/metacontroller.md#finalize). A sync pass for a parent that does not
    exist still answers 404: that request did not come from Metacontroller for a stored parent."""
    finalizing = ParentRef("team-a", "qwen", "uid-1", finalizing=True)
    failures: list[BaseException] = []

    async def passes() -> None:
        gone = FakeKube(parent_uid=None)
        executor = Executor(gone)
        executor.run_after_answer(finalizing, [copy_delete()], failures.append)
        await asyncio.wait(list(executor.after_answer.values()))
        await executor.run(finalizing, [copy_delete(uid="wl-2")])
        assert gone.calls == [("get_parent", "team-a", "qwen")] * 2
        with pytest.raises(ParentMismatch) as raised:
            await executor.run(QWEN, [copy_delete(uid="wl-3")])
        assert raised.value.status_code == 404

    run(passes())
    assert failures == []


class SlowDeletes(FakeKube):
    """A Workload delete that takes `seconds` (an API server under load)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.deleted: list[str] = []

    async def delete_workload(self, namespace, name, uid):
        await asyncio.sleep(self.seconds)
        self.deleted.append(uid)
        return True


def test_a_stopping_service_waits_for_the_teardowns_after_their_answers():
    """docs/metacontroller.md#finalize: drain waits for every task still carrying out a finalize's
    deletes (the earlier of two chained passes too) and returns 0 when all finished."""
    finalizing = ParentRef("team-a", "qwen", "uid-1", finalizing=True)
    failures: list[BaseException] = []

    async def stop() -> None:
        kube = SlowDeletes(0.05)
        executor = Executor(kube)
        executor.run_after_answer(finalizing, [copy_delete()], failures.append)
        executor.run_after_answer(finalizing, [copy_delete(uid="wl-2")], failures.append)
        assert len(executor.after_answer_running) == 2
        assert await executor.drain(60.0) == 0
        assert kube.deleted == ["wl-uid", "wl-2"]
        assert executor.after_answer == {} and executor.after_answer_running == set()
        assert await executor.drain(60.0) == 0  # nothing left: returns at once

    run(stop())
    assert failures == []


def test_a_teardown_that_outlasts_the_drain_bound_is_cut_short_not_counted():
    finalizing = ParentRef("team-a", "qwen", "uid-1", finalizing=True)
    failures: list[BaseException] = []

    async def stop() -> None:
        kube = SlowDeletes(3600.0)  # never finishes within the bound
        executor = Executor(kube)
        executor.run_after_answer(finalizing, [copy_delete()], failures.append)
        await asyncio.sleep(0)  # the task starts its delete
        assert await executor.drain(0.05) == 1
        assert kube.deleted == [] and executor.after_answer_running == set()

    run(stop())
    assert failures == []


def test_the_deadlock_release_is_a_merge_patch_held_to_the_copy_and_names_only_our_mark():
    from app.control.intents import SetWorkloadActive
    from app.kube.client import workload_active_body

    off = workload_active_body(SetWorkloadActive("team-a", GROUP_1, "wl-1", "7", False, "2026-11-30T00:00:00Z"))
    assert off == {"metadata": {"uid": "wl-1", "resourceVersion": "7",
                                "annotations": {vocab.ANNOTATION_GANG_RELEASED_AT: "2026-11-30T00:00:00Z"}},
                   "spec": {"active": False}}
    on = workload_active_body(SetWorkloadActive("team-a", GROUP_1, "wl-1", "8", True))
    assert on["spec"] == {"active": True} and on["metadata"]["annotations"] == {vocab.ANNOTATION_GANG_RELEASED_AT: None}

    class Kube(FakeKube):
        async def set_workload_active(self, intent):
            self.calls.append(("set_workload_active", intent.namespace, intent.workload))
            return True

    kube = Kube()
    run(Executor(kube).run(QWEN, [SetWorkloadActive("team-a", GROUP_1, "wl-1", "7", False, "2026-11-30T00:00:00Z"),
                                  SetWorkloadActive("team-a", "not-ours", "wl-2", "7", False, "2026-11-30T00:00:00Z")]))
    assert [c for c in kube.calls if c[0] == "set_workload_active"] == [("set_workload_active", "team-a", GROUP_1)]
