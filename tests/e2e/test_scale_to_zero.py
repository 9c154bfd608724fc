"""Parking and waking end to end (docs/scale-to-zero.md): a deployment scaled to zero gives its quota
back to the queue and wakes as one set through Kueue's joint admission.

The quota story runs on the kwok pools (Pods never run for real there, but Kueue, the scheduler,
Metacontroller and our hooks and webhooks are all real): a client's request to the parked endpoint is
held by the activator, which asks for the wake (the scaler's wake-requested annotation, which the
scaler's own pass turns into its units). The real node's stories go on to answer the held requests
with the stub engine: a wake, a wake on a full pool, an activator killed, a P/D pair woken under a
client loop, idleAfter on the engines' own counters, and a real HPA over a parking scaler.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import cluster as e2e_cluster
from md_operator import NAMESPACE, Operator, apply, condition, delete, pair, ready

H20 = "gpustack-nvidia-h20-linux-amd64"  # 2 kwok nodes of 8 cards: a ClusterQueue of 16
WAKE_REQUESTED = "modeldeployment.gpustack.ai/wake-requested"


def server(name: str, replicas: int, cards: int) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
                     "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": [{"name": "server", "replicas": replicas, "instanceType": H20,
                                "resources": {"accelerator": cards}}]}}


def parking_scaler(name: str, units: int) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"deploymentRef": {"name": name},
                     "roles": [{"name": "prefill", "ratio": 1}, {"name": "decode", "ratio": 1}],
                     "replicas": units, "scaleToZero": {"idleAfter": "1h", "wakeReplicas": 1, "wakeTimeout": "1m"}}}


def ready_by_role(op: Operator, name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in op.pods(name):
        role = pod["metadata"]["labels"].get("app.kubernetes.io/component")
        if role != "router" and ready(pod):
            counts[role] = counts.get(role, 0) + 1
    return counts


def workloads_of(op: Operator, name: str) -> list[dict[str, Any]]:
    """The Workloads whose owner Pods belong to the deployment (Kueue names a pod group's Workload
    after the group; the Pods carry the group's name)."""
    groups = {p["metadata"]["labels"].get("kueue.x-k8s.io/pod-group-name") for p in op.pods(name)}
    items = op.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]
    return [w for w in items if w["metadata"]["name"] in groups]


