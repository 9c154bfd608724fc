"""The Pods the operator renders, run for real: the real node of the harness
(kubelet + containerd + CNI + kube-proxy + CoreDNS in a network namespace), the stub engine images
under the names our render produces, the real Metacontroller calling our hooks and real Kueue
admitting every replica through our joint AdmissionCheck (the real pool's ClusterQueue carries it,
as the product's pools do). Nothing here is kwok: each story talks to the containers themselves,
from inside the node's network namespace (ClusterIPs, Pod IPs, the cluster DNS Service).

Stories (tests/e2e/README.md, "Stories on the real node"): a Server role serves through its
Service and status.endpoint; readiness follows the engine's /health; a size-2 follower reaches its
leader through the headless Service with every rendered variable; a routed prefill/decode pair
answers through the router; delete leaves no container; the KV-cache client reads its projected
config; an exiting engine is restarted in place; an image edit rolls 3 replicas with zero failed
requests; the hardening holds inside a running container; every Pod shape served a request.

Bounds come from what the product promises (probe periods: app/vocab.py; the rollout cadence:
docs/kueue.md#rollout-cadence), with room for a loaded 2-core machine.
"""

from __future__ import annotations

import calendar
import ipaddress
import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import pytest
import yaml

import cluster as e2e_cluster
import realnode as e2e_realnode
from md_operator import NAMESPACE, Operator, start_operator

from app import vocab
from app.render import names

IT = e2e_realnode.REAL_NODE_INSTANCE_TYPE
JOINT_CHECK = "gpustack-model-deployment-joint"
ENGINE_V1 = "localhost/modeldeployment-e2e/engine:v1"
ENGINE_V2 = "localhost/modeldeployment-e2e/engine:v2"
#: Which stories saw which Pod shape answer a request (the last story checks all four did).
SHAPES_SERVED: dict[str, str] = {}
#: The router and the routing sidecar sized for a 2-core node (operator settings, docs/operations.md):
#: the defaults (500m per container) would not fit beside the engines.
SMALL_ROUTER = {
    vocab.SETTING_ROUTER_CPU_REQUEST: "50m", vocab.SETTING_ROUTER_MEMORY_REQUEST: "64Mi",
    vocab.SETTING_ROUTING_SIDECAR_CPU_REQUEST: "50m", vocab.SETTING_ROUTING_SIDECAR_MEMORY_REQUEST: "64Mi",
}
#: containerd's default capability set (what a container gets when the Pod adds or drops none).
RUNTIME_DEFAULT_CAPS = 0x00000000A80425FB


# --- clients inside the node's network namespace ----------------------------------------------

# One HTTP request from inside the namespace; prints {"status", "headers", "body", "events"}.
_REQUEST = r"""
import json, sys, urllib.request, urllib.error
spec = json.loads(sys.argv[1])
req = urllib.request.Request(spec["url"], method=spec.get("method", "GET"),
                             data=None if spec.get("body") is None else json.dumps(spec["body"]).encode(),
                             headers={"Content-Type": "application/json", **spec.get("headers", {})})
out = {}
try:
    r = urllib.request.urlopen(req, timeout=spec.get("timeout", 10))
except urllib.error.HTTPError as e:
    r = e
out["status"] = r.status if hasattr(r, "status") else r.code
out["headers"] = {k: v for k, v in r.headers.items()}
raw = r.read().decode(errors="replace")
out["body"] = raw
out["events"] = [l[6:] for l in raw.splitlines() if l.startswith("data: ")]
print(json.dumps(out))
"""

# A client loop: one POST per interval on a new connection until the stop file exists; one JSON
# line per request {"t", "ok", "status"|"error", "pod"}.
_LOOP = r"""
import json, os, sys, time, urllib.request, urllib.error
url, interval, stop = sys.argv[1], float(sys.argv[2]), sys.argv[3]
body = json.dumps({"model": sys.argv[4], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
nxt = time.monotonic()
while not os.path.exists(stop):
    t = time.time()
    rec = {"t": t}
    try:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()
            rec.update(ok=r.status == 200, status=r.status, pod=r.headers.get("X-Stub-Pod"))
    except urllib.error.HTTPError as e:
        rec.update(ok=False, status=e.code, pod=e.headers.get("X-Stub-Pod"))
    except Exception as e:
        rec.update(ok=False, error=f"{type(e).__name__}: {e}")
    print(json.dumps(rec), flush=True)
    nxt += interval
    time.sleep(max(0.0, nxt - time.monotonic()))
"""


