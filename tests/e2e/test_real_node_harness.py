"""The real node of the e2e harness (tests/e2e/README.md, "The real node"), proven on its own:
the node is Ready and advertises nvidia.com/gpu; a Pod admitted through Kueue lands there, runs,
and turns Ready through real exec and HTTP probes; the downward API is projected; a Service name
resolves through CoreDNS from inside a Pod and from the node's namespace; a ClusterIP reaches the
Pod through kube-proxy; and a control plane of its own, stopped, leaves nothing behind.

The Pods run the pause image built by build.sh (components/pause), whose binary also serves
HTTP, resolves names and prints its environment, so the harness needs no engine stub.
"""

from __future__ import annotations

import ipaddress
import time
import uuid
from typing import Any

import httpx
import pytest

import cluster as e2e_cluster
import realnode as e2e_realnode
from cluster import ControlPlane, wait_until


def _pause_image(cp: ControlPlane) -> str:
    assert cp.real_node is not None
    return cp.real_node._pause_image()[0]


def _ready(cp: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    pod = cp.kubectl_json("get", "pod", name, "-n", ns)
    conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod if conds.get("Ready") == "True" else None


def _server_pod(pool: e2e_realnode.RealPool, name: str, ns: str, image: str) -> dict[str, Any]:
    """The pause binary serving HTTP on 8080, with an HTTP readiness probe, an exec startup probe
    and the downward-API variables a rendered engine Pod gets."""
    field = lambda path: {"valueFrom": {"fieldRef": {"fieldPath": path}}}  # noqa: E731
    pod = pool.pod(name, ns, image, gpus=1, container={
        "args": ["serve", ":8080"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "env": [{"name": "MY_POD_NAME", **field("metadata.name")},
                {"name": "MY_POD_NAMESPACE", **field("metadata.namespace")},
                {"name": "MY_POD_IP", **field("status.podIP")},
                {"name": "MY_NODE_NAME", **field("spec.nodeName")},
                {"name": "MY_APP", **field("metadata.labels['app']")}],
        "startupProbe": {"exec": {"command": ["/pause", "true"]}, "periodSeconds": 1},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65532,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
    })
    pod["metadata"]["labels"]["app"] = name
    pod["spec"]["automountServiceAccountToken"] = False
    return pod


def test_real_node_is_ready_and_advertises_gpus(control_plane: ControlPlane,
                                                real_node: e2e_realnode.RealNode) -> None:
    node = control_plane.kubectl_json("get", "node", real_node.name)
    conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conds["Ready"] == "True", conds
    labels = node["metadata"]["labels"]
    assert labels[e2e_cluster.INSTANCE_TYPE_LABEL] == e2e_realnode.REAL_NODE_INSTANCE_TYPE
    assert labels[e2e_cluster.RACK_LABEL] == e2e_realnode.REAL_NODE_RACK
    assert e2e_cluster.KWOK_NODE_LABEL not in labels  # kwok leaves it alone
    assert {"key": e2e_realnode.REAL_NODE_TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == e2e_cluster.KUBERNETES_VERSION
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    # The patched capacity survives the kubelet's own status updates (every 2 s here).
    time.sleep(5)
    node = control_plane.kubectl_json("get", "node", real_node.name)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == str(real_node.gpus)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(real_node.gpus)


def test_a_pod_runs_is_probed_and_reached_through_dns_and_its_service(
        control_plane: ControlPlane, real_node: e2e_realnode.RealNode, real_pool: e2e_realnode.RealPool,
        e2e_namespace: str) -> None:
    cp, ns = control_plane, e2e_namespace
    image = _pause_image(cp)
    real_pool.local_queue(ns)
    t0 = time.monotonic()
    cp.apply(_server_pod(real_pool, "web", ns, image))
    pod = wait_until(lambda: _ready(cp, ns, "web"), timeout=90, message="Pod web Ready on the real node")
    ready_s = time.monotonic() - t0
    assert pod["spec"]["nodeName"] == real_node.name
    pod_ip = pod["status"]["podIP"]
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(real_node.pod_cidr), (pod_ip, real_node.pod_cidr)
    assert ipaddress.ip_network(real_node.pod_cidr).subnet_of(ipaddress.ip_network(e2e_realnode.REAL_NODE_POD_RANGE))
    # The host reaches the Pod IP through the node's route (as an in-cluster operator would).
    assert httpx.get(f"http://{pod_ip}:8080/", timeout=5).text.strip() == "web"
    # Kueue admitted it with the real pool's flavor: node selector and toleration injected.
    assert pod["spec"]["nodeSelector"][e2e_cluster.INSTANCE_TYPE_LABEL] == real_pool.instance_type
    assert any(t.get("key") == e2e_realnode.REAL_NODE_TAINT_KEY for t in pod["spec"]["tolerations"])

    # The downward API, projected by the kubelet into the running container.
    env = dict(line.split("=", 1) for line in
               cp.kubectl("exec", "-n", ns, "web", "--", "/pause", "env").stdout.splitlines() if "=" in line)
    assert env["MY_POD_NAME"] == "web" and env["MY_POD_NAMESPACE"] == ns
    assert env["MY_POD_IP"] == pod["status"]["podIP"] and env["MY_NODE_NAME"] == real_node.name
    assert env["MY_APP"] == "web"

    # A Service: kube-proxy's ClusterIP and CoreDNS's name for it.
    # (Not named like the Pod: the Pod's own /etc/hosts answers its hostname.)
    cp.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-svc", "namespace": ns},
              "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}})
    cluster_ip = cp.kubectl("get", "service", "web-svc", "-n", ns, "-o", "jsonpath={.spec.clusterIP}").stdout
    fqdn = f"web-svc.{ns}.svc.cluster.local"
    assert wait_until(lambda: real_node.dns_lookup(fqdn) == [cluster_ip], timeout=30,
                      message=f"{fqdn} -> {cluster_ip} from the node's namespace")
    status, body = wait_until(lambda: (lambda r: r if r[0] == 200 else None)(real_node.http_get(f"http://{cluster_ip}/")),
                              timeout=30, message="the ClusterIP answering from the node's namespace")
    assert body.strip() == "web"  # the Pod's hostname
    # From inside the Pod: its resolv.conf names the cluster DNS Service; the search path works,
    # and its own Service reaches it back through kube-proxy (hairpin).
    lookup = cp.kubectl("exec", "-n", ns, "web", "--", "/pause", "lookup", "web-svc").stdout.split()
    assert lookup == [cluster_ip]
    assert cp.kubectl("exec", "-n", ns, "web", "--", "/pause", "get", f"http://web-svc.{ns}/").stdout.strip() == "web"
    print(f"\n[real node] Pod create -> Ready {ready_s:.1f} s (through Kueue); timings {cp.timings}")


def test_pods_without_the_toleration_stay_off_the_real_node(
        control_plane: ControlPlane, real_node: e2e_realnode.RealNode, e2e_namespace: str) -> None:
    """A plain Pod (as the kwok stories create) is scheduled on a kwok node, never the real one."""
    cp, ns = control_plane, e2e_namespace
    cp.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": ns},
              "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:fake"}]}})
    node = wait_until(lambda: cp.kubectl_json("get", "pod", "plain", "-n", ns)["spec"].get("nodeName"),
                      timeout=30, message="Pod plain scheduled")
    assert node != real_node.name