def test_a_parked_pair_frees_its_quota_for_the_queue_and_wakes_as_one_set(op: Operator, real_node: Any) -> None:
    # The H20 ClusterQueue holds 16 cards (2 nodes of 8): the pair takes all of them (8 + 8); "queued"
    # asks for 8 and waits until the pair parks. The woken pair then needs 16 with 8 free: its
    # prefill alone would fit, and the joint admission check keeps it queued with its decoder.
    apply(op, pair("sleepy", decode=1, instance_type=H20, cards=8, router=False))
    apply(op, parking_scaler("sleepy", 1))
    try:
        op.wait("sleepy serving", lambda: ready_by_role(op, "sleepy") == {"prefill": 1, "decode": 1}, 180)
        apply(op, server("queued", replicas=1, cards=8))
        time.sleep(10)
        assert ready_by_role(op, "queued") == {}, "the queued deployment ran on quota the pair holds"

        # Park (what idleAfter does, here through the scale subresource as HPA or KEDA would).
        op.kubectl("scale", "mds/sleepy", "-n", NAMESPACE, "--replicas=0")

        def idle() -> dict[str, Any] | None:
            md = op.md("sleepy")
            gone = not op.pods("sleepy") or all(p["metadata"]["labels"].get("app.kubernetes.io/component") == "router"
                                               for p in op.pods("sleepy"))
            return md if md.get("status", {}).get("phase") == "Idle" and gone else None

        md = op.wait("sleepy parked: Idle, no Pods", idle, 180)
        ready_condition = condition(md, "Ready")
        assert (ready_condition["status"], ready_condition["reason"]) == ("False", "ScaledToZero")
        assert [r["replicas"] for r in md["spec"]["roles"]] == [0, 0]
        listed = op.kubectl("get", "md", "sleepy", "-n", NAMESPACE).stdout
        assert "Idle" in listed, listed
        services = op.get("services", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=sleepy")["items"]
        assert services, "a parked deployment keeps its Services"
        # Its quota went back to the queue: the queued deployment is admitted and runs on it.
        op.wait("queued admitted on the released quota", lambda: ready_by_role(op, "queued") == {"server": 1}, 180)
        scaler = op.get("mds", "sleepy", "-n", NAMESPACE)
        assert scaler["status"]["phase"] == "Parked" and scaler["status"].get("parkedSince")
        assert "Parked" in op.kubectl("get", "mds", "sleepy", "-n", NAMESPACE).stdout

        # Wake as a client does: a request to the parked endpoint (from the real node's network
        # namespace, where ClusterIPs route) is held by the activator, which asks for the wake; the
        # scaler's pass sets wakeReplicas, and the pair's two new replicas queue as one set while
        # the pool is full: neither role runs alone. The held request gets 503 with Retry-After and
        # the reason at wakeTimeout (the kwok Pods could not answer it anyway: their IPs are fake).
        stories = _real_node_stories()
        parked = stories.md_when(op, "sleepy", "sleepy's endpoint on the activator",
                                 lambda m: (m.get("status") or {}).get("endpointRoute") == "Activator", 120)
        base = stories.endpoint_base(op, real_node, parked)
        outcome: dict[str, Any] = {}
        body = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        client = threading.Thread(target=lambda: outcome.update(
            answer=stories.request(real_node, f"{base}/v1/chat/completions", body, timeout=150)))
        client.start()
        op.wait("the scaler woke to 1 unit", lambda: op.get("mds", "sleepy", "-n", NAMESPACE)["spec"]["replicas"] == 1,
                120)
        asked = op.get("mds", "sleepy", "-n", NAMESPACE)["metadata"]["annotations"].get(WAKE_REQUESTED)
        assert asked, "the activator did not ask for the wake"
        op.wait("the wake's replicas declared",
                lambda: [r["replicas"] for r in op.md("sleepy")["spec"]["roles"]] == [1, 1], 120)
        for _ in range(8):
            assert ready_by_role(op, "sleepy") == {}, "half of a pair woke on a full pool"
            time.sleep(2)
        client.join(timeout=160)
        assert not client.is_alive(), "the held request hung past wakeTimeout"
        refused = outcome["answer"]
        assert refused["status"] == 503 and int(header(refused, "Retry-After") or 0) > 0, refused
        assert "ClusterQueue" in json.loads(refused["body"])["error"]["message"], refused["body"]
        assert ready_by_role(op, "sleepy") == {}, "half of a pair woke on a full pool"
        # Quota frees: the whole pair is admitted and serves.
        delete(op, "md", "queued")
        op.wait("sleepy woken and serving", lambda: ready_by_role(op, "sleepy") == {"prefill": 1, "decode": 1}, 180)
        md = op.md("sleepy")
        assert md["status"]["phase"] != "Idle"
        events = op.get("events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=sleepy")["items"]
        assert "Woken" in {e["reason"] for e in events}
    finally:
        delete(op, "mds", "sleepy")
        delete(op, "md", "sleepy")
        delete(op, "md", "queued")


def test_a_pair_with_one_role_parked_is_refused_with_its_path_and_remedy(op: Operator) -> None:
    obj = pair("halfparked", decode=1, instance_type=H20, router=False)
    obj["spec"]["roles"][0]["replicas"] = 0
    answer = apply(op, obj, check=False)
    # The CRD's CEL rule answers before the validating webhook (rule 22, the same words with the
    # role's own path, judges what bypasses the schema: unit-tested in tests/unit/test_admission_rules.py).
    assert answer.returncode != 0
    assert "spec.roles" in answer.stderr and "parks and wakes as a pair" in answer.stderr
    assert "set both to 0 to park the deployment, or both above 0 to serve" in answer.stderr


# --- on the real node: a request held, the deployment woken, the engine answering -------------------

ACTIVATOR_PORT = 18080
ACTIVATOR_METRICS_PORT = 19090


def header(answer: dict[str, Any], name: str) -> str | None:
    """A response header, whatever case the server wrote its name in (HTTP names are case-insensitive)."""
    return next((v for k, v in answer["headers"].items() if k.lower() == name.lower()), None)


def _real_node_stories() -> Any:
    """Imported lazily: the real-node helpers of the stories next door (clients in the node's
    network namespace, the real pool with our joint check)."""
    import test_real_node_stories as stories
    return stories


def start_activator(control_plane: e2e_cluster.ControlPlane, real_node: Any, operator: Operator) -> None:
    """The activator beside the operator: it runs in the node's network namespace (where Pod IPs
    and ClusterIPs are reachable), listening on the node's address; a selector-less
    `modeldeployment-activator` Service with an EndpointSlice of that address stands for its
    Deployment, and the operator (started with MODELDEPLOYMENT_ACTIVATOR_NAMESPACE=NAMESPACE) reads
    it as it reads the installed one. Stopped with the control plane."""
    env = {**control_plane.env, "MODELDEPLOYMENT_ACTIVATOR_HOST": real_node.node_ip,
           "MODELDEPLOYMENT_ACTIVATOR_POLL_SECONDS": "0.5", "MODELDEPLOYMENT_ACTIVATOR_WAKE_INTERVAL_SECONDS": "5",
           "PYTHONUNBUFFERED": "1"}
    control_plane.start_process("activator", ["nsenter", f"--net={real_node.netns_path}", "--", sys.executable,
                                              "-m", "app.cli", "activator", "--port", str(ACTIVATOR_PORT),
                                              "--metrics-port", str(ACTIVATOR_METRICS_PORT)],
                                env=env, cwd=Path(__file__).resolve().parents[2])
    apply(operator, {"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": "modeldeployment-activator", "namespace": NAMESPACE},
                     "spec": {"ports": [{"name": "proxy", "port": ACTIVATOR_PORT, "protocol": "TCP"}]}})
    apply(operator, {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": "modeldeployment-activator-e2e", "namespace": NAMESPACE,
                                  "labels": {"kubernetes.io/service-name": "modeldeployment-activator"}},
                     "addressType": "IPv4",
                     "endpoints": [{"addresses": [real_node.node_ip], "conditions": {"ready": True}}],
                     "ports": [{"name": "proxy", "port": ACTIVATOR_PORT, "protocol": "TCP"}]})


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane, real_node: Any, real_pool: Any) -> Iterator[Operator]:
    """The operator of every story here (the kwok pools' and the real node's), with the activator
    beside it (start_activator) and the real pool under our joint admission check."""
    stories = _real_node_stories()
    settings = {**stories.SMALL_ROUTER, "MODELDEPLOYMENT_ACTIVATOR_NAMESPACE": NAMESPACE}
    with stories.operator_on_the_real_pool(control_plane, real_node, real_pool, settings) as operator:
        start_activator(control_plane, real_node, operator)
        yield operator