def request(node: e2e_realnode.RealNode, url: str, body: Any = None, method: str | None = None,
            timeout: float = 10.0) -> dict[str, Any]:
    spec = {"url": url, "method": method or ("POST" if body is not None else "GET"), "body": body, "timeout": timeout}
    return json.loads(node.python(_REQUEST, json.dumps(spec), timeout=timeout + 20).stdout)


def chat(node: e2e_realnode.RealNode, base: str, *, stream: bool = False, content: str = "Say hello.",
         model: str = "Qwen/Qwen2.5-0.5B-Instruct") -> dict[str, Any]:
    return request(node, f"{base}/v1/chat/completions",
                   {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8,
                    "stream": stream})


class ClientLoop:
    """A client in the node's namespace sending a chat request every `interval` seconds."""

    def __init__(self, node: e2e_realnode.RealNode, url: str, interval: float, model: str) -> None:
        self.stop_file = node.cp.work_dir / f"loop-stop-{uuid.uuid4().hex[:6]}"
        self.proc = subprocess.Popen(
            ["nsenter", f"--net={node.netns_path}", "--", sys.executable, "-c", _LOOP, url, str(interval),
             str(self.stop_file), model], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: list[dict[str, Any]] = []

    def stop(self) -> list[dict[str, Any]]:
        self.stop_file.touch()
        out, err = self.proc.communicate(timeout=30)
        self.stop_file.unlink(missing_ok=True)
        self.records = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert self.proc.returncode == 0, err
        return self.records

    def sent(self) -> int:
        return len(self.records)


# --- cluster facts -------------------------------------------------------------------------------


def md_spec(name: str, roles: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.33.0"},
                     "roles": roles, **spec}}


def role(name: str = "server", replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "instanceType": IT, "resources": {"accelerator": 1}, **extra}


def apply(op: Operator, obj: dict[str, Any]) -> None:
    op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def pod_ready(pod: dict[str, Any]) -> bool:
    return (pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and conditions(pod).get("Ready", {}).get("status") == "True")


def md_when(op: Operator, name: str, what: str, predicate: Callable[[dict[str, Any]], bool],
            timeout: float = 180.0, interval: float = 1.0) -> dict[str, Any]:
    """One read of the deployment satisfying `predicate`, returned (later asserts use that read)."""
    return op.wait(what, lambda: (lambda md: md if predicate(md) else None)(op.md(name)), timeout, interval)


def md_ready(md: dict[str, Any]) -> bool:
    return (md.get("status") or {}).get("phase") == "Ready"


def role_pods(op: Operator, deployment: str, role_name: str) -> list[dict[str, Any]]:
    return op.pods(deployment, f"{vocab.LABEL_COMPONENT}={role_name}")


def serving_pods(op: Operator, deployment: str, role_name: str) -> list[dict[str, Any]]:
    """One read: the role's Pods, each Running and Ready on the real node (asserted), else []."""
    pods = role_pods(op, deployment, role_name)
    if not pods or not all(pod_ready(p) for p in pods):
        return []
    return pods


def on_real_node(pod: dict[str, Any]) -> None:
    assert pod["spec"].get("nodeName") == e2e_realnode.REAL_NODE_NAME, (pod["metadata"]["name"], pod["spec"].get("nodeName"))
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(e2e_realnode.REAL_NODE_POD_RANGE), \
        pod["status"]["podIP"]


def info(node: e2e_realnode.RealNode, ip: str, port: int = vocab.DEFAULT_SERVING_PORT) -> dict[str, Any]:
    out = request(node, f"http://{ip}:{port}/stub/info")
    assert out["status"] == 200, out
    return json.loads(out["body"])


def endpoint_base(op: Operator, node: e2e_realnode.RealNode, md: dict[str, Any]) -> str:
    """status.endpoint (http://<svc>.<ns>.svc:<port>) with the host resolved by the cluster DNS
    Service from the node's namespace; the address must be that Service's ClusterIP."""
    url = urlsplit(md["status"]["endpoint"])
    host = url.hostname or ""
    service = host.split(".")[0]
    cluster_ip = op.get("service", service, "-n", NAMESPACE)["spec"]["clusterIP"]
    addresses = node.dns_lookup(f"{host}.{e2e_realnode.CLUSTER_DOMAIN}")
    assert addresses == [cluster_ip], (host, addresses, cluster_ip)
    return f"http://{cluster_ip}:{url.port}"


def routed(op: Operator, node: e2e_realnode.RealNode, base: str, timeout: float = 60.0) -> str:
    """`base` once a /health through it answers 200 from the node. A Pod turns Ready before its
    Service routes to it: the EndpointSlice controller lists it, then kube-proxy writes the rule,
    and until then the ClusterIP refuses or has no route. A client starting the moment the
    deployment turns Ready would count that gap against the operator; both controllers' periods
    (and a loaded machine) bound it, not the product."""
    def answers() -> bool:
        try:
            return request(node, f"{base}/health", timeout=5)["status"] == 200
        except RuntimeError:  # refused or no route: no rule yet in the node's kube-proxy
            return False

    op.wait(f"{base} to route to a Ready Pod", answers, timeout)
    return base


