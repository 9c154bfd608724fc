"""bench/scaler: what a ModelDeploymentScaler costs (docs/autoscaling.md).

    .venv/bin/python -m bench.scaler cost            # in-process, seconds
    .venv/bin/python -m bench.scaler step            # the real stack, a few minutes
    .venv/bin/python -m bench.scaler all --out bench # both; writes bench/scaler.{md,json}

- **cost**: one scaler sync through the production app's ASGI stack (`POST /hooks/scaler/sync`),
  for an idle pass (the deployment already declares the scaler's replicas) and for a step (one
  write intent; no API server, so the executor logs and skips it), beside the JSON floor of the
  same request (`orjson.loads` of the request, `orjson.dumps` of the parent). Interleaved,
  medians over the rounds.
- **step**: on the loopback control plane of tests/e2e (real kube-apiserver, Kueue,
  Metacontroller, kwok nodes), two identical P/D pairs, one unit of 1 prefill + 1 decode replica
  each; one is scaled 1 → 4 units by `kubectl scale mds/...`, the other by editing its roles'
  replicas by hand (one `kubectl patch`), and the seconds until every new replica is Ready are
  measured from the command. The two are alternated over the rounds, scaled back to 1 between.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench import asgi

ROOT = Path(__file__).resolve().parent.parent
COST_ROUNDS = 300
STEP_ROUNDS = 3
A10G = "gpustack-nvidia-a10g-linux-amd64"


# --- cost ------------------------------------------------------------------------------------------


def _pair(replicas: int) -> dict[str, Any]:
    md = yaml.safe_load((ROOT / "examples" / "deployments" / "pd-pair.yaml").read_text())
    md["metadata"].update(uid="md-uid", generation=4, resourceVersion="1000",
                          managedFields=[{"manager": "worker.gpustack.ai/model-deployment-scaler", "operation": "Apply",
                                          "fieldsV1": {"f:spec": {"f:roles": {
                                              'k:{"name":"prefill"}': {".": {}, "f:name": {}, "f:replicas": {}},
                                              'k:{"name":"decode"}': {".": {}, "f:name": {}, "f:replicas": {}}}}}}])
    for role in md["spec"]["roles"]:
        role["replicas"] = replicas
    md["status"] = {"observedGeneration": 4, "roles": [
        {"name": r["name"], "kind": r["kind"], "desired": replicas, "ready": replicas, "quotaReserved": replicas,
         "admitted": replicas} for r in md["spec"]["roles"]]}
    return md


def scaler_request(units: int, declared: int) -> bytes:
    parent = {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
              "metadata": {"name": "pd-demo", "namespace": "team-a", "uid": "mds-uid", "generation": 2},
              "spec": {"deploymentRef": {"name": "pd-demo"},
                       "roles": [{"name": "prefill", "ratio": 1}, {"name": "decode", "ratio": 1}], "replicas": units}}
    body = {"controller": {}, "parent": parent, "children": {}, "finalizing": False,
            "related": {"ModelDeployment.worker.gpustack.ai/v1": {"team-a/pd-demo": _pair(declared)}}}
    return orjson.dumps(body)


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def cost(rounds: int = COST_ROUNDS) -> dict[str, Any]:
    app = asgi.server_app(str(ROOT / "examples" / "world"))
    idle, step = scaler_request(2, 2), scaler_request(4, 2)

    async def run() -> dict[str, list[float]]:
        samples: dict[str, list[float]] = {"idle": [], "step": [], "floor": []}
        for path, body in (("/hooks/scaler/sync", idle), ("/hooks/scaler/sync", step)):
            status, answer = await asgi.call(app, path, body)
            assert status == 200, answer[:300]
        for _ in range(rounds):
            for name, body in (("idle", idle), ("step", step)):
                started = time.perf_counter()
                status, answer = await asgi.call(app, "/hooks/scaler/sync", body)
                samples[name].append(time.perf_counter() - started)
            started = time.perf_counter()
            orjson.dumps(orjson.loads(idle)["parent"])
            samples["floor"].append(time.perf_counter() - started)
        return samples

    samples = asyncio.run(run())
    result: dict[str, Any] = {name: {"p50_us": round(_median_us(s), 1),
                                     "p99_us": round(sorted(s)[int(len(s) * 0.99) - 1] * 1e6, 1)}
                              for name, s in samples.items()}
    result["request_bytes"] = len(idle)
    result["rounds"] = rounds
    return result


# --- step ------------------------------------------------------------------------------------------


def _engine_ready(op: Any, name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in _engine_pods(op, name):
        role = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if (pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True"
                and not pod["metadata"].get("deletionTimestamp")):
            counts[role] = counts.get(role, 0) + 1
    return counts


def _engine_pods(op: Any, name: str) -> list[dict[str, Any]]:
    return [p for p in op.pods(name)
            if p["metadata"]["labels"].get("app.kubernetes.io/component") in ("prefill", "decode")]


def _deployment(name: str) -> dict[str, Any]:
    roles = [{"name": n, "kind": k, "replicas": 1, "instanceType": A10G, "resources": {"accelerator": 1}}
             for n, k in (("prefill", "Prefill"), ("decode", "Decode"))]
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                     "router": {"name": "llm-d-router"}, "roles": roles}}


def _scaler(name: str) -> dict[str, Any]:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeploymentScaler",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"deploymentRef": {"name": name}, "roles": [{"name": "prefill", "ratio": 1},
                                                                  {"name": "decode", "ratio": 1}], "replicas": 1}}


def step(rounds: int = STEP_ROUNDS) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    import cluster as e2e_cluster
    import md_operator

    bin_dir = e2e_cluster.ensure_built()
    cp = e2e_cluster.ControlPlane(bin_dir=bin_dir)
    cp.start()
    try:
        op = md_operator.start_operator(cp)
        for obj in (_deployment("by-scaler"), _scaler("by-scaler"), _deployment("by-hand")):
            op.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
        for name in ("by-scaler", "by-hand"):
            op.wait(f"{name} at 1 unit", lambda n=name: _engine_ready(op, n) == {"prefill": 1, "decode": 1}, 240)

        def scale_by_scaler(units: int) -> None:
            op.kubectl("scale", "mds/by-scaler", "-n", "team-a", f"--replicas={units}")

        def scale_by_hand(units: int) -> None:
            patch = [{"op": "replace", "path": f"/spec/roles/{i}/replicas", "value": units} for i in (0, 1)]
            op.kubectl("patch", "md", "by-hand", "-n", "team-a", "--type=json", "-p", json.dumps(patch))

        ways = {"by-scaler": scale_by_scaler, "by-hand": scale_by_hand}
        seconds: dict[str, list[float]] = {"by-scaler": [], "by-hand": []}
        for index in range(rounds):
            order = ["by-scaler", "by-hand"] if index % 2 == 0 else ["by-hand", "by-scaler"]
            for name in order:
                started = time.monotonic()
                ways[name](4)
                op.wait(f"{name} at 4 units", lambda n=name: _engine_ready(op, n) == {"prefill": 4, "decode": 4},
                        300, 0.25)
                seconds[name].append(round(time.monotonic() - started, 2))
                ways[name](1)
                op.wait(f"{name} back at 1 unit", lambda n=name: _engine_ready(op, n) == {"prefill": 1, "decode": 1}
                        and len(_engine_pods(op, n)) == 2, 300)
        op.stop()
    finally:
        cp.stop()
    ours, hand = statistics.median(seconds["by-scaler"]), statistics.median(seconds["by-hand"])
    return {"seconds": seconds, "median_by_scaler": ours, "median_by_hand": hand,
            "ratio": round(ours / hand, 2) if hand else None, "rounds": rounds, "load": os.getloadavg()}


# --- report ----------------------------------------------------------------------------------------


def _load(results: dict[str, Any]) -> str:
    load = results.get("load")
    return f"{load[0]:.1f}" if isinstance(load, list) and load else "not recorded"


def report(results: dict[str, Any]) -> str:
    lines = ["# ModelDeploymentScaler: measured", "",
             "Written by `.venv/bin/python -m bench.scaler all --out bench` (bench/scaler.py says what each number",
             f"means). Machine: {os.cpu_count()} cores, shared; load average at the end "
             f"{_load(results)}.", ""]
    c = results.get("cost")
    if c:
        lines += ["## One scaler sync, in process", "",
                  "| pass | p50 µs | p99 µs |", "|---|---|---|",
                  f"| idle (nothing to write) | {c['idle']['p50_us']} | {c['idle']['p99_us']} |",
                  f"| a step (one write intent) | {c['step']['p50_us']} | {c['step']['p99_us']} |",
                  f"| JSON floor of the same request | {c['floor']['p50_us']} | {c['floor']['p99_us']} |", "",
                  f"Request: {c['request_bytes']} bytes (the scaler and its P/D deployment with managedFields); "
                  f"{c['rounds']} rounds, interleaved.", ""]
    s = results.get("step")
    if s:
        lines += ["## A scale step end to end (1 → 4 units of a routed P/D pair, 1 + 1 → 4 + 4 replicas)", "",
                  "Seconds from the command to every new replica Ready, same cluster, alternated:", "",
                  "| way | rounds (s) | median (s) |", "|---|---|---|",
                  f"| `kubectl scale mds/…` (the scaler's server-side apply, then the deployment's sync) | "
                  f"{', '.join(map(str, s['seconds']['by-scaler']))} | {s['median_by_scaler']} |",
                  f"| `kubectl patch md …` of both roles' replicas by hand | "
                  f"{', '.join(map(str, s['seconds']['by-hand']))} | {s['median_by_hand']} |", "",
                  f"Ratio scaler / by hand: **{s['ratio']}** (the scaler adds one Metacontroller pass on the "
                  "scaler and one server-side apply before the deployment's own sync).", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("cost", "step", "all"))
    parser.add_argument("--out", type=Path, default=None, help="write scaler.md and scaler.json here")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    if args.what in ("cost", "all"):
        results["cost"] = cost()
        print(json.dumps(results["cost"], indent=2), flush=True)
    if args.what in ("step", "all"):
        results["step"] = step()
        print(json.dumps(results["step"], indent=2), flush=True)
    results["load"] = list(os.getloadavg())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scaler.json").write_text(json.dumps(results, indent=2) + "\n")
        (args.out / "scaler.md").write_text(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
