"""bench/wake: a wake's latency split into its parts, against the same deployment created from nothing.

    .venv/bin/python -m bench.wake [--runs 3] [--out bench]

On a control plane of its own with the e2e harness's real node (tests/e2e/realnode.py), the operator,
the real Metacontroller and Kueue (the real pool's ClusterQueue carries our joint AdmissionCheck),
the activator in the node's network namespace (as tests/e2e/test_scale_to_zero.py runs it) and the
stub engine images (tests/e2e/stub; they answer /health at once, so what is measured is the
operator's, Kueue's and the kubelet's part of a start, not a model load). Each run:

- **From nothing**: a 1-replica vLLM Server deployment and its scaler (`scaleToZero`) applied; a
  client in the node's namespace asks its endpoint every 0.2 s until answered. Each step is the time
  after `kubectl apply`: Pod created, Kueue admitted (scheduling gates gone), engine container
  running, Pod Ready, and the first byte of the first answer.
- **Wake**: the same deployment parked (`kubectl scale mds --replicas=0`, then until its endpoint is
  the activator's alone), then one request sent to the endpoint and held. Each step is the time after
  the request was sent: the activator's wake request on the scaler, the scaler's units set, the
  deployment's roles set, Pod created, Kueue admitted, container running, Pod Ready, the endpoint
  back on the Pod, and the first byte of the held request's answer.

Steps are first seen by a poll of the API every 0.1 s (so each is late by up to a poll plus an API
round trip); the first byte is the client's own clock. Writes wake.json and wake.md into --out
(with the load average before and after: the figures are only as quiet as the machine was).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import cluster as e2e_cluster  # noqa: E402
import md_operator  # noqa: E402
import realnode as e2e_realnode  # noqa: E402
import test_real_node_stories as stories  # noqa: E402  (its clients and cluster facts)
import test_scale_to_zero as parking  # noqa: E402  (the activator beside the operator)
from bench.real_node import add_report_arguments, log, operated_real_node, publish, summary  # noqa: E402

from app import timestamps, vocab  # noqa: E402

NAMESPACE = md_operator.NAMESPACE
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
POLL_SECONDS = 0.1
# Each client in the node's namespace: POST until an answer with status 200 (every 0.2 s, a new
# connection each), one JSON line {"sent", "first_byte", "done", "status", "attempts", "woken"} for it.
_CLIENT = r"""
import http.client, json, sys, time
host, port, path, deadline = sys.argv[1], int(sys.argv[2]), sys.argv[3], time.time() + float(sys.argv[4])
body = json.dumps({"model": sys.argv[5], "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
attempts = 0
while time.time() < deadline:
    attempts += 1
    sent = time.time()
    try:
        conn = http.client.HTTPConnection(host, port, timeout=max(1.0, deadline - sent))
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        first = time.time()
        r.read()
        if r.status == 200:
            print(json.dumps({"sent": sent, "first_byte": first, "done": time.time(), "status": r.status,
                              "attempts": attempts, "woken": r.getheader("X-ModelDeployment-Woken")}), flush=True)
            sys.exit(0)
    except OSError:
        pass
    time.sleep(max(0.0, sent + 0.2 - time.time()))
print(json.dumps({"attempts": attempts, "error": "no answer before the deadline"}), flush=True)
sys.exit(1)
"""

COLD_STEPS = {"pod_created": "Pod created", "admitted": "Kueue admitted (gates removed)",
              "container_running": "engine container running", "pod_ready": "Pod Ready",
              "first_byte": "first byte of the answer"}
WAKE_STEPS = {"wake_requested": "activator's wake request on the scaler", "scaler_units": "scaler's units set (0 -> 1)",
              "roles_set": "deployment's roles set", "pod_created": "Pod created",
              "admitted": "Kueue admitted (gates removed)", "container_running": "engine container running",
              "pod_ready": "Pod Ready", "endpoint_back": "endpoint back on the Pod",
              "first_byte": "first byte of the held request's answer"}


class Api:
    """Reads for the poll, straight over HTTP (a kubectl per read would blur the steps)."""

    def __init__(self, cp: e2e_cluster.ControlPlane, name: str) -> None:
        self.http = cp.http_client(timeout=10)
        base = f"/apis/{vocab.GROUP}/{vocab.VERSION}/namespaces/{NAMESPACE}"
        self.md_path = f"{base}/{vocab.PLURAL_MODEL_DEPLOYMENTS}/{name}"
        self.scaler_path = f"{base}/{vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS}/{name}"
        self.pods_path = (f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector="
                          f"{vocab.LABEL_INSTANCE}={name},{vocab.LABEL_COMPONENT}=server")

    def get(self, path: str) -> dict[str, Any]:
        response = self.http.get(path)
        response.raise_for_status()
        out: dict[str, Any] = response.json()
        return out

    def pod(self) -> dict[str, Any] | None:
        live = [p for p in self.get(self.pods_path)["items"] if not p["metadata"].get("deletionTimestamp")]
        return live[0] if live else None


def pod_steps(pod: dict[str, Any] | None, seen: dict[str, float], now: float) -> None:
    if pod is None:
        return
    seen.setdefault("pod_created", now)
    if not pod["spec"].get("schedulingGates"):
        seen.setdefault("admitted", now)
    state = (pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}
    if "running" in state:
        seen.setdefault("container_running", now)
    if stories.pod_ready(pod):
        seen.setdefault("pod_ready", now)


def client(node: e2e_realnode.RealNode, base: str, timeout: float) -> subprocess.Popen[str]:
    host, port = base.removeprefix("http://").split(":")
    return subprocess.Popen(["nsenter", f"--net={node.netns_path}", "--", sys.executable, "-c", _CLIENT, host, port,
                             "/v1/chat/completions", str(timeout), MODEL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def answered(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=30)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the client got no answer: {lines} {err}")
    result: dict[str, Any] = lines[-1]
    return result


def from_nothing(op: md_operator.Operator, node: e2e_realnode.RealNode, name: str) -> dict[str, float]:
    api = Api(op.cp, name)
    t0 = time.time()
    stories.apply(op, stories.md_spec(name, [stories.role()]))
    stories.apply(op, scaler(name, 1))
    service = op.wait(f"{name}'s endpoint", lambda: (op.md(name).get("status") or {}).get("endpoint"), 120, 0.2)
    proc = client(node, stories.endpoint_base(op, node, {"status": {"endpoint": service}}), 300)
    seen: dict[str, float] = {}
    while proc.poll() is None:
        if time.time() - t0 > 300:
            proc.kill()
            raise TimeoutError(f"{name}: no answer in 300 s; seen {seen}\n{md_operator.cluster_digest(op.cp)}")
        pod_steps(api.pod(), seen, time.time() - t0)
        time.sleep(POLL_SECONDS)
    seen["first_byte"] = answered(proc)["first_byte"] - t0
    return {k: round(v, 2) for k, v in seen.items()}


def park(op: md_operator.Operator, node: e2e_realnode.RealNode, name: str) -> dict[str, Any]:
    op.kubectl("scale", f"mds/{name}", "-n", NAMESPACE, "--replicas=0")
    parked = stories.md_when(op, name, f"{name} parked behind the activator",
                             lambda m: (m.get("status") or {}).get("phase") == "Idle"
                             and (m.get("status") or {}).get("endpointRoute") == vocab.ENDPOINT_ROUTE_ACTIVATOR, 180)
    op.wait(f"{name}'s Pods gone", lambda: not stories.role_pods(op, name, "server"), 120)
    service = parked["status"]["endpoint"].split("//")[1].split(".")[0]

    def only_the_activator() -> bool:
        slices = op.get("endpointslices", "-n", NAMESPACE, "-l", f"{vocab.LABEL_SERVICE_NAME}={service}")["items"]
        listed = {s["metadata"]["name"]: [a for e in s.get("endpoints") or [] for a in e["addresses"]] for s in slices}
        return (listed.get(f"{service}-activator") == [node.node_ip]
                and all(not v for k, v in listed.items() if k != f"{service}-activator"))

    op.wait("the endpoint's addresses the activator's alone", only_the_activator, 60)
    time.sleep(3)  # kube-proxy programs the switch
    return parked


def wake(op: md_operator.Operator, node: e2e_realnode.RealNode, name: str, parked: dict[str, Any]) -> dict[str, float]:
    """Steps in epoch seconds as the poll first saw them, then made relative to the client's send."""
    api = Api(op.cp, name)
    since = timestamps.parse((api.get(api.scaler_path).get("status") or {}).get("parkedSince"))
    proc = client(node, stories.endpoint_base(op, node, parked), 300)
    t0 = time.time()
    seen: dict[str, float] = {}
    while proc.poll() is None or "endpoint_back" not in seen:  # the switch back may come after the answer
        now = time.time()
        if now - t0 > 300:
            proc.kill()
            raise TimeoutError(f"{name}: no wake in 300 s; seen {seen}\n{md_operator.cluster_digest(op.cp)}")
        scaler_obj = api.get(api.scaler_path)
        asked = timestamps.parse((scaler_obj["metadata"].get("annotations") or {}).get(vocab.ANNOTATION_WAKE_REQUESTED))
        if asked is not None and (since is None or asked > since):
            seen.setdefault("wake_requested", now)
        if scaler_obj["spec"]["replicas"] > 0:
            seen.setdefault("scaler_units", now)
        md = api.get(api.md_path)
        if md["spec"]["roles"][0]["replicas"] > 0:
            seen.setdefault("roles_set", now)
        if "pod_ready" in seen and "endpointRoute" not in (md.get("status") or {}):
            seen.setdefault("endpoint_back", now)
        pod_steps(api.pod(), seen, now)
        time.sleep(POLL_SECONDS)
    got = answered(proc)
    if got.get("woken") is None:
        raise RuntimeError(f"{name}: the answer was not held and woken by the activator: {got}")
    seen["first_byte"] = got["first_byte"]
    return {k: round(v - got["sent"], 2) for k, v in seen.items()}


def scaler(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": f"{vocab.GROUP}/{vocab.VERSION}", "kind": "ModelDeploymentScaler",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"deploymentRef": {"name": name}, "roles": [{"name": "server", "ratio": 1}],
                     "replicas": replicas, "scaleToZero": {"idleAfter": "1h", "wakeTimeout": "5m"}}}


def run(runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {"poll_seconds": POLL_SECONDS,
                               "probe_periods": {"startup_s": vocab.STARTUP_PERIOD_SECONDS, "readiness_s": 5}}
    with operated_real_node(results, {"MODELDEPLOYMENT_ACTIVATOR_NAMESPACE": NAMESPACE}) as (cp, op):
        node = cp.real_node
        assert node is not None
        parking.start_activator(cp, node, op)
        cold, woken = [], []
        for i in range(runs):
            name = f"bench-wake-{i}"
            cold.append(from_nothing(op, node, name))
            log(f"from nothing, run {i + 1}: {cold[-1]}")
            woken.append(wake(op, node, name, park(op, node, name)))
            log(f"wake, run {i + 1}: {woken[-1]}")
            op.kubectl("delete", "mds", name, "-n", NAMESPACE, "--wait=false", check=False)
            stories.delete_md(op, name)
        results["from_nothing"] = {"runs": cold, **{s: summary([r[s] for r in cold if s in r]) for s in COLD_STEPS}}
        results["wake"] = {"runs": woken, **{s: summary([r[s] for r in woken if s in r]) for s in WAKE_STEPS}}
    return results


def report(results: dict[str, Any], note: str = "") -> str:
    lines = [
        "# A wake's latency, step by step, against the same deployment created from nothing",
        "",
        "`.venv/bin/python -m bench.wake` (bench/wake.py). A control plane of its own with the e2e real node,",
        "the operator, the real Metacontroller and Kueue (joint AdmissionCheck on the real pool), the activator",
        "and the stub engine images (they answer at once: a real engine adds its model load to both columns).",
        "",
        f"Run {results['started']} -> {results['finished']}, {results['cpus']} CPUs, load average "
        f"{results['loadavg_start']} before, {results['loadavg_end']} after.",
    ]
    if note:
        lines += ["", note]
    for key, title, steps, origin in (
            ("from_nothing", "Created from nothing", COLD_STEPS, "`kubectl apply`"),
            ("wake", "Woken by a held request", WAKE_STEPS, "the request was sent")):
        part = results[key]
        runs = len(part["runs"])
        lines += ["", f"## {title} ({runs} run{'' if runs == 1 else 's'}; seconds after {origin}, "
                      f"seen by a {results['poll_seconds']} s poll of the API)", "",
                  "| step | median | min | max |", "| --- | --- | --- | --- |"]
        for step, label in steps.items():
            s = part.get(step)
            if s:
                lines.append(f"| {label} | {s['median']} | {s['min']} | {s['max']} |")
    lines += [
        "",
        f"The engine's probes: startup every {results['probe_periods']['startup_s']} s, readiness every "
        f"{results['probe_periods']['readiness_s']} s (app/render/pod.py), so container running -> Ready is "
        "bounded by the probe periods, not by the engine. A wake adds to a start from nothing the hold, the "
        "activator's wake request and the scaler's pass (the first rows), and the endpoint's switch back "
        "(the activator forwards to the Ready Pod directly, so the first byte does not wait for it).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs (each: from nothing, park, wake)")
    add_report_arguments(parser, "wake")
    args = parser.parse_args(argv)
    publish(args, "wake", report, lambda: run(args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