def serving_endpoint_base(op: Operator, node: e2e_realnode.RealNode, md: dict[str, Any]) -> str:
    """endpoint_base of a deployment that serves (not parked), once its Service routes."""
    return routed(op, node, endpoint_base(op, node, md))


def wait_routed(op: Operator, node: e2e_realnode.RealNode, service: str, pod_ip: str, base: str) -> None:
    """Until `service` routes to the Pod at `pod_ip` from the node: its EndpointSlice lists the Pod
    Ready (the EndpointSlice controller follows the Pod's Ready condition), then kube-proxy has
    written the rule (until it has, a ClusterIP without endpoints answers "No route to host"). What
    any client sees in the seconds after a Pod turns Ready; bounded by both controllers' periods."""
    def listed() -> bool:
        slices = op.get("endpointslices", "-n", NAMESPACE, "-l", f"kubernetes.io/service-name={service}")
        return any(pod_ip in e["addresses"] and (e.get("conditions") or {}).get("ready")
                   for s in slices["items"] for e in s.get("endpoints") or [])

    op.wait(f"Service {service} to list {pod_ip} Ready", listed, 60)
    routed(op, node, base)


def service_base(op: Operator, service: str) -> str:
    svc = op.get("service", service, "-n", NAMESPACE)
    return f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"


def delete_md(op: Operator, name: str, timeout: float = 180.0) -> None:
    op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
    op.wait(f"md {name} and its Pods to be gone",
            lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0
            and not op.pods(name), timeout)


def epoch(stamp: str) -> float:
    """An RFC 3339 time (seconds or nanoseconds) as epoch seconds."""
    main, _, frac = stamp.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) + (float("0." + frac) if frac else 0.0)


def expected_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """Every variable the Pod spec gives the container, as the kubelet must project it."""
    out: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            out[e["name"]] = e["value"]
            continue
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        if path.startswith("metadata.labels['"):
            out[e["name"]] = pod["metadata"]["labels"][path[len("metadata.labels['"):-2]]
        elif path.startswith("metadata.annotations['"):
            out[e["name"]] = pod["metadata"]["annotations"][path[len("metadata.annotations['"):-2]]
        else:
            raise AssertionError(f"a fieldRef this story does not know: {path}")
    return out


def hardened(security: dict[str, Any], caps: int = RUNTIME_DEFAULT_CAPS) -> None:
    """allowPrivilegeEscalation false and seccomp RuntimeDefault as the kernel shows them, and no
    capability beyond `caps` (containerd's defaults unless the container drops them)."""
    assert security["NoNewPrivs"] == "1", security
    assert security["Seccomp"] == "2", security
    for key in ("CapEff", "CapPrm", "CapBnd"):
        assert int(security[key], 16) & ~caps == 0, (key, security)


def containerd_containers(node: e2e_realnode.RealNode) -> list[dict[str, Any]]:
    """Every container containerd's k8s.io namespace holds (sandboxes included), with its labels."""
    ctr = ["ctr", f"--address={node.sock}", "--namespace=k8s.io"]
    ids = node.exec([*ctr, "containers", "ls", "-q"]).stdout.split()
    out = []
    for cid in ids:
        proc = node.exec([*ctr, "containers", "info", cid], check=False)
        if proc.returncode == 0:
            doc = json.loads(proc.stdout)
            out.append({"id": cid, "labels": doc.get("Labels") or {}})
    return out


@contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- the operator, the real pool and the deployments the stories share ------------------------

FLEET = {
    # Server: vLLM, one replica, the runner image our render names for the pool.
    "chat": md_spec("chat", [role()]),
    # size 2: a leader and a follower behind the headless Service.
    "pair": md_spec("pair", [role(size=2, extraArgs=["--pipeline-parallel-size", "2"])]),
    # prefill/decode behind llm-d-router (every prompt disaggregated).
    "pd": md_spec("pd", [role("prefill", kind="Prefill"), role("decode", kind="Decode")],
                  router={"name": "llm-d-router", "disaggregationThresholdTokens": 0}),
    # KV-cache client: the namespace's pool (examples/world/kvcache.yaml, applied by start_operator).
    "cached": md_spec("cached", [role()], kvCache={"poolRef": {"name": "team-a-dram"}}),
}


