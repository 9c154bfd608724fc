#!/usr/bin/env python3
"""The run behind docs/images/dashboard.png: the operator on the e2e control plane (real
kube-apiserver, Kueue and Metacontroller; kwok plays the GPU nodes), installed as
tests/e2e/md_operator.py does, its /metrics scraped once a second while one deployment goes
through everything the dashboard's panels show:

1. `chat` (2 replicas) is created through the webhooks (and one refused write), admitted by Kueue
   and becomes Ready: phase, replicas, admission wait, hook and webhook latency and decisions;
2. a scale step, 2 -> 3 replicas;
3. its InstanceType loses its hardware detail for a while (an inventory controller's hiccup): the
   image cannot be synthesized, sync answers 429 (render failures, hook errors), then recovers;
4. an image rollout, one replica at a time (rollouts in progress);
5. a Kueue eviction: one replica's Workload is deactivated, Kueue evicts it, the replica is rebuilt;
6. `too-big`, a prefill/decode set that can never fit its 16-card pool: after the joint-admission
   bound (20 s here) the set yields (joint-admission releases), then it is deleted;
7. `chat` is deleted through the finalize hook.

    .venv/bin/python tests/e2e/dashboard_run.py docs/images/dashboard-samples.jsonl.gz
    scripts/dashboard_png.py docs/images/dashboard-samples.jsonl.gz docs/images/dashboard.png

Each step's start is written into the samples file ({"t": ..., "step": ...}) so the picture can
mark it. The samples are the Prometheus text of every scrape, unchanged.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import cluster as e2e_cluster  # noqa: E402
from md_operator import NAMESPACE, Operator, start_operator  # noqa: E402

A10G = "gpustack-nvidia-a10g-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"


class MetricsSampler:
    """Scrapes the operator's /metrics once a second into a JSON-lines file (the dashboard picture);
    `mark` records a step of the run in the same file."""

    def __init__(self, client: Any, url: str, path: Path) -> None:
        self.client, self.url, self.path = client, url, path
        self.samples = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._out: Any = None

    def _write(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(entry) + "\n")
            self._out.flush()

    def mark(self, step: str) -> None:
        print(f"[dashboard-run {time.strftime('%H:%M:%S')}] {step}", flush=True)
        self._write({"t": time.time(), "step": step})

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = self.client.get(self.url, timeout=2).text
            except Exception:  # noqa: BLE001 - a missed scrape is a gap, as in Prometheus
                text = None
            if text is not None:
                self._write({"t": time.time(), "metrics": text})
                self.samples += 1
            self._stop.wait(1.0)

    def __enter__(self) -> "MetricsSampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = self.path.open("w")
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        self._out.close()


def deployment(name: str, roles: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "roles": roles}}


def chat(replicas: int, image: str | None = None) -> dict[str, Any]:
    role: dict[str, Any] = {"name": "server", "replicas": replicas, "instanceType": A10G, "resources": {"accelerator": 1}}
    if image:
        role["image"] = image
    return deployment("chat", [role])


def too_big() -> dict[str, Any]:
    """Four pod groups of 8 cards on the 16-card H20 pool: the set never completes."""
    roles = [{"name": name, "kind": kind, "replicas": 2, "instanceType": H20, "resources": {"accelerator": 8}}
             for name, kind in (("prefill", "Prefill"), ("decode", "Decode"))]
    return deployment("too-big", roles)


def ready_pods(op: Operator, name: str, replicas: int, image: str | None = None) -> bool:
    """One read of the deployment's Pods: exactly `replicas`, each Running and Ready (on `image`)."""
    pods = op.pods(name)

    def ready(pod: dict[str, Any]) -> bool:
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        return (pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"
                and not pod["metadata"].get("deletionTimestamp")
                and (image is None or pod["spec"]["containers"][0]["image"] == image))

    return len(pods) == replicas and all(ready(p) for p in pods)


def phase(op: Operator, name: str) -> str | None:
    return op.md(name).get("status", {}).get("phase")


def metric(op: Operator, line_start: str) -> float:
    """The value of the first /metrics sample line starting with `line_start` (0 when absent)."""
    text = op.cp.http_client().get(f"http://127.0.0.1:{op.hooks_port}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def apply(op: Operator, obj: dict[str, Any], check: bool = True):
    return op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=check)


