"""The product end to end, the way a user drives it: kubectl against a real control plane.

Real kube-apiserver and etcd, our webhooks over TLS, real Kueue (plain Pod groups, our joint
AdmissionCheck on the ClusterQueues) and real Metacontroller calling our hooks; kwok plays the
GPU nodes and the kubelet.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any, Iterator

import pytest
import yaml

import cluster as e2e_cluster
from md_operator import NAMESPACE, REPO, Operator, start_operator

EXAMPLES = REPO / "examples" / "deployments"


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    yield operator
    operator.stop()


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def small(name: str, *, replicas: int = 2, instance_type: str = "gpustack-nvidia-a10g-linux-amd64",
          cards: int | None = 1, roles: list[dict] | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {"name": "server", "replicas": replicas, "instanceType": instance_type}
    if cards is not None:
        role["resources"] = {"accelerator": cards}
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": roles or [role]}}


def apply(op: Operator, obj: dict[str, Any], *, check: bool = True):
    return op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=check)


def delete(op: Operator, name: str) -> None:
    op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
    op.wait(f"md {name} to be gone",
            lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0, 120)


def serving(op: Operator, name: str) -> list[dict[str, Any]]:
    """Pods of the deployment that are Running and Ready on a node."""
    out = []
    for pod in op.pods(name):
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True" \
                and not pod["metadata"].get("deletionTimestamp"):
            out.append(pod)
    return out


def workloads(op: Operator) -> dict[str, dict[str, Any]]:
    return {w["metadata"]["name"]: w for w in op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]}


def admitted(workload: dict[str, Any]) -> bool:
    return any(c["type"] == "Admitted" and c["status"] == "True"
               for c in workload.get("status", {}).get("conditions", []))


def phase(op: Operator, name: str) -> str | None:
    return op.md(name).get("status", {}).get("phase")


# --- admission ---------------------------------------------------------------------------------


def test_every_example_is_accepted_and_listed(op: Operator):
    for path in sorted(EXAMPLES.glob("*.yaml")):
        result = op.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
        assert result.returncode == 0, (path.name, result.stderr)
    apply(op, small("listed", replicas=1))
    try:
        op.wait("status written", lambda: op.md("listed").get("status", {}).get("phase"), 60)
        listed = op.kubectl("get", "md", "-n", NAMESPACE).stdout
        header, row = listed.splitlines()[:2]
        assert header.split() == ["NAME", "ENGINE", "ROLES", "PHASE", "ENDPOINT", "AGE"]
        assert row.split()[:3] == ["listed", "vLLM", op.md("listed")["status"]["roleSummary"]]
        assert "http://listed-server.team-a.svc:8000" in row
    finally:
        delete(op, "listed")


def test_mutating_webhook_defaults_the_accelerator(op: Operator):
    md = small("defaulted", cards=None, replicas=1)
    out = op.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(md)).stdout
    assert json.loads(out)["spec"]["roles"][0]["resources"]["accelerator"] == 1


def test_explain_is_useful(op: Operator):
    text = op.kubectl("explain", "modeldeployment.spec.roles").stdout
    assert "replicas" in text and "instanceType" in text and "Pods per instance" in text


def test_refusals_name_the_field_path_and_the_way_out(op: Operator):
    md = small("refused")
    md["spec"]["roles"][0]["extraArgs"] = ["--kv_transfer_config", "{}"]
    md["spec"]["roles"][0]["env"] = [{"name": "GPUSTACK_REPLICA_SIZE", "value": "2"}]
    result = apply(op, md, check=False)
    assert result.returncode != 0
    assert "spec.roles[0].extraArgs[0]" in result.stderr and "roles[].command" in result.stderr
    assert "spec.roles[0].env[0]" in result.stderr


def test_frozen_field_edit_is_refused(op: Operator):
    md = small("frozen", replicas=1)
    apply(op, md)
    try:
        edited = copy.deepcopy(md)
        edited["spec"]["roles"][0]["instanceType"] = "gpustack-nvidia-h20-linux-amd64"
        result = apply(op, edited, check=False)
        assert result.returncode != 0 and "spec.roles[0].instanceType" in result.stderr
    finally:
        delete(op, "frozen")


# --- lifecycle ---------------------------------------------------------------------------------


def test_lifecycle_scale_roll_replace_and_delete(op: Operator):
    md = small("life", replicas=2)
    apply(op, md)
    pods = op.wait("2 Pods created", lambda: (lambda p: p if len(p) == 2 else None)(op.pods("life")))
    labels = pods[0]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "server"
    assert labels["kueue.x-k8s.io/queue-name"] == "gpustack-nvidia-a10g-linux-amd64"
    assert labels["kueue.x-k8s.io/pod-group-name"].startswith("gpustack-fnv64-")
    op.wait("both replicas serving", lambda: len(serving(op, "life")) == 2, 180)
    op.wait("phase Ready", lambda: phase(op, "life") == "Ready", 60)
    status = op.md("life")["status"]
    assert status["roleSummary"] == "2S" and status["endpoint"] == "http://life-server.team-a.svc:8000"
    uids = {p["metadata"]["uid"] for p in serving(op, "life")}

    # Scale up: the survivors keep their UIDs.
    md["spec"]["roles"][0]["replicas"] = 3
    apply(op, md)
    op.wait("3 replicas serving", lambda: len(serving(op, "life")) == 3, 180)
    assert uids <= {p["metadata"]["uid"] for p in serving(op, "life")}

    # Scale down: the highest ordinal leaves with its Workload.
    groups = {p["metadata"]["labels"]["modeldeployment.gpustack.ai/pod-ordinal"]:
              p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in op.pods("life")}
    md["spec"]["roles"][0]["replicas"] = 2
    apply(op, md)
    op.wait("ordinal 2 gone", lambda: sorted(
        p["metadata"]["labels"]["modeldeployment.gpustack.ai/pod-ordinal"] for p in op.pods("life")) == ["0", "1"], 120)
    op.wait("its Workload deleted", lambda: groups["2"] not in workloads(op), 60)

    # An image edit rolls one replica at a time.
    md["spec"]["roles"][0]["image"] = "registry.local/vllm:edited"
    apply(op, md)
    seen_at_once_down = 0

    def rolled() -> bool:
        nonlocal seen_at_once_down
        current = serving(op, "life")
        seen_at_once_down = max(seen_at_once_down, 2 - len(current))
        return len(current) == 2 and all(p["spec"]["containers"][0]["image"] == "registry.local/vllm:edited"
                                         for p in current)

    op.wait("rollout finished", rolled, 240)
    assert seen_at_once_down <= 1

    # A deleted Pod is replaced under a new name once the old one is gone.
    victim = serving(op, "life")[0]
    op.kubectl("delete", "pod", victim["metadata"]["name"], "-n", NAMESPACE, "--wait=false")
    op.wait("replacement serving", lambda: len(serving(op, "life")) == 2 and victim["metadata"]["uid"] not in
            {p["metadata"]["uid"] for p in serving(op, "life")}, 180)

    # Delete: finalize removes every Pod and Workload, then the object goes.
    names = {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in op.pods("life")}
    delete(op, "life")
    assert not op.pods("life")
    assert not names & set(workloads(op))


def pd(name: str, cards: int) -> dict[str, Any]:
    roles = [{"name": "prefill", "kind": "Prefill", "replicas": 2, "instanceType": "gpustack-nvidia-h20-linux-amd64",
              "resources": {"accelerator": cards}},
             {"name": "decode", "kind": "Decode", "replicas": 2, "instanceType": "gpustack-nvidia-h20-linux-amd64",
              "resources": {"accelerator": cards}}]
    return small(name, roles=roles)


def test_joint_admission_admits_the_whole_set_or_nothing(op: Operator):
    # 4 groups x 8 cards on a 16-card pool: never all of them, so none may be admitted.
    apply(op, pd("too-big", 8))
    try:
        op.wait("4 Workloads composed", lambda: len([w for w in workloads(op).values()
                                                      if w["metadata"]["name"] in _groups(op, "too-big")]) == 4, 120)
        for _ in range(10):
            ours = [w for w in workloads(op).values() if w["metadata"]["name"] in _groups(op, "too-big")]
            assert not any(admitted(w) for w in ours), "a partial set was admitted"
            op.cp.check_alive()
            time.sleep(1)
        assert op.md("too-big")["status"]["phase"] == "Starting"
    finally:
        delete(op, "too-big")


def _groups(op: Operator, name: str) -> set[str]:
    return {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in op.pods(name)}


def test_two_deployments_contending_for_one_pool_do_not_deadlock(op: Operator):
    # Each needs 4 x 4 = 16 cards of the 16-card pool: only one can run; one of them must.
    apply(op, pd("contend-a", 4))
    apply(op, pd("contend-b", 4))
    try:
        def one_running() -> bool:
            return any(len(serving(op, n)) == 4 for n in ("contend-a", "contend-b"))

        op.wait("one deployment fully admitted and serving", one_running, 240, 2)
    finally:
        delete(op, "contend-a")
        delete(op, "contend-b")


def test_a_new_binding_on_a_mixed_backend_is_refused_from_live_objects(op: Operator):
    # The webhook reads Binding -> pool -> backend live from the API server.
    backend = {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCacheBackend", "metadata": {"name": "mixed"},
               "spec": {"transport": {"protocol": "TCP"},
                        "members": [{"name": "a"}, {"name": "b", "transport": {"protocol": "RDMA"}}]}}
    pool = {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePool", "metadata": {"name": "mixed-pool"},
            "spec": {"backends": [{"name": "mixed"}]}}
    binding = {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePoolBinding",
               "metadata": {"name": "mixed-binding", "namespace": NAMESPACE},
               "spec": {"poolRef": {"name": "mixed-pool"}, "domain": {"name": "mixed", "blockSize": 64,
                                                                       "dtype": "bfloat16"}}}
    for obj in (backend, pool, binding):
        apply(op, obj)
    md = small("mixed-cache", replicas=1)
    md["spec"]["kvCache"] = {"poolRef": {"name": "mixed-binding"}}
    result = op.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(md), check=False)
    assert result.returncode != 0
    assert "spec.kvCache.poolRef.name" in result.stderr and "rdma, tcp" in result.stderr