@contextmanager
def operator_on_the_real_pool(control_plane: e2e_cluster.ControlPlane, real_node: e2e_realnode.RealNode,
                              real_pool: e2e_realnode.RealPool, settings: dict[str, str]) -> Iterator[Operator]:
    """The operator started with `settings` in its environment, and the real pool as the product's
    pools are: its ClusterQueue carries our joint AdmissionCheck. Afterwards the operator is
    uninstalled and the session's queue (no admission check) is back for other modules."""
    with environ(settings):
        operator = start_operator(control_plane)
    pool = e2e_realnode.RealPool(control_plane, real_node, admission_checks=[JOINT_CHECK]).apply()
    pool.apply_instance_type()
    pool.local_queue(NAMESPACE)
    try:
        yield operator
    finally:
        try:
            operator.stop()
        finally:
            real_pool.apply()


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane, real_node: e2e_realnode.RealNode,
       real_pool: e2e_realnode.RealPool) -> Iterator[Operator]:
    with operator_on_the_real_pool(control_plane, real_node, real_pool, SMALL_ROUTER) as operator:
        for obj in FLEET.values():
            apply(operator, obj)
        yield operator


@pytest.fixture(scope="module")
def placed_router(op: Operator) -> None:
    """The router's Pod on the real node. The render gives the router no placement (it runs on any
    CPU node); the only real node here is tainted, so the test adds the toleration and the node
    selector to the router Deployment's template (Metacontroller keeps fields it does not own)."""
    name = names.router("pd")
    op.wait("the router Deployment", lambda: op.kubectl("get", "deployment", name, "-n", NAMESPACE,
                                                           check=False).returncode == 0, 120)
    patch = {"spec": {"template": {"spec": {
        "nodeSelector": {e2e_realnode.REAL_NODE_LABEL: "true"},
        "tolerations": [{"key": e2e_realnode.REAL_NODE_TAINT_KEY, "operator": "Equal", "value": "true",
                         "effect": "NoSchedule"}]}}}}
    op.kubectl("patch", "deployment", name, "-n", NAMESPACE, "--type=strategic", "-p", json.dumps(patch))


# --- stories -------------------------------------------------------------------------------------


