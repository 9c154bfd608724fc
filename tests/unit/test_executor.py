"""The executor turns intents into exactly the API calls the RBAC allows, idempotently."""

from __future__ import annotations

import asyncio

from app import vocab
from app.control.intents import DeleteWorkload, RecordEvent, SetAdmissionCheck
from app.kube.executor import Executor, workload_check_body


class FakeKube:
    def __init__(self, admission_check=None):
        self.calls: list[tuple] = []
        self._admission_check = admission_check

    async def delete_workload(self, namespace, name):
        self.calls.append(("delete_workload", namespace, name))
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
    run(Executor(kube).run([
        DeleteWorkload("team-a", "gpustack-fnv64-1", "scale-down"),
        RecordEvent("team-a", "qwen", "uid-1", "qwen.replicaleaving.1", vocab.EVENT_REPLICA_LEAVING, "Normal", "bye"),
        SetAdmissionCheck("team-a", "gpustack-fnv64-2", "7", "Ready", "all 4 replicas", "2026-11-29T00:00:00Z"),
    ]))
    assert kube.calls[0] == ("delete_workload", "team-a", "gpustack-fnv64-1")
    event = kube.calls[1][1]
    assert event["metadata"] == {"name": "qwen.replicaleaving.1", "namespace": "team-a"}
    assert event["involvedObject"]["kind"] == "ModelDeployment" and event["involvedObject"]["uid"] == "uid-1"
    assert event["reason"] == vocab.EVENT_REPLICA_LEAVING
    _, namespace, name, body = kube.calls[2]
    assert (namespace, name) == ("team-a", "gpustack-fnv64-2")
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
    run(Executor(None).run([DeleteWorkload("ns", "w", "x")]))
    run(Executor(None).keep_admission_check_active())