def test_a_request_to_a_parked_deployment_is_held_woken_and_answered_by_the_engine(
        op: Operator, real_node: Any) -> None:
    stories = _real_node_stories()
    name = "napper"
    md = stories.md_spec(name, [stories.role()])
    stories.apply(op, md)
    stories.apply(op, {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
                       "metadata": {"name": name, "namespace": NAMESPACE},
                       "spec": {"deploymentRef": {"name": name}, "roles": [{"name": "server", "ratio": 1}],
                                "replicas": 1, "scaleToZero": {"idleAfter": "1h", "wakeTimeout": "5m"}}})
    try:
        served = stories.md_when(op, name, "napper Ready", stories.md_ready, 240)
        url = served["status"]["endpoint"]
        op.kubectl("scale", f"mds/{name}", "-n", NAMESPACE, "--replicas=0")
        parked = stories.md_when(op, name, "napper parked, its endpoint on the activator",
                                 lambda m: (m.get("status") or {}).get("phase") == "Idle"
                                 and (m.get("status") or {}).get("endpointRoute") == "Activator", 180)
        assert parked["status"]["endpoint"] == url, "the endpoint clients know stays"
        op.wait("napper's Pods gone", lambda: not stories.role_pods(op, name, "server"), 120)
        service = op.get("service", url.split("//")[1].split(".")[0], "-n", NAMESPACE)
        assert service["spec"]["selector"]["modeldeployment.gpustack.ai/endpoint-parked"] == "true"

        # A client asks the parked deployment: held, woken, answered by the woken engine.
        base = stories.endpoint_base(op, real_node, parked)
        started = time.monotonic()
        answer = stories.request(real_node, f"{base}/v1/chat/completions",
                                 {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_tokens": 8,
                                  "messages": [{"role": "user", "content": "Say hello."}]}, timeout=280)
        waited = time.monotonic() - started
        assert answer["status"] == 200, answer
        assert header(answer, "X-ModelDeployment-Woken") is not None, answer
        (pod,) = stories.serving_pods(op, name, "server")
        assert header(answer, "X-Stub-Pod") == pod["metadata"]["name"]
        assert op.get("mds", name, "-n", NAMESPACE)["spec"]["replicas"] == 1
        # Serving again: the endpoint goes straight to the Pods, no activator in the path.
        woken = stories.md_when(op, name, "napper's endpoint back on its Pods",
                                lambda m: "endpointRoute" not in (m.get("status") or {}), 120)
        base = stories.endpoint_base(op, real_node, woken)

        def direct() -> dict[str, Any] | None:
            # Until kube-proxy follows the Service's new selector, a request may still reach the
            # activator, which forwards it to the same Pod with the header; after, none does.
            got = stories.chat(real_node, base)
            assert got["status"] == 200, got
            return got if header(got, "X-ModelDeployment-Woken") is None else None

        answered = op.wait("napper's endpoint answered by its Pod, not the activator", direct, 60)
        assert header(answered, "X-Stub-Pod") == pod["metadata"]["name"]
        print(f"wake: request held {waited:.1f} s until answered")
    finally:
        delete(op, "mds", name)
        stories.delete_md(op, name)


