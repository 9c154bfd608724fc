"""Smoke tests of the loopback control plane itself (tests/e2e/cluster.py)."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

import cluster as e2e_cluster
from cluster import ControlPlane, wait_until

pytestmark = pytest.mark.e2e

A10G = "gpustack-nvidia-a10g-linux-amd64"


def test_apiserver_answers(control_plane: ControlPlane) -> None:
    with control_plane.http_client(timeout=10) as http:
        assert http.get("/readyz").status_code == 200
        version = http.get("/version").json()
    assert version["gitVersion"] == e2e_cluster.KUBERNETES_VERSION
    out = control_plane.kubectl("get", "--raw", "/api/v1/namespaces/default").stdout
    assert json.loads(out)["metadata"]["name"] == "default"
    control_plane.check_alive()


def test_kwok_nodes_ready(control_plane: ControlPlane) -> None:
    nodes = control_plane.kubectl_json("get", "nodes")["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert set(control_plane.node_names) <= set(by_name)
    for name in control_plane.node_names:
        conds = {c["type"]: c["status"] for c in by_name[name]["status"].get("conditions", [])}
        assert conds.get("Ready") == "True", (name, conds)
    a10g = [n for n in nodes if n["metadata"]["labels"].get(e2e_cluster.INSTANCE_TYPE_LABEL) == A10G]
    assert len(a10g) == 4
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in a10g)
    assert all(e2e_cluster.RACK_LABEL in n["metadata"]["labels"] for n in a10g)
    ascend = [n for n in nodes if n["status"]["allocatable"].get("huawei.com/Ascend910") == "8"]
    assert len(ascend) == 2 and all(n["metadata"]["labels"]["kubernetes.io/arch"] == "arm64" for n in ascend)


def test_garbage_collector_follows_owner_references(control_plane: ControlPlane, e2e_namespace: str) -> None:
    ns = e2e_namespace
    control_plane.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": ns}})
    uid = control_plane.kubectl("get", "configmap", "owner", "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout
    control_plane.apply({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dependent", "namespace": ns, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]},
    })
    control_plane.kubectl("delete", "configmap", "owner", "-n", ns)
    wait_until(lambda: control_plane.kubectl("get", "configmap", "dependent", "-n", ns,
                                             check=False).returncode != 0,
               timeout=60, message="garbage collection of the dependent ConfigMap")


def test_kwok_custom_stage_turns_pods_not_ready(control_plane: ControlPlane, e2e_namespace: str) -> None:
    """Tests may add kwok Stages (kwok serves them from the cluster)."""
    if not control_plane.kwok_stage_crds:
        pytest.skip("kwok stages are fixed in its config file")
    cp, ns = control_plane, e2e_namespace
    label = "e2e.modeldeployment.test/not-ready"
    stage = f"e2e-not-ready-{uuid.uuid4().hex[:6]}"
    cp.apply({
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": stage},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchLabels": {label: "true"},
                "matchExpressions": [
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                     "operator": "In", "values": ["True"]},
                ],
            },
            "next": {"statusTemplate": (
                "conditions:\n"
                "- type: Ready\n  status: \"False\"\n  reason: E2EForcedNotReady\n"
            )},
        },
    })
    try:
        for name, labels in (("plain", {}), ("sick", {label: "true"})):
            cp.apply({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": name, "namespace": ns, "labels": labels},
                      "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:fake"}]}})

        def ready(name: str) -> str | None:
            pod = cp.kubectl_json("get", "pod", name, "-n", ns)
            if pod["status"].get("phase") != "Running":
                return None
            return _condition(pod, "Ready")

        assert wait_until(lambda: ready("plain"), timeout=30, message="plain Pod Running") == "True"
        wait_until(lambda: ready("sick") == "False", timeout=30, message="labelled Pod NotReady")
    finally:
        cp.kubectl("delete", "stage", stage, "--wait=false", check=False)


def _gpu_pod(name: str, ns: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "containers": [{
                "name": "engine",
                "image": "registry.invalid/engine:fake",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
            }],
        },
    }


def _workloads(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    return cp.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", ns)["items"]


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c["status"]
    return None


def test_kueue_gates_then_admits_a_pod(control_plane: ControlPlane, e2e_namespace: str) -> None:
    if not control_plane.kueue_running:
        pytest.skip("Kueue not started")
    cp, ns = control_plane, e2e_namespace
    suffix = uuid.uuid4().hex[:6]
    flavor, cq, lq = f"a10g-{suffix}", f"cq-{suffix}", "gpu"

    # Before any queue exists: the Pod webhook gates the Pod, a Workload appears, nothing is admitted.
    cp.apply(_gpu_pod("p0", ns, lq))
    pod = cp.kubectl_json("get", "pod", "p0", "-n", ns)
    gates = [g["name"] for g in pod["spec"].get("schedulingGates", [])]
    assert "kueue.x-k8s.io/admission" in gates
    assert pod["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true"
    assert "kueue.x-k8s.io/managed" in pod["metadata"].get("finalizers", [])
    wl = wait_until(lambda: _workloads(cp, ns), timeout=30, message="a Workload for the Pod")[0]
    assert _condition(wl, "Admitted") != "True"

    # Quota: flavor -> ClusterQueue -> LocalQueue.
    cp.apply([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": {e2e_cluster.INSTANCE_TYPE_LABEL: A10G}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                  "resourceGroups": [{
                      "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                      "flavors": [{"name": flavor, "resources": [
                          {"name": "cpu", "nominalQuota": "512"},
                          {"name": "memory", "nominalQuota": "4Ti"},
                          {"name": "nvidia.com/gpu", "nominalQuota": "32"}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": lq, "namespace": ns},
         "spec": {"clusterQueue": cq}},
    ])
    try:
        wait_until(lambda: _condition(_workloads(cp, ns)[0], "Admitted") == "True",
                   timeout=60, message="Workload Admitted")

        def running() -> dict[str, Any] | None:
            p = cp.kubectl_json("get", "pod", "p0", "-n", ns)
            return p if p["status"].get("phase") == "Running" else None

        pod = wait_until(running, timeout=60, message="Pod Running")
        assert not pod["spec"].get("schedulingGates")
        node = cp.kubectl_json("get", "node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"][e2e_cluster.INSTANCE_TYPE_LABEL] == A10G
        assert pod["spec"].get("nodeSelector", {}).get(e2e_cluster.INSTANCE_TYPE_LABEL) == A10G
    finally:
        cp.kubectl("delete", "pod", "p0", "-n", ns, "--wait=false", check=False)
        cp.kubectl("delete", "localqueue", lq, "-n", ns, "--wait=false", check=False)
        cp.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        cp.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


# ---------------------------------------------------------------------------
# Metacontroller v4.17.2, built from its released source (see tests/e2e/README.md)
# ---------------------------------------------------------------------------


class _Hook(BaseHTTPRequestHandler):
    """A trivial CompositeController sync hook: one ConfigMap per parent."""

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        parent = body["parent"]
        child = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": parent["metadata"]["name"] + "-child"},
            "data": {"message": parent.get("spec", {}).get("message", "")},
        }
        out = json.dumps({"status": {"children": 1}, "children": [child]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/sync"
    finally:
        server.shutdown()
        server.server_close()


def test_metacontroller_composite_controller_creates_child(
    control_plane: ControlPlane, e2e_namespace: str, hook_server: str
) -> None:
    assert control_plane.metacontroller_running
    cp, ns = control_plane, e2e_namespace
    group, plural = "smoke.e2e.example.com", "smokeparents"
    cp.apply({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": "smokeparent", "kind": "SmokeParent"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
            }],
        },
    })
    cp.wait_established(f"{plural}.{group}", timeout=30)
    cp.apply({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "smoke"},
        "spec": {
            "generateSelector": True,
            "parentResource": {"apiVersion": f"{group}/v1", "resource": plural},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": hook_server}}},
        },
    })
    try:
        cp.apply({"apiVersion": f"{group}/v1", "kind": "SmokeParent",
                  "metadata": {"name": "p", "namespace": ns}, "spec": {"message": "hello"}})
        cm = wait_until(
            lambda: cp.kubectl_json("get", "configmap", "p-child", "-n", ns),
            timeout=60, message="the child ConfigMap",
        )
        assert cm["data"]["message"] == "hello"
        assert cm["metadata"]["ownerReferences"][0]["kind"] == "SmokeParent"
    finally:
        cp.kubectl("delete", "compositecontroller", "smoke", "--wait=false", check=False)