def test_a_server_role_serves_chat_through_its_service_and_status_endpoint(
        op: Operator, real_node: e2e_realnode.RealNode) -> None:
    md = md_when(op, "chat", "chat Ready", md_ready)
    pods = op.wait("chat's Pod serving", lambda: serving_pods(op, "chat", "server"), 60)
    assert len(pods) == 1
    pod = pods[0]
    on_real_node(pod)
    # Kueue admitted it with the real pool's flavor, through our joint check.
    assert pod["spec"]["nodeSelector"][e2e_cluster.INSTANCE_TYPE_LABEL] == IT
    assert pod["spec"]["containers"][0]["image"] == "gpustack/runner:cuda12.9-vllm0.33.0"
    assert md["status"]["endpoint"] == f"http://{names.role_service('chat', 'server')}.{NAMESPACE}.svc:8000"

    service = names.role_service("chat", "server")
    wait_routed(op, real_node, service, pod["status"]["podIP"], service_base(op, service))
    for base in (endpoint_base(op, real_node, md), service_base(op, service)):
        plain = chat(real_node, base)
        assert plain["status"] == 200, plain
        assert plain["headers"]["X-Stub-Pod"] == pod["metadata"]["name"]
        answer = json.loads(plain["body"])
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
        streamed = chat(real_node, base, stream=True)
        assert streamed["status"] == 200 and streamed["headers"]["Content-Type"].startswith("text/event-stream")
        assert streamed["events"][-1] == "[DONE]"
        chunks = [json.loads(e) for e in streamed["events"][:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks) and len(chunks) >= 3
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        assert text.strip(), streamed
    seen = info(real_node, pod["status"]["podIP"])
    assert seen["engine"] == "vLLM" and seen["role"] == "server" and seen["requests_served"] >= 4
    SHAPES_SERVED["server"] = pod["metadata"]["name"]


def test_hardening_holds_inside_a_running_engine_container(op: Operator, real_node: e2e_realnode.RealNode) -> None:
    """What the render sets (app/render/pod.py: allowPrivilegeEscalation false, seccomp
    RuntimeDefault, automountServiceAccountToken false, no capability added) as the kernel shows it."""
    pod = op.wait("chat's Pod serving", lambda: serving_pods(op, "chat", "server"), 120)[0]
    container = pod["spec"]["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["automountServiceAccountToken"] is False
    security = info(real_node, pod["status"]["podIP"])["security"]
    hardened(security)  # NoNewPrivs 1, Seccomp 2 (filter mode), nothing beyond the runtime's capabilities
    assert int(security.get("Seccomp_filters", "1")) >= 1, security
    assert security["service_account_token"] is False, security
    # The render sets no runAsNonRoot: the image's user (root, like the real engine images) runs it.
    assert security["uid"] == 0


def test_a_size_two_follower_reaches_its_leader_through_the_headless_service(
        op: Operator, real_node: e2e_realnode.RealNode) -> None:
    try:
        md = md_when(op, "pair", "pair Ready", md_ready)
        pods = op.wait("pair's Pods serving", lambda: serving_pods(op, "pair", "server"), 60)
        by_member = {int(p["metadata"]["labels"][vocab.LABEL_MEMBER_INDEX]): p for p in pods}
        assert sorted(by_member) == [0, 1]
        leader, follower = by_member[0], by_member[1]
        for p in pods:
            on_real_node(p)
        address = names.leader_address("pair", "server", 0)
        # The headless Service publishes the leader's hostname under the replica's subdomain.
        assert real_node.dns_lookup(f"{address}.{NAMESPACE}.svc.{e2e_realnode.CLUSTER_DOMAIN}") == [leader["status"]["podIP"]]

        seen_f = info(real_node, follower["status"]["podIP"])
        seen_l = info(real_node, leader["status"]["podIP"])
        assert seen_f["leader_connected"] is True, seen_f.get("leader")
        assert seen_f["leader"]["address"] == address
        assert seen_f["leader"]["resolved"] == [leader["status"]["podIP"]], seen_f["leader"]
        assert seen_f["leader"]["answer"]["leader"] == leader["metadata"]["name"]
        registered = {f["member"]: f for f in seen_l["followers"]}
        assert registered[1]["hostname"] == follower["metadata"]["name"]
        assert registered[1]["ip"] == follower["status"]["podIP"]
        # The leader turned Ready only once its follower had registered (its /health waits for it,
        # and the readiness probe is what the kubelet calls).
        ready_at = epoch(conditions(leader)["Ready"]["lastTransitionTime"])
        assert ready_at >= int(epoch(registered[1]["registered_at"])), (conditions(leader)["Ready"], registered[1])
        # Only the leader is probed (app/render/pod.py): a follower has no HTTP listener to probe.
        assert "readinessProbe" in leader["spec"]["containers"][0]
        assert "readinessProbe" not in follower["spec"]["containers"][0]

        for member, pod, seen in ((0, leader, seen_l), (1, follower, seen_f)):
            container = pod["spec"]["containers"][0]
            want = expected_env(pod, container)
            assert set(vocab.REPLICA_ENV) <= set(want), want
            assert want[vocab.ENV_MEMBER_INDEX] == str(member) and want[vocab.ENV_REPLICA_SIZE] == "2"
            assert want[vocab.ENV_LEADER_ADDRESS] == address
            assert {k: seen["env"].get(k) for k in want} == want, (pod["metadata"]["name"], seen["env"])
            assert seen["member_index"] == member and seen["group_size"] == 2
            assert seen["hostname"] == pod["metadata"]["name"] == pod["spec"]["hostname"]
            assert pod["spec"]["subdomain"] == names.instance("pair", "server", 0)

        answer = chat(real_node, serving_endpoint_base(op, real_node, md))
        assert answer["status"] == 200 and answer["headers"]["X-Stub-Pod"] == leader["metadata"]["name"], answer
        SHAPES_SERVED["size-2"] = leader["metadata"]["name"]
    finally:
        delete_md(op, "pair")


def test_readiness_follows_the_engines_health(op: Operator, real_node: e2e_realnode.RealNode) -> None:
    """A stub that loads for 15 s: until /health answers 200 the Pod is not Ready and the
    deployment counts 0 ready; after it, both turn. The kubelet's own Events show the startup
    probe failing against the loading engine."""
    load = 15.0
    apply(op, md_spec("slow", [role(env=[{"name": "STUB_LOAD_SECONDS", "value": str(load)}])]))
    try:
        observations: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            pods = role_pods(op, "slow", "server")
            md = op.md("slow")
            pod = pods[0] if len(pods) == 1 else None
            health = None
            if pod and pod["status"].get("podIP") and (pod["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("running"):
                try:
                    health = request(real_node, f"http://{pod['status']['podIP']}:8000/health", timeout=3)["status"]
                except RuntimeError:
                    health = None  # not listening yet
            roles = (md.get("status") or {}).get("roles") or [{}]
            observations.append({"t": time.time(), "pod_ready": bool(pod and pod_ready(pod)),
                                 "status_ready": roles[0].get("ready", 0), "phase": (md.get("status") or {}).get("phase"),
                                 "health": health})
            if observations[-1]["pod_ready"] and observations[-1]["status_ready"] == 1:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"slow never turned Ready: {observations[-5:]}")
        assert pod is not None
        on_real_node(pod)
        healthy_at = next((o["t"] for o in observations if o["health"] == 200), None)
        loading = [o for o in observations if o["health"] == 503]
        assert loading, f"never saw the engine loading (503): {observations}"
        # While the engine answered 503, neither the Pod nor the deployment's count was Ready.
        before = [o for o in observations if healthy_at is None or o["t"] < healthy_at]
        assert not any(o["pod_ready"] or o["status_ready"] for o in before), before
        assert all(o["phase"] != "Ready" for o in before), before
        started = epoch(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
        ready_at = epoch(conditions(pod)["Ready"]["lastTransitionTime"])
        assert ready_at >= int(started + load), (started, ready_at)
        # Bound: the startup probe every STARTUP_PERIOD_SECONDS, then readiness within its period.
        assert ready_at <= started + load + vocab.STARTUP_PERIOD_SECONDS + 5 + 15, (started, ready_at)
        events = op.get("events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={pod['metadata']['name']}")
        probes = [e for e in events["items"] if e["reason"] == "Unhealthy"]
        assert any("Startup probe failed" in e["message"] and "503" in e["message"] for e in probes), \
            [(e["reason"], e["message"]) for e in events["items"]]
        assert info(real_node, pod["status"]["podIP"])["load_seconds"] == load
    finally:
        delete_md(op, "slow")


def test_a_routed_prefill_decode_pair_answers_through_the_router(
        op: Operator, real_node: e2e_realnode.RealNode, placed_router: None) -> None:
    def settled() -> dict[str, Any] | None:
        md = op.md("pd")
        router_pods = op.pods("pd", f"{vocab.LABEL_COMPONENT}={vocab.ROUTER_COMPONENT}")
        on_node = [p for p in router_pods if p["spec"].get("nodeName") == e2e_realnode.REAL_NODE_NAME]
        if md_ready(md) and len(router_pods) == 1 and on_node and pod_ready(on_node[0]):
            return {"md": md, "router": on_node[0]}
        return None

    got = op.wait("pd Ready with its router Pod on the real node", settled, 240)
    md, router = got["md"], got["router"]
    prefill = op.wait("prefill serving", lambda: serving_pods(op, "pd", "prefill"), 60)[0]
    decode = op.wait("decode serving", lambda: serving_pods(op, "pd", "decode"), 60)[0]
    for p in (prefill, decode, router):
        on_real_node(p)
    assert md["status"]["endpoint"] == f"http://{names.router('pd')}.{NAMESPACE}.svc:{vocab.ROUTER_PORT}"
    base = endpoint_base(op, real_node, md)
    # The router's first Pod ran on a kwok node (fake address) before placed_router moved it: wait
    # until the Service's EndpointSlices list only the real one, and kube-proxy has followed.
    router_ip = router["status"]["podIP"]

    def router_endpoints() -> list[str]:
        slices = op.get("endpointslices", "-n", NAMESPACE, "-l", f"kubernetes.io/service-name={names.router('pd')}")
        return sorted(a for s in slices["items"] for e in s.get("endpoints") or [] for a in e["addresses"])

    op.wait("the router Service's endpoints: the real Pod only", lambda: router_endpoints() == [router_ip], 60)

    def first() -> dict[str, Any] | None:
        try:
            out = chat(real_node, base, content="Explain the prefill and the decode of a request in a few words.")
        except RuntimeError:  # a connect to the departed kwok address, until kube-proxy syncs
            return None
        return out if out["status"] == 200 else None

    answer = op.wait("the router answering through its Service", first, 30, 1)
    headers = answer["headers"]
    assert headers["X-Stub-Router-Pod"] == router["metadata"]["name"], headers
    assert headers["X-Stub-Prefill-Pod"] == prefill["metadata"]["name"], headers
    assert headers["X-Stub-Decode-Pod"] == decode["metadata"]["name"], headers
    assert json.loads(answer["body"])["choices"][0]["message"]["content"]
    # The engines' own record: the prefiller ran a prefill step, the decoder pulled from it.
    seen_p = info(real_node, prefill["status"]["podIP"])
    engine_port = int(next(p["containerPort"] for p in decode["spec"]["containers"][0]["ports"] if p["name"] == "engine"))
    seen_d = info(real_node, decode["status"]["podIP"], engine_port)
    assert seen_p["role"] == "prefill" and seen_p["prefill_steps"] >= 1, seen_p
    assert seen_d["role"] == "decode" and seen_d["decode_steps"] >= 1, seen_d
    assert seen_d["prefilled_by"].get(prefill["metadata"]["name"], 0) >= 1, seen_d["prefilled_by"]
    streamed = chat(real_node, base, stream=True)
    assert streamed["status"] == 200 and streamed["events"][-1] == "[DONE]", streamed
    # The hardening of the containers around the engines, read from inside each: the routing
    # sidecar (the engines' securityContext, no token), the router's Envoy and EPP (non-root 65532,
    # every capability dropped; the token mounted: the EPP lists the engine Pods).
    sidecar = info(real_node, decode["status"]["podIP"])
    assert sidecar["security"]["service_account_token"] is False, sidecar["security"]
    hardened(sidecar["security"])
    metrics_port = next(p["containerPort"] for c in router["spec"]["containers"] for p in c.get("ports", [])
                        if p["name"] == "metrics")
    for port in (vocab.ROUTER_PORT, metrics_port):
        security = info(real_node, router["status"]["podIP"], port)["security"]
        hardened(security, caps=0)
        assert security["uid"] == 65532 and security["service_account_token"] is True, security
    SHAPES_SERVED["prefill/decode+router"] = f"{prefill['metadata']['name']} -> {decode['metadata']['name']}"


def test_delete_removes_every_container(op: Operator, real_node: e2e_realnode.RealNode) -> None:
    """The routed pair (engines, the decoder's routing sidecar, the router's containers, their
    sandboxes): after the deployment is gone, containerd holds nothing of its Pods."""
    pods = op.wait("pd's Pods on the node", lambda: [p for p in op.pods("pd") if pod_ready(p)
                                                      and p["spec"].get("nodeName") == e2e_realnode.REAL_NODE_NAME], 120)
    uids = {p["metadata"]["uid"] for p in pods}
    held = [c for c in containerd_containers(real_node) if c["labels"].get("io.kubernetes.pod.uid") in uids]
    # Every Pod has a sandbox and its containers in containerd before the delete.
    assert {c["labels"]["io.kubernetes.pod.uid"] for c in held} == uids, held
    assert len(held) >= len(pods) * 2
    delete_md(op, "pd")
    op.wait("containerd to hold nothing of pd",
            lambda: not [c for c in containerd_containers(real_node) if c["labels"].get("io.kubernetes.pod.uid") in uids],
            60)
    remaining = [c for c in containerd_containers(real_node) if c["labels"].get("io.kubernetes.pod.uid") in uids
                 or c["labels"].get("io.kubernetes.pod.name", "").startswith("pd-")]
    assert remaining == []


def test_a_kv_cache_client_reads_its_projected_config_and_serves(op: Operator, real_node: e2e_realnode.RealNode) -> None:
    try:
        md = md_when(op, "cached", "cached Ready", md_ready)
        pod = op.wait("cached's Pod serving", lambda: serving_pods(op, "cached", "server"), 60)[0]
        on_real_node(pod)
        env = expected_env(pod, pod["spec"]["containers"][0])
        path = env[vocab.ENV_MOONCAKE_CONFIG_PATH]
        seen = info(real_node, pod["status"]["podIP"])
        client = seen["kv_cache_client"]
        # The stub exits when the file is missing or not JSON: it read the downward-API projection of
        # the Pod's annotation, byte for byte the config the render wrote.
        assert client["source"] == path, client
        annotation = next(v for k, v in pod["metadata"]["annotations"].items() if k.endswith("/client-config"))
        assert client["config"] == json.loads(annotation)
        assert client["config"]["master_server_address"] == "shared-dram-master.gpustack-system.svc:50051", client
        assert conditions(md)["CacheAttached"]["status"] == "True"
        answer = chat(real_node, serving_endpoint_base(op, real_node, md))
        assert answer["status"] == 200 and answer["headers"]["X-Stub-Pod"] == pod["metadata"]["name"], answer
        SHAPES_SERVED["kv-cache client"] = pod["metadata"]["name"]
    finally:
        delete_md(op, "cached")


def test_an_engine_that_exits_is_restarted_in_place_and_the_status_says_so(
        op: Operator, real_node: e2e_realnode.RealNode) -> None:
    pod = op.wait("chat's Pod serving", lambda: serving_pods(op, "chat", "server"), 120)[0]
    md_when(op, "chat", "chat Ready", md_ready, 60)
    uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    out = request(real_node, f"http://{pod['status']['podIP']}:8000/stub/exit?code=3", body={}, method="POST")
    assert out["status"] == 200, out
    phases: list[tuple[str | None, int | None, str | None]] = []

    def back() -> dict[str, Any] | None:
        md = op.md("chat")
        status = md.get("status") or {}
        phases.append((status.get("phase"), ((status.get("roles") or [{}])[0]).get("ready"),
                       conditions(md).get("Ready", {}).get("status")))
        pods = role_pods(op, "chat", "server")
        if md_ready(md) and len(pods) == 1 and pod_ready(pods[0]) \
                and pods[0]["status"]["containerStatuses"][0]["restartCount"] == restarts + 1:
            return pods[0]
        return None

    again = op.wait("chat back to Ready after the restart", back, 120, 0.5)
    # The kubelet restarted the container in the same Pod.
    assert (again["metadata"]["uid"], again["metadata"]["name"]) == (uid, name)
    status = again["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 3, status
    # docs/status.md: a role with fewer Ready replicas than the last status reported is Degraded
    # (Ready=False) until all are back.
    assert ("Degraded", 0, "False") in phases, phases
    answer = chat(real_node, routed(op, real_node, service_base(op, names.role_service("chat", "server"))))
    assert answer["status"] == 200 and answer["headers"]["X-Stub-Pod"] == name


def test_an_image_edit_rolls_three_replicas_under_a_client_loop(
        op: Operator, real_node: e2e_realnode.RealNode) -> None:
    apply(op, md_spec("roll", [role(replicas=3, image=ENGINE_V1)]))
    loop: ClientLoop | None = None
    try:
        md_when(op, "roll", "roll Ready", md_ready, 240)
        before = op.wait("roll's 3 Pods serving", lambda: (lambda ps: ps if len(ps) == 3 else [])(
            serving_pods(op, "roll", "server")), 60)
        assert {p["spec"]["containers"][0]["image"] for p in before} == {ENGINE_V1}
        assert before[0]["spec"]["containers"][0]["lifecycle"] == {
            "preStop": {"sleep": {"seconds": vocab.ENGINE_PRE_STOP_SECONDS}}}
        for p in before:
            on_real_node(p)
        old = {p["metadata"]["uid"]: p["metadata"]["name"] for p in before}
        base = routed(op, real_node, service_base(op, names.role_service("roll", "server")))
        loop = ClientLoop(real_node, f"{base}/v1/chat/completions", 0.1, "Qwen/Qwen2.5-0.5B-Instruct")
        time.sleep(2)
        edited = md_spec("roll", [role(replicas=3, image=ENGINE_V2)])
        apply(op, edited)

        seen: dict[str, str] = {}
        unbound: dict[str, str] = {}

        def rolled() -> list[dict[str, Any]] | None:
            pods = role_pods(op, "roll", "server")
            # The Pods that ran (bound to the node). A replacement can also be created and dropped
            # within a second, still gated, never run (a sync on a lagging view: reported, not a turnover).
            seen.update({p["metadata"]["uid"]: p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")})
            unbound.update({p["metadata"]["uid"]: p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")})
            if len(pods) == 3 and all(pod_ready(p) and p["spec"]["containers"][0]["image"] == ENGINE_V2 for p in pods) \
                    and md_ready(op.md("roll")):
                return pods
            return None

        after = op.wait("roll on engine:v2", rolled, 300)
        time.sleep(3)  # the client keeps going on the new replicas
        records = loop.stop()
        loop = None
        failed = [r for r in records if not r["ok"]]
        served_by = {r.get("pod") for r in records if r["ok"]}
        assert records and len(records) >= 50, len(records)
        # Zero failed requests: the old Pod keeps serving through its preStop pause while kube-proxy
        # withdraws it (before that pause, 1-2 requests per turnover were refused or timed out).
        assert failed == [], f"{len(failed)} of {len(records)} failed: {failed[:10]}"
        print(f"\n[real node] image edit of 3 replicas: {len(records)} requests, none failed")
        new = {p["metadata"]["uid"]: p["metadata"]["name"] for p in after}
        assert not set(new) & set(old), (old, new)      # every replica turned over...
        assert len(new) == 3 and set(seen) - set(old) == set(new), (seen, new)  # ...once
        never_ran = {uid: name for uid, name in unbound.items() if uid not in seen}
        if never_ran:
            print(f"[real node] replacements created and dropped before they ran: {sorted(never_ran.values())}")
        # Requests reached old and new replicas alike through the Service during the roll.
        assert set(old.values()) & served_by and set(new.values()) & served_by, served_by
    finally:
        if loop is not None:
            loop.stop()
        delete_md(op, "roll")


def test_every_pod_shape_we_render_has_served_a_request_on_the_real_node() -> None:
    assert set(SHAPES_SERVED) == {"server", "size-2", "prefill/decode+router", "kv-cache client"}, SHAPES_SERVED