def test_idle_for_idle_after_parks_on_the_engines_own_counters_and_a_queued_deployment_takes_the_quota(
        op: Operator, real_node: Any) -> None:
    """A vLLM and an SGLang deployment, 4 cards each (the real pool's 8), each under a scaler with
    `idleAfter: 1m`. While a client sends requests they stay up well past a minute: the operator
    learns each request from the engine's own counters (vLLM's and SGLang's, the latter served
    because the render adds --enable-metrics) and writes the scaler's last-request annotation. Once
    the client stops, each parks no sooner than a minute after its last request, and a queued
    deployment asking for the whole pool is admitted on the quota they gave back."""
    import httpx

    from app.kube.idleness import leader_address

    stories = _real_node_stories()
    engines = {"dozer": {"name": "vLLM", "version": "0.33.0"}, "dozer-sgl": {"name": "SGLang", "version": "0.5.23"}}
    counters = {"dozer": "vllm:request_success_total", "dozer-sgl": "sglang:num_requests_total"}
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    for name, engine in engines.items():
        stories.apply(op, stories.md_spec(name, [stories.role(resources={"accelerator": 4})], engine=engine))
        stories.apply(op, {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
                           "metadata": {"name": name, "namespace": NAMESPACE},
                           "spec": {"deploymentRef": {"name": name}, "roles": [{"name": "server", "ratio": 1}],
                                    "replicas": 1, "scaleToZero": {"idleAfter": "1m", "wakeTimeout": "5m"}}})
    loops: dict[str, Any] = {}
    try:
        first_pass = time.time()
        for name in engines:
            served = stories.md_when(op, name, f"{name} Ready", stories.md_ready, 240)
            (pod,) = stories.serving_pods(op, name, "server")
            # What the idleness reader scrapes, asked from the host as the operator asks it.
            scraped = httpx.get(f"http://{leader_address(pod)}/metrics", timeout=5)
            assert scraped.status_code == 200 and counters[name] in scraped.text, (name, scraped.status_code)
            loops[name] = stories.ClientLoop(real_node, f"{stories.serving_endpoint_base(op, real_node, served)}"
                                             "/v1/chat/completions", 5, model)
        # Busy for well past idleAfter (counted from the scalers' first pass): neither parks.
        busy_until = max(time.time(), first_pass + 60) + 45
        while time.time() < busy_until:
            for name in engines:
                scaler = op.get("mds", name, "-n", NAMESPACE)
                assert scaler["spec"]["replicas"] == 1, f"{name} parked while a client sent requests"
            time.sleep(5)
        last_sent: dict[str, float] = {}
        for name, loop in loops.items():
            records = loop.stop()
            assert records and all(r.get("ok") for r in records), (name, [r for r in records if not r.get("ok")][:3])
            last_sent[name] = max(r["t"] for r in records)
        loops.clear()
        for name in engines:
            scaler = op.get("mds", name, "-n", NAMESPACE)
            learned = scaler["metadata"]["annotations"].get("modeldeployment.gpustack.ai/last-request")
            assert learned and stories.epoch(learned) > first_pass + 30, (name, learned, first_pass)

        # The queued deployment asks for the whole pool: admitted only once both parked.
        stories.apply(op, stories.md_spec("sleeper-queue", [stories.role(resources={"accelerator": 8})]))
        parked_after: dict[str, float] = {}
        for name in engines:
            parked = op.wait(f"{name} parked for idleness",
                             lambda n=name: (lambda m: m if (m.get("status") or {}).get("phase") == "Parked" else None)(
                                 op.get("mds", n, "-n", NAMESPACE)), 240, 2)
            since = stories.epoch(parked["status"]["parkedSince"])
            assert since >= int(last_sent[name]) + 60, (name, parked["status"], last_sent[name])
            parked_after[name] = since - last_sent[name]
            assert parked["spec"]["replicas"] == 0
            events = op.get("events", "-n", NAMESPACE, "--field-selector",
                            f"involvedObject.name={name},involvedObject.kind=ModelDeploymentScaler")["items"]
            assert any(e["reason"] == "Parked" and "idleAfter 1m" in e["message"] for e in events), events
        stories.md_when(op, "sleeper-queue", "the queued deployment admitted on the released quota",
                        stories.md_ready, 240)
        for name in engines:
            md = op.md(name)
            assert md["status"]["phase"] == "Idle", (name, md["status"])
        print("parked after the last request: " + ", ".join(f"{n} {t:.0f} s" for n, t in parked_after.items()))
    finally:
        for loop in loops.values():
            loop.stop()
        for name in engines:
            delete(op, "mds", name)
            stories.delete_md(op, name)
        stories.delete_md(op, "sleeper-queue")


