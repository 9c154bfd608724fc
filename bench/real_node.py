"""bench/real-node: what the Pods we render cost on a real node (Pod create to Ready, and a
turnover as a client sees it).

    .venv/bin/python -m bench.real_node [--pods 5] [--turnovers 3] [--rate 20] [--out bench]

On a control plane of its own with the e2e harness's real node (tests/e2e/realnode.py: kubelet +
containerd + CNI + kube-proxy + CoreDNS), the operator, the real Metacontroller and Kueue (the
real pool's ClusterQueue carries our joint AdmissionCheck, as the product's pools do), the stub
engine images (tests/e2e/stub):

- **Pod create -> Ready**: a 1-replica vLLM Server deployment applied N times (one at a time,
  deleted in between); per run the time from `kubectl apply` to the Pod existing, Kueue
  admitting it (scheduling gates gone), bound to the node, the container started, the Pod Ready,
  and the deployment's phase Ready, each seen by a poll every 0.2 s. Median, min, max.
- **Turnover downtime, measured by a client**: a 1-replica role on engine:v1, a client inside the
  node's network namespace sending one chat request every 1/rate s (a new connection each) to the
  role's Service ClusterIP, the role's image edited (v1 -> v2 -> v1 ...); per turnover the failed
  requests, failed x interval (the downtime a client sees), the longest run of consecutive
  failures, and how each failed (refused, timed out, HTTP status).

Writes bench/real-node.json and bench/real-node.md (with the load average before and after: the
figures are only as quiet as the machine was).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import cluster as e2e_cluster  # noqa: E402
import md_operator  # noqa: E402
import realnode as e2e_realnode  # noqa: E402
import test_real_node_stories as stories  # noqa: E402  (its clients and cluster facts)

from app import vocab  # noqa: E402
from app.render import names  # noqa: E402

NAMESPACE = md_operator.NAMESPACE
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def _cond_true(pod: dict[str, Any], kind: str) -> bool:
    return stories.conditions(pod).get(kind, {}).get("status") == "True"


def create_to_ready(op: md_operator.Operator, run: int) -> dict[str, float]:
    """One 1-replica deployment, apply -> Ready, each step as first seen by a 0.2 s poll."""
    name = f"bench-{run}"
    seen: dict[str, float] = {}
    t0 = time.monotonic()
    stories.apply(op, stories.md_spec(name, [stories.role()]))
    while not {"md_ready", "pod_ready"} <= seen.keys():
        if time.monotonic() - t0 > 300:
            raise TimeoutError(f"{name}: not Ready in 300 s; seen {seen}\n{md_operator.cluster_digest(op.cp)}")
        now = time.monotonic() - t0
        pods = stories.role_pods(op, name, "server")
        pod = pods[0] if pods else None
        if pod:
            seen.setdefault("pod_created", now)
            if not pod["spec"].get("schedulingGates"):
                seen.setdefault("admitted_ungated", now)
            if pod["spec"].get("nodeName"):
                seen.setdefault("bound", now)
            state = (pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}
            if "running" in state:
                seen.setdefault("container_running", now)
            if stories.pod_ready(pod):
                seen.setdefault("pod_ready", now)
        if stories.md_ready(op.md(name)):
            seen.setdefault("md_ready", now)
        time.sleep(0.2)
    stories.delete_md(op, name)
    return {k: round(v, 2) for k, v in seen.items()}


def turnovers(op: md_operator.Operator, node: e2e_realnode.RealNode, count: int, rate: float,
              replicas: int = 1) -> list[dict[str, Any]]:
    name = f"bench-turnover-{replicas}"
    images = [stories.ENGINE_V1, stories.ENGINE_V2]
    stories.apply(op, stories.md_spec(name, [stories.role(replicas=replicas, image=images[0])]))
    stories.md_when(op, name, f"{name} Ready", stories.md_ready, 300)
    base = stories.service_base(op, names.role_service(name, "server"))
    interval = 1.0 / rate
    out = []
    try:
        for i in range(count):
            image = images[(i + 1) % 2]
            before = sorted(p["metadata"]["name"] for p in stories.role_pods(op, name, "server"))
            loop = stories.ClientLoop(node, f"{base}/v1/chat/completions", interval, MODEL)
            time.sleep(3)
            t_edit = time.time()
            stories.apply(op, stories.md_spec(name, [stories.role(replicas=replicas, image=image)]))

            def rolled() -> bool:
                pods = stories.role_pods(op, name, "server")
                return (len(pods) == replicas and all(stories.pod_ready(p) and p["spec"]["containers"][0]["image"] == image
                                                      for p in pods) and stories.md_ready(op.md(name)))

            op.wait(f"{name} on {image}", rolled, 300, 0.5)
            t_rolled = time.time()
            time.sleep(5)
            records = loop.stop()
            failed = [r for r in records if not r["ok"]]
            longest = run = 0
            for r in records:
                run = run + 1 if not r["ok"] else 0
                longest = max(longest, run)
            kinds: dict[str, int] = {}
            for r in failed:
                kind = (f"HTTP {r['status']}" if "status" in r else
                        "refused" if "refused" in r.get("error", "") else
                        "no route to host" if "No route to host" in r.get("error", "") else
                        "timed out" if "timed out" in r.get("error", "") else r.get("error", "?"))
                kinds[kind] = kinds.get(kind, 0) + 1
            after = sorted(p["metadata"]["name"] for p in stories.role_pods(op, name, "server"))
            one = {"replicas": replicas, "turnover": i + 1, "from": before, "to": after, "image": image, "requests": len(records),
                   "failed": len(failed), "downtime_s": round(len(failed) * interval, 3),
                   "longest_failed_run": longest, "longest_run_s": round(longest * interval, 3),
                   "failure_kinds": kinds, "edit_to_rolled_s": round(t_rolled - t_edit, 1),
                   "failed_at_s_after_edit": [round(r["t"] - t_edit, 2) for r in failed]}
            log(f"turnover {i + 1}: {one}")
            out.append(one)
    finally:
        stories.delete_md(op, name)
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


@contextmanager
def operated_real_node(results: dict[str, Any], env: dict[str, str] | None = None,
                       ) -> Iterator[tuple[e2e_cluster.ControlPlane, md_operator.Operator]]:
    """A control plane of its own with the real node, the operator (started under `env` beside the
    small router settings) and the real pool under our joint check; `results` gets the machine's
    load before and after, the start and finish, and the time the cluster took to come up. The work
    directory is kept when the body failed."""
    results.update({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "loadavg_start": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()})
    cp = e2e_cluster.ControlPlane(bin_dir=e2e_cluster.ensure_built(), real_node=True)
    failed = True
    try:
        t0 = time.monotonic()
        cp.start()
        assert cp.real_node is not None
        with stories.environ({**stories.SMALL_ROUTER, **(env or {})}):
            op = md_operator.start_operator(cp)
        pool = e2e_realnode.RealPool(cp, cp.real_node, admission_checks=[stories.JOINT_CHECK]).apply()
        pool.apply_instance_type()
        pool.local_queue(NAMESPACE)
        results["control_plane_up_s"] = round(time.monotonic() - t0, 1)
        log(f"control plane, real node and operator up in {results['control_plane_up_s']} s")
        yield cp, op
        op.stop()
        failed = False
    finally:
        results["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cp.stop(keep_work_dir=failed)


def run(pods: int, count: int, rate: float, replica_counts: list[int]) -> dict[str, Any]:
    results: dict[str, Any] = {"rate_per_s": rate, "pre_stop_seconds": getattr(vocab, "ENGINE_PRE_STOP_SECONDS", None),
                               "probe_periods": {
                                   "startup_s": vocab.STARTUP_PERIOD_SECONDS, "readiness_s": 5}}
    with operated_real_node(results) as (cp, op):
        assert cp.real_node is not None
        runs = []
        for i in range(pods):
            one = create_to_ready(op, i)
            log(f"create -> Ready run {i + 1}: {one}")
            runs.append(one)
        results["create_to_ready"] = {"runs": runs, **{
            step: summary([r[step] for r in runs if step in r])
            for step in ("pod_created", "admitted_ungated", "bound", "container_running", "pod_ready", "md_ready")}}
        results["turnovers"] = [one for replicas in replica_counts
                                for one in turnovers(op, cp.real_node, count, rate, replicas)]
    return results


def report(results: dict[str, Any], note: str = "") -> str:
    c = results["create_to_ready"]
    lines = [
        "# The real node: Pod create -> Ready, and a turnover's downtime as a client sees it",
        "",
        "`.venv/bin/python -m bench.real_node` (bench/real_node.py). A control plane of its",
        "own with the e2e real node (kubelet + containerd + CNI + kube-proxy + CoreDNS), the operator, the real",
        "Metacontroller and Kueue (joint AdmissionCheck on the real pool), the stub engine images.",
        "",
        f"Run {results['started']} -> {results['finished']}, {results['cpus']} CPUs, load average "
        f"{results['loadavg_start']} before, {results['loadavg_end']} after.",
    ]
    if note:
        lines += ["", note]
    lines += [
        "",
        f"## Pod create -> Ready ({len(c['runs'])} runs, one at a time; seconds after `kubectl apply`, "
        "seen by a 0.2 s poll)",
        "",
        "| step | median | min | max |",
        "| --- | --- | --- | --- |",
    ]
    labels = {"pod_created": "Pod created (Metacontroller -> sync hook -> API)",
              "admitted_ungated": "Kueue admitted (joint check passed, gates removed)",
              "bound": "bound to the real node", "container_running": "engine container running",
              "pod_ready": "Pod Ready (startup probe, then readiness)", "md_ready": "deployment phase Ready"}
    for step, label in labels.items():
        s = c.get(step)
        if s:
            lines.append(f"| {label} | {s['median']} | {s['min']} | {s['max']} |")
    t = results["turnovers"]
    rate = results["rate_per_s"]
    lines += [
        "",
        f"The engine's probes: startup every {results['probe_periods']['startup_s']} s, readiness every "
        f"{results['probe_periods']['readiness_s']} s (app/render/pod.py). The first startup probe that meets a "
        "running container is one period after the Pod is added, so container running -> Ready is bounded by "
        "the startup period plus the readiness period, not by the engine (the stub answers /health at once).",
        "",
        f"## A replica's turnover, measured by a client (image edits of a role of 1, then of 2 replicas; "
        f"one request every {1 / rate:.3f} s, a new connection each, to the role's ClusterIP)",
        "",
        "| replicas | edit | requests | failed | downtime (failed x interval) | longest failed run | how they failed | "
        "edit -> rolled (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for one in t:
        kinds = ", ".join(f"{k} {v}" for k, v in one["failure_kinds"].items()) or "-"
        lines.append(f"| {one['replicas']} | {one['turnover']} | {one['requests']} | {one['failed']} | {one['downtime_s']} s | "
                     f"{one['longest_failed_run']} ({one['longest_run_s']} s) | {kinds} | {one['edit_to_rolled_s']} |")
    lines += [
        "",
        "**1 replica**: the rollout replaces, it never surges (docs/kueue.md#rollout-cadence: a replacement is",
        "created once no Pod of its ordinal is left, since Kueue deletes a Pod beyond the group's count), so a",
        "1-replica role's image edit is an outage of about one Pod create -> Ready: the old Pod is deleted at",
        "the edit; it serves on through its preStop pause (kube-proxy falls back to a terminating endpoint",
        "while none is ready: see `failed_at_s_after_edit` in the JSON), then the client is refused until the",
        "replacement, created only once the old Pod is gone, is Ready. Documented (\"No surge\"); for a real",
        "engine it lasts as long as the weights take to load.",
        "",
        "**2 replicas**: the availability gate turns one over only while the other is Ready; what a client",
        "can lose is the window between the old Pod's SIGTERM (the engine stops accepting, as vLLM's uvicorn",
        "does) and kube-proxy withdrawing its endpoint. The engine container's preStop pause",
        f"({results.get('pre_stop_seconds', '?')} s, `vocab.ENGINE_PRE_STOP_SECONDS`) keeps the old Pod serving",
        "through that window. A connect that timed out held the (sequential) client for its 5 s timeout, so",
        "for those `failed x interval` undercounts what one client waited.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=5, help="create -> Ready runs")
    parser.add_argument("--turnovers", type=int, default=3, help="image edits under the client loop")
    parser.add_argument("--rate", type=float, default=20.0, help="client requests per second")
    parser.add_argument("--replicas", default="1,2", help="role sizes whose turnovers are measured (comma-separated)")
    add_report_arguments(parser, "real-node")
    args = parser.parse_args(argv)
    publish(args, "real-node", report,
            lambda: run(args.pods, args.turnovers, args.rate, [int(x) for x in args.replicas.split(",") if x]))
    return 0


def add_report_arguments(parser: argparse.ArgumentParser, stem: str) -> None:
    """--out, --note and --report-only, as every real-node benchmark takes them."""
    parser.add_argument("--out", type=Path, default=ROOT / "bench")
    parser.add_argument("--note", default="", help="a line for the report (e.g. the machine's load)")
    parser.add_argument("--report-only", action="store_true", help=f"rewrite {stem}.md from {stem}.json")


def publish(args: argparse.Namespace, stem: str, report: Callable[[dict[str, Any], str], str],
            run: Callable[[], dict[str, Any]]) -> None:
    """Runs the benchmark (or, with --report-only, reads its last figures) and writes <stem>.json and
    <stem>.md into --out, with --note as the report's line about the machine."""
    if args.report_only:
        results = json.loads((args.out / f"{stem}.json").read_text())
        results["note"] = args.note or results.get("note", "")
    else:
        results = run()
        results["note"] = args.note
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(report(results, results["note"]))
    log(f"wrote {args.out / f'{stem}.md'}")


if __name__ == "__main__":
    sys.exit(main())