def patch_instance_type(op: Operator, detail: dict[str, Any]) -> None:
    op.kubectl("patch", "instancetypes.worker.gpustack.ai", A10G, "--subresource=status", "--type=merge",
               "-p", json.dumps({"status": {"detail": detail}}))


def hold(seconds: float, check: Callable[[], None]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(1)


def run(op: Operator, sampler: MetricsSampler) -> None:
    sampler.mark("create chat (2 replicas)")
    apply(op, chat(2))
    # A new deployment on an InstanceType that does not exist: the validating webhook refuses it.
    broken = deployment("refused", [{**chat(2)["spec"]["roles"][0], "instanceType": "no-such-type"}])
    refused = apply(op, broken, check=False)
    assert refused.returncode != 0 and "no-such-type" in refused.stderr, refused.stderr
    op.wait("chat Ready", lambda: phase(op, "chat") == "Ready" and ready_pods(op, "chat", 2), 240)
    hold(10, op.cp.check_alive)

    sampler.mark("scale chat 2 -> 3")
    apply(op, chat(3))
    op.wait("3 replicas Ready", lambda: ready_pods(op, "chat", 3) and phase(op, "chat") == "Ready", 240)
    hold(10, op.cp.check_alive)

    sampler.mark("InstanceType loses its hardware detail")
    patch_instance_type(op, {"manufacturer": ""})
    op.wait("a render failure", lambda: metric(op, "modeldeployment_render_failures_total{") > 0, 120)
    hold(40, op.cp.check_alive)
    sampler.mark("InstanceType detail restored")
    patch_instance_type(op, {"manufacturer": "nvidia"})
    hold(15, op.cp.check_alive)

    sampler.mark("image rollout")
    apply(op, chat(3, "registry.local/vllm:v2"))
    op.wait("the rollout to finish", lambda: ready_pods(op, "chat", 3, "registry.local/vllm:v2"), 300)
    op.wait("chat Ready", lambda: phase(op, "chat") == "Ready", 60)
    hold(10, op.cp.check_alive)

    sampler.mark("Kueue evicts a replica (its Workload deactivated)")
    pod = op.pods("chat")[0]
    group = pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"]
    op.kubectl("patch", "workloads.kueue.x-k8s.io", group, "-n", NAMESPACE, "--type=merge",
               "-p", json.dumps({"spec": {"active": False}}))
    op.wait("the evicted replica gone", lambda: pod["metadata"]["uid"] not in
            {p["metadata"]["uid"] for p in op.pods("chat")}, 180)
    op.wait("3 replicas Ready again", lambda: ready_pods(op, "chat", 3, "registry.local/vllm:v2"), 300)
    events = op.get("events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=chat")["items"]
    sampler.mark(f"chat's Events so far: {sorted({e.get('reason', '') for e in events})}")
    hold(10, op.cp.check_alive)

    sampler.mark("create too-big (can never fit its pool)")
    apply(op, too_big())
    op.wait("a joint-admission release",
            lambda: metric(op, 'modeldeployment_joint_admission_releases_total{name="too-big"') > 0, 180, 2)
    hold(10, op.cp.check_alive)
    sampler.mark("delete too-big")
    op.kubectl("delete", "md", "too-big", "-n", NAMESPACE, "--wait=false")
    op.wait("too-big gone", lambda: op.kubectl("get", "md", "too-big", "-n", NAMESPACE, check=False).returncode != 0,
            180)
    hold(10, op.cp.check_alive)

    sampler.mark("delete chat")
    op.kubectl("delete", "md", "chat", "-n", NAMESPACE, "--wait=false")
    op.wait("chat gone", lambda: op.kubectl("get", "md", "chat", "-n", NAMESPACE, check=False).returncode != 0, 180)
    hold(10, op.cp.check_alive)
    sampler.mark("end")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    raw = out.with_name(out.name.removesuffix(".gz"))
    cp = e2e_cluster.ControlPlane(bin_dir=e2e_cluster.ensure_built())
    cp.start()
    ok = False
    try:
        op = start_operator(cp)
        with MetricsSampler(cp.http_client(), f"http://127.0.0.1:{op.hooks_port}/metrics", raw) as sampler:
            run(op, sampler)
        op.stop()
        ok = True
    finally:
        cp.stop(keep_work_dir=not ok)
    if out.suffix == ".gz":
        out.write_bytes(gzip.compress(raw.read_bytes(), mtime=0))
        raw.unlink()
    print(f"{out}: {sampler.samples} scrapes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
