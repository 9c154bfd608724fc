"""bench/e2e-scale: N ModelDeployments converging through the real Metacontroller, ours against a
baseline hook service, on the loopback control plane of tests/e2e (etcd, kube-apiserver,
controller-manager, scheduler, kwok nodes, Kueue, Metacontroller v4.17.2).

    bench/e2e-scale.sh [--sizes 10,50,100] [--out bench]

For each N, on the same cluster — first with the operator answering Metacontroller's hooks, then
with bench/e2e_scale_baseline.py (children precomputed from our render, answered after an orjson
parse), then (modes `wide` and `lws`, bench/lws.py) the operator and LeaderWorkerSet on LWS's shape
(one role of 5 replicas x size 2) — three phases are timed:

- apply: `kubectl apply` of N deployments -> every Pod Ready and every deployment's phase Ready;
- edit: a new image on every role of all N -> every Pod replaced by one of the new render, Ready;
- delete: `kubectl delete` of all N -> no deployment, Pod, Workload or Service left.

Per phase: hook calls and p50/p99 (the operator's /metrics histogram; the baseline's own list),
CPU-seconds of every process (/proc/<pid>/stat), the operator's peak RSS (VmHWM, reset per phase),
API server requests by verb (apiserver_request_total deltas, also by verb and resource), during the
edit of `wide` and `lws` each replica's downtime and the fewest Ready replicas (bench/lws.py,
TurnoverWatch), and the load average. Every wait is
bounded; the control plane is stopped (its processes killed) whatever happens.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import cluster as e2e_cluster  # noqa: E402
import md_operator  # noqa: E402

from app import vocab  # noqa: E402
from bench import kueue_workers, lws, operator_profile  # noqa: E402
from bench.e2e_scale_baseline import spec_key  # noqa: E402
from bench.status_fields import StatusFieldWatch  # noqa: E402
from bench.e2e_scale_pool import (CPU_PER_NODE, GPUS_PER_NODE, MEMORY_PER_NODE_GI, PODS_PER_NODE,  # noqa: E402
                                  pool_nodes)

NAMESPACE = md_operator.NAMESPACE
INSTANCE_TYPE = "bench-scale-a10g-linux-amd64"
QUEUE = "bench-scale"
EDIT_IMAGE = "vllm/vllm-openai:v0.29.0-bench-edit"
EDIT_IMAGE_SGLANG = "lmsysorg/sglang:v0.5.18-bench-edit"
HOOKS = ("customize", "sync", "finalize")
COMPONENTS = ("operator", "baseline", "metacontroller", "lws", "kube-apiserver", "etcd", "kueue", "kwok",
              "kube-controller-manager", "kube-scheduler")
# Modes: the operator and the baseline hook on the three shapes; the operator on LeaderWorkerSet's
# shape (every deployment one role of 5 replicas x size 2) and LeaderWorkerSet itself on it.
MODES = ("operator", "baseline", "wide", "lws")
LWS_QUEUE = "bench-scale-lws"
WIDE_REPLICAS = 5
WIDE_SIZE = 2
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# --- the world and the deployments ----------------------------------------------------------------

def instance_type(nodes: int) -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "examples" / "world" / "instancetypes.yaml").read_text())
    a10g = next(d for d in docs if d and d["metadata"]["name"] == "gpustack-nvidia-a10g-linux-amd64")
    it = copy.deepcopy(a10g)
    it["metadata"] = {"name": INSTANCE_TYPE}
    it["spec"]["displayName"] = "NVIDIA A10G (bench/e2e-scale pool)"
    it["status"]["entrance"] = QUEUE
    it["status"]["accelerator"] = {"capacity": nodes * GPUS_PER_NODE, "remaining": nodes * GPUS_PER_NODE,
                                   "onceMaxRequest": 8}
    return it


def node_pool(nodes: int) -> e2e_cluster.NodePool:
    return e2e_cluster.NodePool("scale", nodes, INSTANCE_TYPE, "nvidia.com/gpu", GPUS_PER_NODE,
                                cpu=str(CPU_PER_NODE), memory=f"{MEMORY_PER_NODE_GI}Gi", pods=str(PODS_PER_NODE),
                                nodes_per_rack=4)


def kueue_objects(nodes: int) -> list[dict[str, Any]]:
    quota = [{"name": "cpu", "nominalQuota": str(nodes * CPU_PER_NODE)},
             {"name": "memory", "nominalQuota": f"{nodes * MEMORY_PER_NODE_GI}Gi"},
             {"name": "ephemeral-storage", "nominalQuota": f"{nodes * 2}Ti"},
             {"name": "nvidia.com/gpu", "nominalQuota": str(nodes * GPUS_PER_NODE)}]
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": QUEUE},
         "spec": {"nodeLabels": {"gpustack.ai/instance-type": INSTANCE_TYPE}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": QUEUE},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                  "queueingStrategy": "BestEffortFIFO",
                  "admissionChecksStrategy": {"admissionChecks": [{"name": "gpustack-model-deployment-joint"}]},
                  "resourceGroups": [{"coveredResources": [q["name"] for q in quota],
                                      "flavors": [{"name": QUEUE, "resources": quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": NAMESPACE}, "spec": {"clusterQueue": QUEUE}},
        # LeaderWorkerSet's: the same flavor and quota, without our joint check (nothing would set it).
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": LWS_QUEUE},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                  "queueingStrategy": "BestEffortFIFO",
                  "resourceGroups": [{"coveredResources": [q["name"] for q in quota],
                                      "flavors": [{"name": QUEUE, "resources": quota}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": LWS_QUEUE, "namespace": NAMESPACE}, "spec": {"clusterQueue": LWS_QUEUE}},
    ]


def deployment(index: int, only: str | None = None) -> dict[str, Any]:
    """About 10 Pods each, in three shapes taken in turn: two one-Pod-replica Server roles (vLLM);
    size-2 replicas (SGLang over two nodes); a routed prefill/decode pair (llm-d router, KV cache).
    `only="wide"`: every deployment the size-2 shape (LeaderWorkerSet's)."""
    shape = only or ("server", "wide", "pd")[index % 3]
    name = f"{'w' if only else 's'}{index:03d}-{shape}"
    one = {"accelerator": 1}
    if shape == "server":
        spec = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                "roles": [{"name": "chat", "replicas": 5, "instanceType": INSTANCE_TYPE, "resources": one},
                          {"name": "batch", "replicas": 5, "instanceType": INSTANCE_TYPE, "resources": one}]}
    elif shape == "wide":
        spec = {"model": {"name": "Qwen/Qwen2.5-14B-Instruct"}, "engine": {"name": "SGLang", "version": "0.5.18"},
                "roles": [{"name": "server", "replicas": WIDE_REPLICAS, "size": WIDE_SIZE, "instanceType": INSTANCE_TYPE,
                           "resources": one, "extraArgs": ["--tp-size", "2", "--nnodes", "2"]}]}
    else:
        spec = {"model": {"name": "Qwen/Qwen3-8B"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                "kvCache": {"poolRef": {"name": "team-a-dram"}},
                "router": {"name": "llm-d-router", "requestTimeoutSeconds": 300, "disaggregationThresholdTokens": 512},
                "roles": [{"name": "prefill", "kind": "Prefill", "replicas": 4, "instanceType": INSTANCE_TYPE,
                           "resources": one},
                          {"name": "decode", "kind": "Decode", "replicas": 5, "instanceType": INSTANCE_TYPE,
                           "resources": one}]}
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def edited(md: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(md)
    image = EDIT_IMAGE_SGLANG if out["spec"]["engine"]["name"] == "SGLang" else EDIT_IMAGE
    for role in out["spec"]["roles"]:
        role["image"] = image
    return out


# --- precomputing the baseline's answers from our render ---------------------------------------

def precompute(stored: list[dict[str, Any]], world_objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each stored deployment (as the API server returns it after our mutating webhook): our
    reconcile's children for it as a new deployment, by role and ordinal, and its customize answer."""
    from app import vocab
    from app.api.hooks import hook_request
    from app.control.sync import customize, reconcile
    from app.main import build_state
    from app.settings import Settings
    from app.world import related_map

    settings = build_state(Settings(kube="off")).sync_settings
    related = related_map(world_objects)
    out: dict[str, dict[str, Any]] = {}
    for md in stored:
        parent = copy.deepcopy(md)
        parent["metadata"].setdefault("uid", "00000000-0000-0000-0000-000000000000")
        request = hook_request({"controller": {}, "parent": parent, "related": related,
                                "children": {key: {} for key in vocab.DECLARED_CHILD_MAPS}})
        result = reconcile(request, settings, now="2026-01-01T00:00:00Z")
        pods: dict[str, dict[str, list[dict[str, Any]]]] = {}
        fingerprints: dict[str, str] = {}
        others = []
        for child in result.children:
            labels = child["metadata"].get("labels") or {}
            if child["kind"] == "Pod":
                role = labels["app.kubernetes.io/component"]
                pods.setdefault(role, {}).setdefault(labels["modeldeployment.gpustack.ai/pod-ordinal"], []).append(child)
                fingerprints[role] = child["metadata"]["annotations"]["modeldeployment.gpustack.ai/fingerprint"]
            else:
                others.append(child)
        sizes = {role["name"]: role.get("size", 1) for role in md["spec"]["roles"]}
        router_pods = sum((c.get("spec") or {}).get("replicas", 1) for c in others if c["kind"] == "Deployment")
        out.setdefault(md["metadata"]["name"], {})[spec_key(md["spec"])] = {
            "pods": pods, "fingerprints": fingerprints, "sizes": sizes, "others": others,
            "customize": customize(request.deployment), "pod_count": sum(len(p) for o in pods.values() for p in o.values()),
            "router_pods": router_pods}
    return out


# --- observing --------------------------------------------------------------------------------

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


class Observer:
    def __init__(self, cp: e2e_cluster.ControlPlane, op: md_operator.Operator, baseline_port: int,
                 kueue_pprof: str | None = None) -> None:
        self.cp = cp
        self.op = op
        self.kueue_pprof = kueue_pprof  # host:port of Kueue's pprof, when its workers are sampled
        self.api = cp.http_client(timeout=60)
        import httpx
        self.local = httpx.Client(timeout=30)
        self.baseline_port = baseline_port

    def table(self, path: str, metadata: bool = True) -> list[dict[str, Any]]:
        """Rows as the Table view (cells by column); with `metadata`, each object's metadata too
        (annotations included: at 1,000 Pods several MB, so it is asked only when needed)."""
        response = self.api.get(path, params={"includeObject": "Metadata" if metadata else "None"},
                                headers={"Accept": TABLE})
        response.raise_for_status()
        body = orjson.loads(response.content)
        columns = [c["name"] for c in body.get("columnDefinitions") or []]
        return [{"cells": dict(zip(columns, row["cells"])), "meta": (row.get("object") or {}).get("metadata") or {}}
                for row in body.get("rows") or []]

    def pods(self, metadata: bool = True) -> list[dict[str, Any]]:
        return self.table(f"/api/v1/namespaces/{NAMESPACE}/pods", metadata)

    def deployments(self) -> list[dict[str, Any]]:
        response = self.api.get(f"/apis/worker.gpustack.ai/v1/namespaces/{NAMESPACE}/modeldeployments")
        response.raise_for_status()
        return orjson.loads(response.content)["items"]

    def count(self, path: str) -> int:
        response = self.api.get(path, params={"limit": 500, "includeObject": "None"}, headers={"Accept": TABLE})
        response.raise_for_status()
        return len(orjson.loads(response.content).get("rows") or [])

    def leftovers(self) -> dict[str, int]:
        return {
            "modeldeployments": self.count(f"/apis/worker.gpustack.ai/v1/namespaces/{NAMESPACE}/modeldeployments"),
            "pods": self.count(f"/api/v1/namespaces/{NAMESPACE}/pods"),
            "workloads": self.count(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads"),
            "services": self.count(f"/api/v1/namespaces/{NAMESPACE}/services"),
            "deployments": self.count(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"),
        }

    # metrics
    def snapshot(self) -> dict[str, Any]:
        return {"t": time.monotonic(), "cpu": self.cpu(), "apiserver": self.apiserver_requests(),
                "operator": self.operator_hooks(), "baseline": self.baseline_stats(), "loadavg": os.getloadavg()}

    def pid(self, name: str) -> int | None:
        if name == "operator" and self.op.replicas:
            name = self.op.replicas[0].name  # the bench runs the operator as one process
        comp = self.cp.components.get(name)
        return comp.pid if comp is not None else None

    def cpu(self) -> dict[str, float]:
        out = {}
        for name in COMPONENTS:
            pid = self.pid(name)
            if pid is None:
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
            except OSError:
                pass
        return out

    def reset_peak_rss(self) -> None:
        pid = self.pid("operator")
        if pid is not None:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM (Linux >= 4.0)

    def peak_rss_mb(self) -> float:
        pid = self.pid("operator")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def apiserver_requests(self) -> dict[str, float]:
        """apiserver_request_total by verb, and by "verb resource[/subresource]" (keys with a space)."""
        text = self.api.get("/metrics").text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("apiserver_request_total{"):
                labels, value = line.rsplit(" ", 1)
                verb = labels.split('verb="', 1)[1].split('"', 1)[0]
                resource = labels.split('resource="', 1)[1].split('"', 1)[0] if 'resource="' in labels else ""
                sub = labels.split('subresource="', 1)[1].split('"', 1)[0] if 'subresource="' in labels else ""
                out[verb] = out.get(verb, 0.0) + float(value)
                key = f"{verb} {resource}" + (f"/{sub}" if sub else "")
                out[key] = out.get(key, 0.0) + float(value)
        return out

    def operator_hooks(self) -> dict[str, dict[str, float]]:
        """Cumulative bucket counts of modeldeployment_hook_duration_seconds per hook."""
        text = self.local.get(f"http://127.0.0.1:{self.op.hooks_port}/metrics").text
        out: dict[str, dict[str, float]] = {}
        for line in text.splitlines():
            if line.startswith("modeldeployment_hook_duration_seconds_bucket{"):
                labels, value = line.rsplit(" ", 1)
                hook = labels.split('hook="', 1)[1].split('"', 1)[0]
                le = labels.split('le="', 1)[1].split('"', 1)[0]
                out.setdefault(hook, {})[le] = float(value)
            elif line.startswith("modeldeployment_hook_duration_seconds_sum{"):
                labels, value = line.rsplit(" ", 1)
                hook = labels.split('hook="', 1)[1].split('"', 1)[0]
                out.setdefault(hook, {})["sum"] = float(value)
        return out

    def baseline_stats(self) -> dict[str, Any]:
        try:
            return self.local.get(f"http://127.0.0.1:{self.baseline_port}/stats").json()
        except Exception:  # noqa: BLE001 - not started yet
            return {}


def _histogram_quantile(buckets: dict[str, float], q: float) -> float:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket."""
    bounds = sorted((float("inf") if le == "+Inf" else float(le), n) for le, n in buckets.items() if le != "sum")
    total = bounds[-1][1] if bounds else 0
    if total <= 0:
        return float("nan")
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in bounds:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / max(count - prev_count, 1e-9)
        prev_bound, prev_count = bound, count
    return prev_bound


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def phase_report(mode: str, before: dict[str, Any], after: dict[str, Any], peak_rss_mb: float,
                 seconds: float) -> dict[str, Any]:
    cpu = {k: round(after["cpu"].get(k, 0.0) - before["cpu"].get(k, 0.0), 2) for k in after["cpu"]}
    counted = {v: int(after["apiserver"].get(v, 0) - before["apiserver"].get(v, 0)) for v in after["apiserver"]}
    verbs = {v: n for v, n in counted.items() if " " not in v}
    by_resource = {v: n for v, n in counted.items() if " " in v and n}
    hooks: dict[str, Any] = {}
    if mode in ("operator", "wide"):
        for hook in HOOKS:
            a, b = after["operator"].get(hook, {}), before["operator"].get(hook, {})
            delta = {le: a[le] - b.get(le, 0.0) for le in a}
            calls = int(delta.get("+Inf", 0))
            if calls:
                hooks[hook] = {"calls": calls, "p50_ms": round(_histogram_quantile(delta, 0.5) * 1e3, 2),
                               "p99_ms": round(_histogram_quantile(delta, 0.99) * 1e3, 2),
                               "mean_ms": round(delta.get("sum", 0.0) / calls * 1e3, 2)}
    else:
        a, b = after["baseline"].get("calls", {}), before["baseline"].get("calls", {})
        for hook in HOOKS:
            values = a.get(hook, [])[len(b.get(hook, [])):]
            if values:
                hooks[hook] = {"calls": len(values), "p50_ms": round(_quantile(values, 0.5) * 1e3, 2),
                               "p99_ms": round(_quantile(values, 0.99) * 1e3, 2),
                               "mean_ms": round(sum(values) / len(values) * 1e3, 2)}
    return {"seconds": round(seconds, 1), "hooks": hooks, "cpu_seconds": cpu,
            "peak_rss_mb": round(peak_rss_mb, 1), "apiserver_requests": {k: v for k, v in verbs.items() if v},
            "apiserver_requests_by_resource": dict(sorted(by_resource.items(), key=lambda kv: -kv[1])),
            "loadavg_end": [round(x, 2) for x in after["loadavg"]]}


# --- the run ------------------------------------------------------------------------------------

def wait_for(what: str, predicate: Callable[[], Any], timeout: float, interval: float, cp: e2e_cluster.ControlPlane,
             progress: Callable[[], str] | None = None) -> float:
    """Seconds until `predicate()` is true; raises TimeoutError after `timeout`. A connection the
    loaded API server drops (a TLS handshake cut short) is one more poll, not the run's end: the
    processes are checked alive first."""
    start = time.monotonic()
    last_note = start
    while True:
        cp.check_alive()
        try:
            if predicate():
                return time.monotonic() - start
        except httpx.TransportError as exc:
            log(f"    {what}: poll failed ({type(exc).__name__}: {exc}); polling again")
        now = time.monotonic()
        if now - start > timeout:
            raise TimeoutError(f"{what}: not done after {timeout:.0f} s" + (f" ({progress()})" if progress else ""))
        if progress and now - last_note > 30:
            log(f"    {what}: {progress()}")
            last_note = now
        time.sleep(interval)


def _ready_cell(cell: Any) -> bool:
    ready, _, total = str(cell).partition("/")
    return ready.isdigit() and ready == total and int(total) > 0


class Pass:
    """One mode (operator or baseline) at one N: apply, edit, delete."""

    def __init__(self, obs: Observer, mode: str, mds: list[dict[str, Any]], renders: dict[str, dict[str, Any]],
                 edited_mds: list[dict[str, Any]], work: Path, interval: float) -> None:
        self.obs = obs
        self.cp = obs.cp
        self.mode = mode
        self.mds = mds
        self.edited = edited_mds
        self.renders = renders
        self.work = work
        self.interval = interval
        self.state = ""

    def expected(self, mds: list[dict[str, Any]], key_of: dict[str, str]) -> tuple[int, set[str]]:
        pods, fingerprints = 0, set()
        for md in mds:
            render = self.renders[md["metadata"]["name"]][key_of[md["metadata"]["name"]]]
            pods += render["pod_count"] + render["router_pods"]
            fingerprints |= set(render["fingerprints"].values())
        return pods, fingerprints

    def converged(self, want_pods: int, fingerprints: set[str], generation: int) -> bool:
        # First the cheap view (name, ready, status): a terminating Pod shows as "Terminating".
        rows = self.obs.pods(metadata=False)
        ready = sum(1 for r in rows if _ready_cell(r["cells"].get("Ready")) and r["cells"].get("Status") != "Terminating")
        if len(rows) != want_pods or ready != want_pods:
            self.state = f"{ready}/{want_pods} Pods Ready, {len(rows)} Pods"
            return False
        rows = self.obs.pods()
        live = [r for r in rows if not r["meta"].get("deletionTimestamp")]
        ready = sum(1 for r in live if _ready_cell(r["cells"].get("Ready")))
        stale = sum(1 for r in live if (r["meta"].get("annotations") or {}).get("modeldeployment.gpustack.ai/fingerprint")
                    not in fingerprints and "modeldeployment.gpustack.ai/fingerprint" in (r["meta"].get("annotations") or {}))
        terminating = len(rows) - len(live)
        self.state = f"{ready}/{want_pods} Pods Ready, {len(live)} live, {terminating} terminating, {stale} stale"
        if not (len(live) == want_pods and ready == want_pods and stale == 0 and terminating == 0):
            return False
        mds = self.obs.deployments()
        phases = [((m.get("status") or {}).get("phase"), m["metadata"].get("generation")) for m in mds]
        ready_mds = sum(1 for phase, gen in phases if phase == "Ready" and gen == generation)
        self.state += f"; {ready_mds}/{len(self.mds)} deployments Ready"
        return len(mds) == len(self.mds) and ready_mds == len(mds)

    def replica_of(self, labels: dict[str, str]) -> tuple[str, str] | None:
        """A Pod's (deployment, replica) for the turnover watch: its role and ordinal (a replacement
        is another pod group, in the ordinal's other slot: docs/kueue.md#incarnation-slots)."""
        role, ordinal = labels.get("app.kubernetes.io/component"), labels.get(vocab.LABEL_POD_ORDINAL)
        deployment = labels.get("app.kubernetes.io/instance")
        return (deployment, f"{role}/{ordinal}") if role and ordinal and deployment else None

    def timed(self, name: str, action: Callable[[], None], done: Callable[[], bool], timeout: float,
              watch: bool = False) -> dict[str, Any]:
        self.obs.reset_peak_rss()
        turnovers = None
        if watch:
            turnovers = lws.TurnoverWatch(lambda: self.cp.http_client(timeout=30), NAMESPACE, self.replica_of,
                                          WIDE_SIZE)
            turnovers.start()
        status_fields = None
        if self.mode in ("operator", "wide", "baseline"):
            status_fields = StatusFieldWatch(lambda: self.cp.http_client(timeout=30), NAMESPACE)
            status_fields.start()
        workers = kueue_workers.Sampler(self.obs.kueue_pprof) if self.obs.kueue_pprof else None
        if workers is not None:
            workers.start()
        before = self.obs.snapshot()
        action()
        try:
            seconds = wait_for(f"{self.mode} {name}", done, timeout, self.interval, self.cp, lambda: self.state)
        finally:
            rollout = turnovers.stop() if turnovers is not None else None
            fields = status_fields.stop() if status_fields is not None else None
            busy = workers.stop() if workers is not None else None
        after = self.obs.snapshot()
        report = phase_report(self.mode, before, after, self.obs.peak_rss_mb(), seconds)
        if fields is not None:
            report["status_fields"] = fields
        if busy is not None:
            report["kueue_workers"] = busy
        report["loadavg_start"] = [round(x, 2) for x in before["loadavg"]]
        if rollout is not None:
            report["rollout"] = rollout
        log(f"  {self.mode} {name}: {report['seconds']} s; hooks {report['hooks']}; cpu {report['cpu_seconds']}")
        return report

    def run(self) -> dict[str, Any]:
        n = len(self.mds)
        apply_file_ = self.work / f"apply-{n}.yaml"
        edit_file = self.work / f"edit-{n}.yaml"
        apply_file_.write_text(yaml.safe_dump_all(self.mds))
        edit_file.write_text(yaml.safe_dump_all(self.edited))
        keys = {md["metadata"]["name"]: k for md, k in zip(self.mds, self.stored_keys(self.mds))}
        edit_keys = {md["metadata"]["name"]: k for md, k in zip(self.edited, self.stored_keys(self.edited))}
        want, fps = self.expected(self.mds, keys)
        want_edit, fps_edit = self.expected(self.edited, edit_keys)
        result: dict[str, Any] = {"pods": want}
        budget = 300 + 1.5 * want  # seconds: a bound, far above what a run takes
        result["apply"] = self.timed(
            "apply", lambda: apply_file(self.cp, apply_file_),
            lambda: self.converged(want, fps, 1), budget)
        result["edit"] = self.timed(
            "edit", lambda: apply_file(self.cp, edit_file),
            lambda: self.converged(want_edit, fps_edit, 2), budget * 2, watch=self.mode == "wide")
        result["delete"] = self.timed(
            "delete", lambda: apply_file(self.cp, edit_file, "delete", "--wait=false", "--ignore-not-found"),
            self.nothing_left, budget)
        return result

    def stored_keys(self, mds: list[dict[str, Any]]) -> list[str]:
        return [self.renders["__keys__"][json.dumps(md, sort_keys=True)] for md in mds]

    def nothing_left(self) -> bool:
        left = self.obs.leftovers()
        self.state = ", ".join(f"{v} {k}" for k, v in left.items() if v)
        return not any(left.values())


class LwsPass(Pass):
    """LeaderWorkerSet on the wide shape: N LWS objects of WIDE_REPLICAS groups of WIDE_SIZE Pods,
    the Pod template our render gives the wide shape's Pods; apply, image edit, delete."""

    def __init__(self, obs: Observer, lwss: list[dict[str, Any]], edited_lwss: list[dict[str, Any]], work: Path,
                 interval: float) -> None:
        super().__init__(obs, "lws", [], {}, [], work, interval)
        self.lwss = lwss
        self.edited_lwss = edited_lwss

    def replica_of(self, labels: dict[str, str]) -> tuple[str, str] | None:
        name, group = labels.get(lws.LWS_NAME_LABEL), labels.get(lws.LWS_GROUP_LABEL)
        return (name, group) if name and group is not None else None

    def lws_converged(self, want_pods: int) -> bool:
        rows = self.obs.pods(metadata=False)
        ready = sum(1 for r in rows if _ready_cell(r["cells"].get("Ready")) and r["cells"].get("Status") != "Terminating")
        self.state = f"{ready}/{want_pods} Pods Ready, {len(rows)} Pods"
        if len(rows) != want_pods or ready != want_pods:
            return False
        response = self.obs.api.get(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NAMESPACE}/leaderworkersets")
        response.raise_for_status()
        items = orjson.loads(response.content)["items"]
        done = sum(1 for i in items if (i.get("status") or {}).get("readyReplicas") == i["spec"]["replicas"]
                   and (i.get("status") or {}).get("updatedReplicas") == i["spec"]["replicas"]
                   and (i.get("status") or {}).get("observedGeneration", i["metadata"].get("generation"))
                   == i["metadata"].get("generation"))
        self.state += f"; {done}/{len(self.lwss)} LeaderWorkerSets updated and Ready"
        return len(items) == len(self.lwss) and done == len(items)

    def run(self) -> dict[str, Any]:
        n = len(self.lwss)
        apply_file_ = self.work / f"lws-apply-{n}.yaml"
        edit_file = self.work / f"lws-edit-{n}.yaml"
        apply_file_.write_text(yaml.safe_dump_all(self.lwss))
        edit_file.write_text(yaml.safe_dump_all(self.edited_lwss))
        want = n * WIDE_REPLICAS * WIDE_SIZE
        result: dict[str, Any] = {"pods": want}
        budget = 300 + 1.5 * want
        result["apply"] = self.timed("apply", lambda: apply_file(self.cp, apply_file_),
                                     lambda: self.lws_converged(want), budget)
        time.sleep(2 * self.interval)  # the LWS status settles (its last readyReplicas write)
        result["edit"] = self.timed("edit", lambda: apply_file(self.cp, edit_file),
                                    lambda: self.lws_converged(want) and self.images_are(EDIT_IMAGE_SGLANG),
                                    budget * 2, watch=True)
        result["delete"] = self.timed(
            "delete", lambda: apply_file(self.cp, edit_file, "delete", "--wait=false", "--ignore-not-found"),
            self.nothing_left, budget)
        return result

    def images_are(self, image: str) -> bool:
        response = self.obs.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
        response.raise_for_status()
        pods = orjson.loads(response.content)["items"]
        stale = sum(1 for p in pods if any(c.get("image") != image for c in p["spec"]["containers"]))
        self.state += f"; {stale} Pods of the old image"
        return stale == 0

    def nothing_left(self) -> bool:
        left = self.obs.leftovers()
        left["leaderworkersets"] = self.obs.count(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NAMESPACE}/leaderworkersets")
        left["statefulsets"] = self.obs.count(f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets")
        self.state = ", ".join(f"{v} {k}" for k, v in left.items() if v)
        return not any(left.values())


def lws_objects(n: int, renders: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """N LeaderWorkerSets with the Pod our render gives the wide shape's Pods, and their edits."""
    wide = next(by_key for name, by_key in renders.items() if name.startswith("w") and name.endswith("-wide"))
    render = next(iter(wide.values()))
    pod = render["pods"]["server"]["0"][0]
    objects = []
    for i in range(n):
        name = f"l{i:03d}-lws"
        template = lws.pod_template(pod, {"app.kubernetes.io/name": "bench-lws"})
        objects.append(lws.leader_worker_set(name, NAMESPACE, LWS_QUEUE, template, WIDE_REPLICAS, WIDE_SIZE))
    return objects, [lws.with_image(o, EDIT_IMAGE_SGLANG) for o in objects]


def apply_file(cp: e2e_cluster.ControlPlane, path: Path, *verb: str) -> None:
    """`kubectl apply -f` (or another verb), once more when the API server lost a webhook's answer (an EOF
    on a connection the webhook server closed as it was reused): apply and delete are idempotent."""
    args = verb or ("apply",)
    try:
        cp.kubectl(*args, "-f", str(path), timeout=300)
    except e2e_cluster.KubectlError as exc:
        log(f"    kubectl {' '.join(args)} failed, once more: {str(exc)[-300:]}")
        cp.kubectl(*args, "-f", str(path), timeout=300)


def dry_run(cp: e2e_cluster.ControlPlane, mds: list[dict[str, Any]], work: Path, tag: str) -> list[dict[str, Any]]:
    """What the API server would store for each (our mutating webhook and the CRD's defaults applied)."""
    path = work / f"dry-run-{tag}.yaml"
    path.write_text(yaml.safe_dump_all(mds))
    out = cp.kubectl("create", "--dry-run=server", "-o", "json", "-f", str(path), timeout=300).stdout
    objects, decoder, at = [], json.JSONDecoder(), 0
    while True:  # one JSON document per object, one after the other
        while at < len(out) and out[at].isspace():
            at += 1
        if at >= len(out):
            break
        doc, at = decoder.raw_decode(out, at)
        objects += doc["items"] if doc.get("kind") == "List" else [doc]
    return objects


def point_hooks(cp: e2e_cluster.ControlPlane, port: int) -> None:
    patch = [{"op": "replace", "path": f"/spec/hooks/{hook}/webhook/url",
              "value": f"http://127.0.0.1:{port}/hooks/{hook}"} for hook in HOOKS]
    cp.kubectl("patch", "compositecontroller", "modeldeployment", "--type=json", "-p", json.dumps(patch))


def run(sizes: list[int], out: Path, modes: tuple[str, ...], source: str = "", profile: bool = False,
        kueue_gates: dict[str, bool] | None = None, kueue_workers_sampled: bool = False,
        kueue_concurrency: dict[str, int] | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": {}, "source": source, "kueue_feature_gates": dict(kueue_gates or {}),
                               "kueue_workers_sampled": kueue_workers_sampled,
                               "kueue_concurrency": dict(kueue_concurrency or {}),
                               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "loadavg_start": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    with_lws = "lws" in modes
    nodes = pool_nodes(max(sizes))
    pool = node_pool(nodes)
    # Kueue as it ships, controller concurrency included (bench/README.md, e2e-scale).
    # --kueue-gate sets Kueue feature gates on top (e.g. DisableWaitForPodsReady=true, to measure
    # what Kueue's PodsReady condition costs a turnover: docs/kueue.md#what-a-turnover-waits-for).
    # --kueue-workers: Kueue's goroutines are sampled through its pprof endpoint in every phase
    # (bench/kueue_workers.py), to see which of its controllers a turnover waits behind.
    kueue_pprof = f"127.0.0.1:{e2e_cluster.free_ports(1)[0]}" if kueue_workers_sampled else None
    plane = lws.LwsControlPlane if with_lws else e2e_cluster.ControlPlane
    # --kueue-concurrency KIND=N: a Kueue controller's workers instead of the shipped number.
    overrides: dict[str, Any] = {"pprofBindAddress": kueue_pprof} if kueue_pprof else {}
    if kueue_concurrency:
        overrides["controller"] = {"groupKindConcurrency": dict(kueue_concurrency)}
    cp = plane(nodes=(pool,), kueue_as_shipped=True, kueue_feature_gates=kueue_gates,
               kueue_config_overrides=overrides)
    results["kube_controller_manager_client"] = (f"{lws.CLIENT_QPS} qps, burst {lws.CLIENT_BURST}" if with_lws
                                                 else "defaults (20 qps, burst 30)")
    failed = True
    sampler: operator_profile.Sampler | None = None
    try:
        t0 = time.monotonic()
        cp.start()
        if with_lws:
            assert isinstance(cp, lws.LwsControlPlane)
            cp.start_lws()
        # One operator process, as in every earlier run: its CPU and memory are that process's.
        op = md_operator.start_operator(cp, replicas=1)
        log(f"control plane and operator up in {time.monotonic() - t0:.0f} s; work dir {cp.work_dir}")
        pid = cp.components[op.replicas[0].name].pid if profile else None
        if pid is not None:
            sampler = operator_profile.Sampler(pid, out / "operator-profile.raw")
        it = instance_type(nodes)
        status = it.pop("status")
        cp.apply(it)
        cp.kubectl("patch", "instancetypes.worker.gpustack.ai", INSTANCE_TYPE, "--subresource=status", "--type=merge",
                   "-p", json.dumps({"status": status}))
        it["status"] = status
        cp.apply(kueue_objects(nodes))
        world = [it] + [o for o in yaml.safe_load_all((ROOT / "examples" / "world" / "kvcache.yaml").read_text()) if o]
        work = cp.work_dir / "e2e-scale"
        work.mkdir(exist_ok=True)
        renders_file = work / "renders.json"
        renders: dict[str, Any] = {"__keys__": {}}
        renders_file.write_bytes(orjson.dumps(renders))
        (baseline_port,) = e2e_cluster.free_ports(1)
        cp.start_process("baseline", [sys.executable, "-m", "bench.e2e_scale_baseline", "--port", str(baseline_port),
                                      "--renders", str(renders_file), "--kubeconfig", str(cp.kubeconfig)],
                         env={**cp.env, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
        obs = Observer(cp, op, baseline_port, kueue_pprof)
        wait_for("the baseline service", lambda: _healthy(obs, baseline_port), 60, 0.5, cp)
        for n in sizes:
            batches = {"mixed": [deployment(i) for i in range(n)], "wide": [deployment(i, "wide") for i in range(n)]}
            edits = {shape: [edited(md) for md in mds] for shape, mds in batches.items()}
            for shape in batches:
                for tag, batch in (("apply", batches[shape]), ("edit", edits[shape])):
                    stored = dry_run(cp, batch, work, f"{shape}-{tag}-{n}")
                    for md, st in zip(batch, stored):
                        renders["__keys__"][json.dumps(md, sort_keys=True)] = spec_key(st["spec"])
                    for name, by_key in precompute(stored, world).items():
                        renders.setdefault(name, {}).update(by_key)
            renders_file.write_bytes(orjson.dumps({k: v for k, v in renders.items() if k != "__keys__"}))
            interval = 1.0 if n <= 10 else 2.0
            results["sizes"][str(n)] = {}
            for mode in modes:
                log(f"N={n} {mode}")
                if mode == "lws":
                    lwss, lws_edits = lws_objects(n, renders)
                    one = LwsPass(obs, lwss, lws_edits, work, interval).run()
                else:
                    point_hooks(cp, baseline_port if mode == "baseline" else op.hooks_port)
                    time.sleep(3)  # Metacontroller restarts the controller on the CompositeController's change
                    shape = "wide" if mode == "wide" else "mixed"
                    one = Pass(obs, mode, batches[shape], renders, edits[shape], work, interval).run()
                results["sizes"][str(n)][mode] = one
                (out / "e2e-scale.partial.json").write_text(json.dumps(results, indent=1))
        results["baseline_stats"] = {k: v for k, v in obs.baseline_stats().items() if k != "calls"}
        failed = False
    finally:
        results["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if sampler is not None:
            _write_profile(sampler, out, sizes, modes, source)
        cp.stop(keep_work_dir=failed)
    return results


def _write_profile(sampler: operator_profile.Sampler, out: Path, sizes: list[int], modes: tuple[str, ...],
                   source: str) -> None:
    """The operator's profile over the whole run: bench/operator-profile-<sizes>-<modes>.txt."""
    said = sampler.stop()
    if not sampler.raw.exists():
        log(f"no operator profile: {said}")
        return
    tag = f"{'-'.join(map(str, sizes))}-{'-'.join(m for m in modes if m != 'lws')}"
    title = f"the operator process over e2e-scale N = {', '.join(map(str, sizes))}, modes {', '.join(modes)} ({source})"
    (out / f"operator-profile-{tag}.txt").write_text(operator_profile.summarize(sampler.raw, title))
    sampler.raw.unlink()


def webhook_latency() -> dict[str, Any]:
    """bench/webhooks.py's reviews against a fresh etcd + kube-apiserver, once the scale passes are
    done (their control plane stopped), so the run carries its own webhook figures."""
    import tempfile

    from bench import webhooks

    log("webhook latency against a real API server (bench/webhooks.py run_apiserver)")
    with tempfile.TemporaryDirectory(prefix="e2e-scale-webhooks-") as tmp:
        out = webhooks.run_apiserver(lambda line: log(line.strip()), Path(tmp))
    return {**out, "when": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
            "loadavg_end": [round(x, 2) for x in os.getloadavg()]}


def _healthy(obs: Observer, port: int) -> bool:
    try:
        return obs.local.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    except Exception:  # noqa: BLE001
        return False


def _source() -> str:
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "app"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return f"commit {commit}" + (" +dirty app/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def kueue_gate(text: str) -> tuple[str, bool]:
    """`NAME=true` or `NAME=false`, as Kueue's featureGates take them."""
    name, _, value = text.partition("=")
    if not name or value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: a Kueue feature gate is NAME=true or NAME=false")
    return name, value.lower() == "true"


def kueue_concurrency(text: str) -> tuple[str, int]:
    """`KIND=N` as Kueue's controller.groupKindConcurrency takes it (`Pod=20`,
    `Workload.kueue.x-k8s.io=20`)."""
    kind, _, value = text.partition("=")
    if not kind or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a Kueue controller's concurrency is KIND=N, N >= 1 "
                                         "(e.g. Pod=20)")
    return kind, int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,50,100,200")
    parser.add_argument("--out", type=Path, default=ROOT / "bench")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--source", default=None, help="what code ran (default: this tree's git commit, +dirty)")
    parser.add_argument("--profile", action="store_true",
                        help="sample the operator process with py-spy for the whole run (bench/operator_profile.py)")
    parser.add_argument("--no-webhooks", action="store_true",
                        help="skip the webhook latency against a real API server (bench/webhooks.py) after the passes")
    parser.add_argument("--kueue-gate", action="append", default=[], type=kueue_gate, metavar="NAME=true|false",
                        help="a Kueue feature gate on top of the run's (repeatable), e.g. DisableWaitForPodsReady=true")
    parser.add_argument("--kueue-workers", action="store_true",
                        help="sample Kueue's goroutines in every phase: its busy workers per controller "
                             "(bench/kueue_workers.py)")
    parser.add_argument("--kueue-concurrency", action="append", default=[], type=kueue_concurrency,
                        metavar="KIND=N", help="a Kueue controller's workers instead of the shipped number "
                                               "(repeatable), e.g. Pod=20")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(sizes, args.out, tuple(args.modes.split(",")), args.source or _source(), args.profile,
                  dict(args.kueue_gate), args.kueue_workers, dict(args.kueue_concurrency))
    (args.out / "e2e-scale.json").write_text(json.dumps(results, indent=1))
    if not args.no_webhooks:
        try:
            results["webhooks_apiserver"] = [webhook_latency()]
        except Exception as exc:  # noqa: BLE001 - the scale figures above are kept whatever happens here
            results["webhooks_apiserver"] = [{"available": False, "reason": f"{type(exc).__name__}: {exc}"[:600]}]
        (args.out / "e2e-scale.json").write_text(json.dumps(results, indent=1))
    partial = args.out / "e2e-scale.partial.json"
    if partial.exists():
        partial.unlink()
    from bench import e2e_scale_report

    e2e_scale_report.write(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
