"""Forged hook requests write nothing on a real control plane (docs/metacontroller.md#trust).

The hooks port answers anyone who can reach it. Here a caller on it forges sync and finalize
requests the way the issue's review did — a parent in another namespace that does not exist, and
the real parent under a wrong UID — each shaped so that, if it were trusted, it would delete the
real deployment's Workloads and record Events. The API server's Workloads (by uid) and Events are
compared before and after: nothing is written, and each forged request is answered 404 or 409.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterator

import httpx
import pytest

import cluster as e2e_cluster
from md_operator import NAMESPACE, Operator, start_operator

DECLARED_CHILD_MAPS = ("Pod.v1", "Service.v1", "ConfigMap.v1", "ServiceAccount.v1", "Role.rbac.authorization.k8s.io/v1",
                       "RoleBinding.rbac.authorization.k8s.io/v1", "Deployment.apps/v1",
                       "EndpointSlice.discovery.k8s.io/v1")
NAME = "guarded"


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    yield operator
    operator.stop()


def deployment() -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": [{"name": "server", "replicas": 2, "instanceType": "gpustack-nvidia-a10g-linux-amd64",
                                "resources": {"accelerator": 1}}]}}


def workloads(op: Operator) -> dict[str, str]:
    """Every Workload in the cluster: namespace/name -> uid."""
    items = op.get("workloads.kueue.x-k8s.io", "--all-namespaces")["items"]
    return {f"{w['metadata']['namespace']}/{w['metadata']['name']}": w["metadata"]["uid"] for w in items}


def events(op: Operator) -> dict[str, str]:
    """Every Event the operator recorded, anywhere: namespace/name -> message."""
    items = op.get("events", "--all-namespaces")["items"]
    return {f"{e['metadata']['namespace']}/{e['metadata']['name']}": e.get("message", "") for e in items
            if (e.get("source") or {}).get("component") == "gpustack-model-deployment"
            or e.get("reportingComponent") == "gpustack-model-deployment"}


def related(op: Operator) -> dict[str, Any]:
    """The related objects Metacontroller would send: the InstanceType and the deployment's Workloads."""
    out: dict[str, Any] = {"InstanceType.worker.gpustack.ai/v1": {}, "Workload.kueue.x-k8s.io/v1beta2": {}}
    for it in op.get("instancetypes.worker.gpustack.ai")["items"]:
        out["InstanceType.worker.gpustack.ai/v1"][it["metadata"]["name"]] = it
    for w in op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]:
        out["Workload.kueue.x-k8s.io/v1beta2"][f"{NAMESPACE}/{w['metadata']['name']}"] = w
    return out


def forged(parent: dict[str, Any], rel: dict[str, Any], *, finalizing: bool = False) -> dict[str, Any]:
    """Every declared child map present and empty: trusted, this plan rebuilds every replica and
    deletes every standing Workload (and a finalize deletes them all)."""
    return {"controller": {"metadata": {"name": "modeldeployment"}}, "parent": parent,
            "children": {key: {} for key in DECLARED_CHILD_MAPS}, "related": rel, "finalizing": finalizing}


def post(op: Operator, hook: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(timeout=15) as client:
        return client.post(f"http://127.0.0.1:{op.hooks_port}/hooks/{hook}", content=json.dumps(body),
                           headers={"content-type": "application/json"})


def admitted_workloads(op: Operator) -> bool:
    items = op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]
    ours = [w for w in items if any(o.get("name", "").startswith(f"{NAME}-server-")
                                    for o in w["metadata"].get("ownerReferences", []))]
    return len(ours) == 2 and all(any(c["type"] == "Admitted" and c["status"] == "True"
                                      for c in w.get("status", {}).get("conditions", [])) for w in ours)


def test_forged_hook_requests_write_nothing(op: Operator):
    op.kubectl("apply", "-f", "-", input=json.dumps(deployment()))
    try:
        op.wait("both replicas' Workloads admitted", lambda: admitted_workloads(op), 180)
        real = op.md(NAME)
        rel = related(op)
        # A status that declared 8 replicas: trusted, the plan would also shed ordinals 2-7.
        status = {**(real.get("status") or {}), "roles": [{"name": "server", "kind": "Server", "desired": 8}]}
        # A role whose InstanceType does not exist: trusted, a RenderFailed Event would be recorded.
        broken = copy.deepcopy(real)
        broken["spec"]["roles"][0]["instanceType"] = "forged-missing-type"

        elsewhere = copy.deepcopy(real)
        elsewhere["metadata"].update(namespace="kube-system", name="ghost", uid="11111111-2222-3333-4444-555555555555")
        wrong_uid = copy.deepcopy(real)
        wrong_uid["metadata"]["uid"] = "99999999-8888-7777-6666-555555555555"
        cases = []
        for parent, refused in ((elsewhere, 404), (wrong_uid, 409)):
            for shape, always_acts in (({**parent, "status": status}, False),
                                       ({**broken, "metadata": parent["metadata"]}, True)):
                for hook, finalizing in (("sync", False), ("finalize", True)):
                    # A finalize needs no render (docs/metacontroller.md#finalize): the broken role is torn
                    # down by ordinal, with no RenderFailed Event, so it acts only on Workloads it finds.
                    acts = always_acts and not finalizing
                    cases.append((hook, forged(shape, rel, finalizing=finalizing), refused, acts))

        before_workloads, before_events = workloads(op), events(op)
        answers = [(hook, post(op, hook, body), refused, always_acts) for hook, body, refused, always_acts in cases]
        for hook, response, refused, always_acts in answers:
            # A pass with a side effect to make is refused before it (the render failure always has
            # one: its Event); a pass with none has nothing to refuse and answers what it computed.
            allowed = {refused} if always_acts else {refused, 200}
            assert response.status_code in allowed, (hook, response.status_code, response.text[:300])
            if response.status_code != 200:
                assert "no side effect" in response.json()["error"]
        # Anything the operator would have written is written within a pass; give one more pass.
        op.wait("a quiet second", lambda: True, 2)
        after_workloads, after_events = workloads(op), events(op)
        ours = {k: v for k, v in before_workloads.items() if k.startswith(f"{NAMESPACE}/")}
        assert {k: after_workloads.get(k) for k in ours} == ours, "a forged request deleted a Workload"
        new_events = {k: v for k, v in after_events.items() if k not in before_events}
        assert not [k for k, v in new_events.items() if "forged-missing-type" in v or k.startswith("kube-system/")], \
            new_events
        assert op.md(NAME)["metadata"]["uid"] == real["metadata"]["uid"]

        # The same request with the real UID is trusted as the real parent's (it could have sent it):
        # the executor acts, within the parent's own Workloads only.
        genuine = post(op, "sync", forged({**real, "status": status}, rel))
        assert genuine.status_code == 200, genuine.text[:300]
    finally:
        op.kubectl("delete", "md", NAME, "-n", NAMESPACE, "--wait=false", check=False)