@pytest.mark.parametrize("kubelet_dies", [False, True], ids=["clean", "kubelet-killed"])
def test_a_stopped_control_plane_leaves_nothing_of_its_node_behind(kubelet_dies: bool) -> None:
    """A control plane of its own (no Kueue, no Metacontroller), a Pod with a volume running on
    its real node, then stop(): no process, mount, network namespace, veth or cgroup of the node
    is left, and the work directory is gone — also when the kubelet was killed first (its Pods
    still running: containerd, the shims and the cgroups clean up after it)."""
    cp = ControlPlane(bin_dir=e2e_cluster.default_bin_dir(), nodes=(), kueue=False, metacontroller=False,
                      real_node=True)
    try:
        cp.start()
    except e2e_realnode.RealNodeUnavailable as exc:
        pytest.fail(f"the real node cannot run on this machine: {exc}", pytrace=False)
    node = cp.real_node
    assert node is not None
    try:
        name = f"p-{uuid.uuid4().hex[:6]}"
        cp.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                  "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 2,
                           "tolerations": [{"operator": "Exists"}],
                           "containers": [{"name": "c", "image": _pause_image(cp), "imagePullPolicy": "Never",
                                           "args": ["serve", ":8080"],
                                           "volumeMounts": [{"name": "ca", "mountPath": "/ca"}]}],
                           "volumes": [{"name": "ca", "configMap": {"name": "kube-root-ca.crt"}}]}})
        wait_until(lambda: _ready(cp, "default", name), timeout=60, message="Pod Running on the real node")
        assert node.leftovers(), "a running node shows up in leftovers()"
        if kubelet_dies:
            cp.components["kubelet"].proc.kill()  # type: ignore[union-attr]
            cp.components["kubelet"].proc.wait()  # type: ignore[union-attr]
    finally:
        cp.stop()
    assert cp.real_node_stop_problems == []
    assert node.leftovers() == []
    assert not cp.work_dir.exists()
    print(f"\n[real node] start {cp.timings.get('real-node')} s, stop {node.timings['stop']} s "
          f"(kubelet {'killed' if kubelet_dies else 'running'})")