def test_a_wake_the_full_pool_cannot_admit_answers_503_with_the_reason_and_an_activator_restart_fails_only_its_holds(
        op: Operator, control_plane: e2e_cluster.ControlPlane, real_node: Any) -> None:
    """The real pool holds 8 cards: "hog" takes them all, so a woken replica of "blocked" waits for
    quota. A held request is answered 503 with Retry-After and Kueue's reason at wakeTimeout (60 s);
    a request held while its activator is killed fails at once (no hang), and once quota frees a
    request is held, woken and served."""
    import os
    import signal
    import threading

    stories = _real_node_stories()
    name = "blocked"
    stories.apply(op, stories.md_spec(name, [stories.role()]))
    stories.apply(op, {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
                       "metadata": {"name": name, "namespace": NAMESPACE},
                       "spec": {"deploymentRef": {"name": name}, "roles": [{"name": "server", "ratio": 1}],
                                "replicas": 0, "scaleToZero": {"idleAfter": "1h", "wakeTimeout": "1m"}}})
    try:
        parked = stories.md_when(op, name, "blocked parked behind the activator",
                                 lambda m: (m.get("status") or {}).get("endpointRoute") == "Activator", 180)
        stories.apply(op, stories.md_spec("hog", [stories.role(resources={"accelerator": 8})]))
        stories.md_when(op, "hog", "hog Ready on the whole pool", stories.md_ready, 240)
        base = stories.endpoint_base(op, real_node, parked)
        body = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_tokens": 8,
                "messages": [{"role": "user", "content": "Say hello."}]}

        started = time.monotonic()
        refused = stories.request(real_node, f"{base}/v1/chat/completions", body, timeout=150)
        waited = time.monotonic() - started
        assert refused["status"] == 503, refused
        assert int(header(refused, "Retry-After") or 0) > 0
        message = json.loads(refused["body"])["error"]["message"]
        assert "did not wake within 60s" in message and "waiting for quota in ClusterQueue" in message, message
        assert 55 <= waited <= 120, waited
        assert stories.role_pods(op, name, "server") and not stories.serving_pods(op, name, "server")

        # A request held while its activator dies fails at once; the next one is held again.
        outcome: dict[str, Any] = {}

        def held() -> None:
            try:
                outcome["answer"] = stories.request(real_node, f"{base}/v1/chat/completions", body, timeout=150)
            except Exception as exc:  # noqa: BLE001 - the failure is what this story looks at
                outcome["error"] = str(exc)
            outcome["after"] = time.monotonic()

        client = threading.Thread(target=held)
        client.start()
        time.sleep(5)
        activator = control_plane.components["activator"]
        activator.stopped = True
        killed = time.monotonic()
        os.kill(activator.pid, signal.SIGKILL)
        activator.proc.wait(timeout=10)
        client.join(timeout=30)
        assert not client.is_alive(), "a request held by a killed activator hung"
        assert "error" in outcome or outcome["answer"]["status"] != 200, outcome
        assert outcome["after"] - killed < 30
        control_plane.start_component("activator")
        def listening() -> bool:
            try:
                return real_node.http_get(f"http://{real_node.node_ip}:{ACTIVATOR_METRICS_PORT}/readyz")[0] == 200
            except RuntimeError:  # connection refused until it listens
                return False

        op.wait("the activator back", listening, 60)

        # Quota frees: the next request is held, the wake admitted, the engine answers.
        stories.delete_md(op, "hog")
        answer = stories.request(real_node, f"{base}/v1/chat/completions", body, timeout=280)
        assert answer["status"] == 200 and header(answer, "X-ModelDeployment-Woken") is not None, answer
        print(f"503 after {waited:.1f} s: {message}")
    finally:
        delete(op, "mds", name)
        stories.delete_md(op, name)
        op.kubectl("delete", "md", "hog", "-n", NAMESPACE, "--wait=false", check=False)


# One POST per interval on a new connection until the stop file exists, each allowed `timeout`
# seconds (a held request waits for the wake); one JSON line per request.
_WAKE_LOOP = r"""
import json, os, sys, time, urllib.request, urllib.error
url, interval, stop, timeout = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
body = json.dumps({"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_tokens": 4,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
nxt = time.monotonic()
while not os.path.exists(stop):
    rec = {"t": time.time()}
    try:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            h = {k.lower(): v for k, v in r.headers.items()}
            rec.update(ok=r.status == 200, status=r.status, woken="x-modeldeployment-woken" in h,
                       prefill=h.get("x-stub-prefill-pod"), decode=h.get("x-stub-decode-pod"))
    except urllib.error.HTTPError as e:
        rec.update(ok=False, status=e.code)
    except Exception as e:
        rec.update(ok=False, error=f"{type(e).__name__}: {e}")
    rec["took"] = time.time() - rec["t"]
    print(json.dumps(rec), flush=True)
    nxt += interval
    time.sleep(max(0.0, nxt - time.monotonic()))
"""


def test_a_parked_prefill_decode_pair_is_woken_as_one_set_and_a_client_loop_loses_nothing(
        op: Operator, control_plane: e2e_cluster.ControlPlane, real_node: Any) -> None:
    """A routed P/D pair parked behind its router: a client sending a request every 2 s through the
    wake sees every one answered by the woken prefiller and decoder (the router is never parked)."""
    import subprocess
    import uuid

    import realnode as e2e_realnode
    from app.render import names

    stories = _real_node_stories()
    name = "pdnap"
    stories.apply(op, stories.md_spec(name, [stories.role("prefill", kind="Prefill"),
                                             stories.role("decode", kind="Decode")],
                                      router={"name": "llm-d-router", "disaggregationThresholdTokens": 0}))
    stories.apply(op, {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
                       "metadata": {"name": name, "namespace": NAMESPACE},
                       "spec": {"deploymentRef": {"name": name},
                                "roles": [{"name": "prefill", "ratio": 1}, {"name": "decode", "ratio": 1}],
                                "replicas": 1, "scaleToZero": {"idleAfter": "1h", "wakeTimeout": "5m"}}})
    router = names.router(name)
    try:
        op.wait("the router Deployment", lambda: op.kubectl("get", "deployment", router, "-n", NAMESPACE,
                                                               check=False).returncode == 0, 120)
        patch = {"spec": {"template": {"spec": {
            "nodeSelector": {e2e_realnode.REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": e2e_realnode.REAL_NODE_TAINT_KEY, "operator": "Equal", "value": "true",
                             "effect": "NoSchedule"}]}}}}
        op.kubectl("patch", "deployment", router, "-n", NAMESPACE, "--type=strategic", "-p", json.dumps(patch))
        stories.md_when(op, name, "pdnap Ready with its router", stories.md_ready, 300)
        op.kubectl("scale", f"mds/{name}", "-n", NAMESPACE, "--replicas=0")
        parked = stories.md_when(op, name, "pdnap parked behind the activator",
                                 lambda m: (m.get("status") or {}).get("phase") == "Idle"
                                 and (m.get("status") or {}).get("endpointRoute") == "Activator", 180)
        op.wait("pdnap's engines gone", lambda: not stories.role_pods(op, name, "prefill")
                and not stories.role_pods(op, name, "decode"), 120)
        base = stories.endpoint_base(op, real_node, parked)
        # The switch converged: the router Service's only address is the activator's (the
        # controller's slice of it is empty), and kube-proxy had a moment to program it. Before that a
        # request reaches the router with no engine behind it (docs/scale-to-zero.md#failure-modes).
        def only_the_activator() -> bool:
            slices = op.get("endpointslices", "-n", NAMESPACE, "-l", f"kubernetes.io/service-name={router}")["items"]
            listed = {s["metadata"]["name"]: [a for e in s.get("endpoints") or [] for a in e["addresses"]]
                      for s in slices}
            return (listed.get(f"{router}-activator") == [real_node.node_ip]
                    and all(not v for k, v in listed.items() if k != f"{router}-activator"))

        op.wait("the router Service's addresses are the activator's alone", only_the_activator, 60)
        time.sleep(3)

        stop = control_plane.work_dir / f"wake-loop-stop-{uuid.uuid4().hex[:6]}"
        loop = subprocess.Popen(["nsenter", f"--net={real_node.netns_path}", "--", sys.executable, "-c", _WAKE_LOOP,
                                 f"{base}/v1/chat/completions", "2", str(stop), "240"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            served = stories.md_when(op, name, "pdnap woken, its endpoint back on the router",
                                     lambda m: stories.md_ready(m) and "endpointRoute" not in (m.get("status") or {}),
                                     300)
            time.sleep(10)  # requests after the switch back, straight to the router
        finally:
            stop.touch()
            out, err = loop.communicate(timeout=300)
            stop.unlink(missing_ok=True)
        records = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert records, err
        failed = [r for r in records if not r.get("ok")]
        assert not failed, f"{len(failed)} of {len(records)} requests failed through the wake: {failed[:3]}"
        woken = [r for r in records if r.get("woken")]
        assert woken, "no request was held and woken"
        prefill = stories.serving_pods(op, name, "prefill")[0]["metadata"]["name"]
        decode = stories.serving_pods(op, name, "decode")[0]["metadata"]["name"]
        assert all(r["prefill"] == prefill and r["decode"] == decode for r in records), records[:3]
        assert served["status"]["endpoint"] == parked["status"]["endpoint"]
        assert op.get("mds", name, "-n", NAMESPACE)["spec"]["replicas"] == 1
        print(f"P/D wake: {len(records)} requests, {len(woken)} held (longest {max(r['took'] for r in woken):.1f} s), "
              "0 failed")
    finally:
        delete(op, "mds", name)
        stories.delete_md(op, name)


def test_a_real_hpa_drives_a_parking_scaler_between_1_and_n_stays_quiet_while_parked_and_resumes_after_the_wake(
        op: Operator, real_node: Any, external_metrics: Any) -> None:
    """HPA over a scaler that parks itself (docs/scale-to-zero.md#field-ownership), with the real
    HPA controller of kube-controller-manager: it drives the scaler 1 -> 3 -> 1 on its metric while a
    client sends requests; once the client stops the scaler parks itself after idleAfter; the HPA
    then does nothing, whatever its metric says (it reads 0 as scaling disabled); a request wakes the
    deployment to wakeReplicas, and the HPA takes it from there to 3 again."""
    import metrics_server

    stories = _real_node_stories()
    name, metric, labels = "surge", "vllm_num_requests_waiting", {"deployment": "surge"}
    stories.apply(op, stories.md_spec(name, [stories.role()]))
    stories.apply(op, {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
                       "metadata": {"name": name, "namespace": NAMESPACE},
                       "spec": {"deploymentRef": {"name": name}, "roles": [{"name": "server", "ratio": 1}],
                                "replicas": 1, "scaleToZero": {"idleAfter": "1m", "wakeReplicas": 1,
                                                               "wakeTimeout": "5m"}}})
    loop = None
    try:
        served = stories.md_when(op, name, "surge Ready", stories.md_ready, 240)
        base = stories.serving_endpoint_base(op, real_node, served)
        loop = stories.ClientLoop(real_node, f"{base}/v1/chat/completions", 5, "Qwen/Qwen2.5-0.5B-Instruct")
        external_metrics.set(NAMESPACE, metric, 10, labels=labels)
        target = {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler", "name": name}
        op.cp.apply(metrics_server.external_metric_hpa(name, NAMESPACE, target, metric, average_value=10,
                                                       metric_labels=labels, min_replicas=1, max_replicas=3))

        def hpa_reads() -> dict[str, Any] | None:
            got = op.get("hpa", name, "-n", NAMESPACE)
            ok = (metrics_server.hpa_condition(got, "ScalingActive").get("status") == "True"
                  and metrics_server.hpa_external_current(got, metric) is not None)
            return got if ok else None

        op.wait("the HPA to read its metric", hpa_reads, 120)

        def serving(count: int) -> Any:
            return lambda: len(stories.serving_pods(op, name, "server")) == count \
                and op.get("mds", name, "-n", NAMESPACE)["spec"]["replicas"] == count

        external_metrics.set(NAMESPACE, metric, 30, labels=labels)  # 3 units
        op.wait("the HPA to drive surge to 3 serving replicas", serving(3), 240)
        external_metrics.set(NAMESPACE, metric, 10, labels=labels)  # back to 1
        op.wait("the HPA to drive surge back to 1", serving(1), 240)
        records = loop.stop()
        loop = None
        assert records and all(r.get("ok") for r in records), [r for r in records if not r.get("ok")][:3]
        last_sent = max(r["t"] for r in records)

        # No more requests: the scaler parks itself; the HPA's 1 is not a floor it defends.
        parked = op.wait("surge parked for idleness",
                         lambda: (lambda m: m if (m.get("status") or {}).get("phase") == "Parked" else None)(
                             op.get("mds", name, "-n", NAMESPACE)), 240, 2)
        assert stories.epoch(parked["status"]["parkedSince"]) >= int(last_sent) + 60, (parked["status"], last_sent)
        # While parked the HPA does nothing, though its metric asks for 3.
        external_metrics.set(NAMESPACE, metric, 30, labels=labels)
        disabled = op.wait("the HPA to call scaling disabled", lambda: (lambda h: h if metrics_server.hpa_condition(
            h, "ScalingActive").get("reason") == "ScalingDisabled" else None)(op.get("hpa", name, "-n", NAMESPACE)), 60)
        assert metrics_server.hpa_condition(disabled, "ScalingActive")["status"] == "False"
        for _ in range(5):
            assert op.get("mds", name, "-n", NAMESPACE)["spec"]["replicas"] == 0, "the HPA woke a parked scaler"
            time.sleep(2)

        # A request wakes it to wakeReplicas through the activator; the HPA resumes from there.
        parked_md = stories.md_when(op, name, "surge's endpoint on the activator",
                                    lambda m: (m.get("status") or {}).get("endpointRoute") == "Activator", 120)
        answer = stories.request(real_node, f"{stories.endpoint_base(op, real_node, parked_md)}/v1/chat/completions",
                                 {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_tokens": 4,
                                  "messages": [{"role": "user", "content": "hi"}]}, timeout=280)
        assert answer["status"] == 200 and header(answer, "X-ModelDeployment-Woken") is not None, answer
        op.wait("the HPA to take the woken surge to 3", serving(3), 240)
        events = op.get("events", "-n", NAMESPACE, "--field-selector",
                        f"involvedObject.name={name},involvedObject.kind=ModelDeploymentScaler")["items"]
        assert {"Parked", "Woken"} <= {e["reason"] for e in events}
    finally:
        if loop is not None:
            loop.stop()
        op.kubectl("delete", "hpa", name, "-n", NAMESPACE, "--wait=false", check=False)
        external_metrics.delete(NAMESPACE, metric)
        delete(op, "mds", name)
        stories.delete_md(op, name)
