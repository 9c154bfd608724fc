"""Tables, goals and the plot of bench/e2e_scale.py's results (bench/e2e-scale.json).

`write(results, out)` writes `e2e-scale.png` and replaces the e2e-scale section of `results.md`
(between its markers; appended when absent). `section(results)` is that section's Markdown, which
bench/report.py also appends when it regenerates results.md.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from bench.e2e_scale_pool import pool_nodes

# The goals against the baseline hook and against LeaderWorkerSet, judged at N = GOAL_N (or the
# largest N run with both when the run has no N = GOAL_N) (bench/README.md, e2e-scale).
GOAL_N = 100
GOAL_VS_BASELINE_SECONDS = 1.10
GOAL_VS_BASELINE_REQUESTS = 1.10
GOAL_VS_BASELINE_HOOK_CPU = 1.20
GOAL_VS_BASELINE_CONTROL_CPU = 1.05
GOAL_VS_BASELINE_P99 = 1.5
GOAL_VS_LWS_SECONDS = {"apply": 1.20, "edit": 1.10}
GOAL_VS_LWS_DOWNTIME = 1.5
GOAL_VS_LWS_CPU = 1.05
# A status write is Metacontroller's GET and PUT of the whole object: at most twice the baseline's,
# which writes only its phase (docs/status.md#settling).
GOAL_VS_BASELINE_STATUS_PUTS = 2.0
STATUS_PUT = "PUT modeldeployments/status"
GOAL_EXPONENT = 1.1
ALL_PROCESSES = ("operator", "baseline", "metacontroller", "lws", "kube-apiserver", "etcd", "kueue", "kwok",
                 "kube-controller-manager", "kube-scheduler")
BEGIN = "<!-- e2e-scale:begin (bench/e2e-scale.sh writes this section) -->"
END = "<!-- e2e-scale:end -->"
PHASES = ("apply", "edit", "delete")


def _fit(xs: list[float], ys: list[float]) -> float:
    """Slope of log(y) against log(x), least squares."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


def _sizes(results: dict[str, Any], *modes: str) -> list[int]:
    modes = modes or ("operator", "baseline")
    return sorted(int(n) for n, by in results["sizes"].items() if all(m in by for m in modes))


def _cpu(run: dict[str, Any], name: str) -> float:
    return sum(run[p]["cpu_seconds"].get(name, 0.0) for p in PHASES)


def _all_cpu(run: dict[str, Any]) -> float:
    return sum(_cpu(run, name) for name in ALL_PROCESSES)


def _requests(run: dict[str, Any], verb: str) -> int:
    return sum(run[p]["apiserver_requests"].get(verb, 0) for p in PHASES)


def _by_resource(run: dict[str, Any]) -> dict[str, int]:
    """API requests by verb and resource, apply + edit + delete."""
    out: dict[str, int] = {}
    for p in PHASES:
        for key, count in (run[p].get("apiserver_requests_by_resource") or {}).items():
            out[key] = out.get(key, 0) + count
    return out


def _p99(run: dict[str, Any], phase: str, hook: str) -> float:
    return float(run[phase]["hooks"].get(hook, {}).get("p99_ms", float("nan")))


def goal_size(sizes: list[int]) -> int:
    """The N the goals are judged at: GOAL_N when the run has it, else its largest."""
    return GOAL_N if GOAL_N in sizes else sizes[-1]


def _row(name: str, ours: float, theirs: float, target: float, unit: str = "") -> tuple[str, str, str, bool | None]:
    if theirs <= 0 or math.isnan(ours) or math.isnan(theirs):
        return name, "n/a", f"<= {target:.2f}x", None
    ratio = ours / theirs
    return name, f"{ratio:.2f}x ({ours:,.1f}{unit} / {theirs:,.1f}{unit})", f"<= {target:.2f}x", ratio <= target


def goals(results: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    rows: list[tuple[str, str, str, bool | None]] = []
    sizes = _sizes(results)
    if sizes:
        top = goal_size(sizes)
        ours, base = results["sizes"][str(top)]["operator"], results["sizes"][str(top)]["baseline"]
        for phase in PHASES:
            rows.append(_row(f"N = {top}, vs. baseline: {phase} seconds", ours[phase]["seconds"],
                             base[phase]["seconds"], GOAL_VS_BASELINE_SECONDS, " s"))
        for verb in _verbs(results):
            b = _requests(base, verb)
            if b or _requests(ours, verb):
                rows.append(_row(f"N = {top}, vs. baseline: API requests {verb}", _requests(ours, verb), b,
                                 GOAL_VS_BASELINE_REQUESTS))
        rows.append(_row(f"N = {top}, vs. baseline: {STATUS_PUT}", _by_resource(ours).get(STATUS_PUT, 0),
                         _by_resource(base).get(STATUS_PUT, 0), GOAL_VS_BASELINE_STATUS_PUTS))
        rows.append(_row(f"N = {top}, vs. baseline: hook CPU", _cpu(ours, "operator"), _cpu(base, "baseline"),
                         GOAL_VS_BASELINE_HOOK_CPU, " s"))
        for name, label in (("metacontroller", "Metacontroller CPU"), ("kube-apiserver", "API server CPU")):
            rows.append(_row(f"N = {top}, vs. baseline: {label}", _cpu(ours, name), _cpu(base, name),
                             GOAL_VS_BASELINE_CONTROL_CPU, " s"))
        for phase, hook in (("apply", "sync"), ("edit", "sync"), ("delete", "finalize")):
            rows.append(_row(f"N = {top}, vs. baseline: {hook} p99 during {phase}", _p99(ours, phase, hook),
                             _p99(base, phase, hook), GOAL_VS_BASELINE_P99, " ms"))
    peers = _sizes(results, "wide", "lws")
    if peers:
        top = goal_size(peers)
        ours, lws = results["sizes"][str(top)]["wide"], results["sizes"][str(top)]["lws"]
        for phase in ("apply", "edit"):
            rows.append(_row(f"N = {top}, vs. LeaderWorkerSet: {phase} seconds", ours[phase]["seconds"],
                             lws[phase]["seconds"], GOAL_VS_LWS_SECONDS[phase], " s"))
        down = (ours["edit"].get("rollout") or {}).get("mean_downtime_s"), (lws["edit"].get("rollout") or {}).get(
            "mean_downtime_s")
        rows.append(_row(f"N = {top}, vs. LeaderWorkerSet: downtime per turnover", float(down[0] or "nan"),
                         float(down[1] or "nan"), GOAL_VS_LWS_DOWNTIME, " s"))
        rows.append(_row(f"N = {top}, vs. LeaderWorkerSet: all processes' CPU", _all_cpu(ours), _all_cpu(lws),
                         GOAL_VS_LWS_CPU, " s"))
    if len(sizes) >= 2:
        k = _fit([float(n) for n in sizes], [results["sizes"][str(n)]["operator"]["apply"]["seconds"] for n in sizes])
        kb = _fit([float(n) for n in sizes], [results["sizes"][str(n)]["baseline"]["apply"]["seconds"] for n in sizes])
        rows.append((f"growth exponent of convergence time in N ({', '.join(map(str, sizes))}; baseline {kb:.2f})",
                     f"{k:.2f}", f"<= {GOAL_EXPONENT:g}", k <= GOAL_EXPONENT))
    return rows


def lws_section(results: dict[str, Any]) -> list[str]:
    peers = _sizes(results, "wide", "lws")
    if not peers:
        return []
    lines = ["", "### Against LeaderWorkerSet", "",
             "The same run and cluster: LeaderWorkerSet (commit 060ab4d, built by tests/e2e/components/build.sh lws) "
             "with its webhooks (the Pod webhook included) registered by URL, Kueue's LWS integration on, an "
             "identical ClusterQueue (same flavor and quota, without our joint check), kube-controller-manager "
             f"and the LWS manager at Metacontroller's client limits ({results.get('kube_controller_manager_client')}). "
             "**ours (LWS shape)**: N deployments of one role of 5 replicas x size 2 (1 GPU per Pod); **LWS**: N "
             "LeaderWorkerSets of 5 groups x size 2 with the Pod our render gives that role (containers, resources, "
             "node selection, tolerations). Edit: a new image on every Pod, rolled out one replica at a time by both "
             "(LWS: RollingUpdate, maxUnavailable 1, maxSurge 0). Fewest Ready and downtime from one Pod watch during "
             "the edit: a replica (our pod group, an LWS group) is down from the moment one of its Pods stops being "
             "Ready until all its Pods are Ready again; the mean is over every replica turned over.", "",
             "| N | Pods | who | apply s | edit s | delete s | controller CPU s | API server CPU s | all processes' "
             "CPU s | API requests | fewest Ready of 5 | mean downtime per turnover s |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n in peers:
        for mode in ("wide", "lws"):
            run = results["sizes"][str(n)][mode]
            controller = _cpu(run, "operator") + _cpu(run, "metacontroller") if mode == "wide" else _cpu(run, "lws")
            requests = sum(_requests(run, v) for v in _verbs(results))
            rollout = run["edit"].get("rollout") or {}
            lines.append(f"| {n} | {run['pods']} | {'ours (LWS shape)' if mode == 'wide' else 'LWS'} | "
                         f"{run['apply']['seconds']:.1f} | {run['edit']['seconds']:.1f} | {run['delete']['seconds']:.1f} | "
                         f"{controller:.1f} | {_cpu(run, 'kube-apiserver'):.1f} | {_all_cpu(run):.1f} | {requests:,} | "
                         f"{rollout.get('fewest_ready', '')} | {_downtime_cell(rollout)} |")
    lines += ["", "Controller CPU: ours is the operator process plus Metacontroller; LWS's its manager (kube-controller-"
              "manager, which runs LWS's StatefulSets, is in all processes' CPU)."]
    return lines + anatomy_section(results, peers) + kueue_workers_section(results, peers)


def _downtime_cell(rollout: dict[str, Any]) -> str:
    """The mean downtime, or why there is none: a watch that ended early missed turnovers."""
    if rollout.get("watch_error"):
        return f"not measured (the watch ended: {rollout['watch_error'][:80]})"
    return str(rollout.get("mean_downtime_s", ""))


ANATOMY_COLUMNS = (("new_seen", "replacement's Pods seen"), ("old_released", "old Pods' finalizers gone"),
                   ("old_gone", "old Pods gone"), ("wl_created", "new Workload"), ("check_ready", "checks Ready"),
                   ("admitted", "admitted"), ("ungated", "Pods ungated"), ("bound", "bound"), ("ready", "Ready"))


def anatomy_section(results: dict[str, Any], peers: list[int]) -> list[str]:
    """Where a turnover's downtime goes (bench/turnover_anatomy.py), when the run measured it."""
    rows = [(n, mode, anatomy) for n in peers for mode in ("wide", "lws")
            if (anatomy := ((results["sizes"][str(n)][mode]["edit"].get("rollout") or {}).get("anatomy_mean_s")))]
    if not rows:
        return []
    lines = ["", "Where a turnover's downtime goes: mean seconds from the replica going down (its first Pod not "
             "Ready) to each step, from the same Pod watch and a Workload watch (bench/turnover_anatomy.py); an "
             "LWS group keeps its Workload, so its Workload columns are empty:", "",
             "| N | who | " + " | ".join(title for _, title in ANATOMY_COLUMNS) + " |",
             "| ---: | --- | " + " | ".join("---:" for _ in ANATOMY_COLUMNS) + " |"]
    for n, mode, anatomy in rows:
        cells = " | ".join(f"{anatomy[key]:.2f}" if key in anatomy else "" for key, _ in ANATOMY_COLUMNS)
        lines.append(f"| {n} | {'ours (LWS shape)' if mode == 'wide' else 'LWS'} | {cells} |")
    return lines


def kueue_workers_section(results: dict[str, Any], peers: list[int]) -> list[str]:
    """Kueue's busy workers in each edit (bench/kueue_workers.py), when the run sampled them."""
    rows = [(n, mode, busy) for n in peers for mode in ("wide", "lws")
            if (busy := results["sizes"][str(n)][mode]["edit"].get("kueue_workers")) and busy.get("samples")]
    if not rows:
        return []
    lines = ["", "Kueue's busy workers in the edit (bench/kueue_workers.py: its goroutines sampled every "
             f"{rows[0][2].get('every_s', '?')} s; the mean number inside a reconcile, per reconciler, of the "
             "workers Kueue ships with: Pod 5, Workload 10), with the Pod reconciler's largest activities:", "",
             "| N | who | samples | Pod reconciler | Workload reconciler | others | the Pod reconciler's workers on |",
             "| ---: | --- | ---: | ---: | ---: | ---: | --- |"]
    for n, mode, busy in rows:
        per = busy["busy"]
        pod = per.get("pod.Reconciler.Reconcile", 0.0)
        workload = per.get("core.WorkloadReconciler.Reconcile", 0.0)
        others = sum(per.values()) - pod - workload
        on = "; ".join(f"{activity} {mean:.2f}"
                       for activity, mean in busy["activities"].get("pod.Reconciler.Reconcile", []))
        lines.append(f"| {n} | {'ours (LWS shape)' if mode == 'wide' else 'LWS'} | {busy['samples']} | {pod:.2f} | "
                     f"{workload:.2f} | {others:.2f} | {on} |")
    return lines


def status_fields_section(results: dict[str, Any], n: int) -> list[str]:
    """Which status fields our writes moved at N (bench/status_fields.py), when the run counted them."""
    runs = results["sizes"].get(str(n)) or {}
    counts = {mode: {phase: (runs[mode][phase].get("status_fields") or {}) for phase in ("apply", "edit", "delete")}
              for mode in ("operator", "baseline") if mode in runs}
    if not any(c for by_phase in counts.values() for c in by_phase.values()):
        return []
    lines = ["", f"What the status writes moved at N = {n}, apply + edit + delete, from a watch of the "
             "ModelDeployments (bench/status_fields.py): the writes that changed the status, and the twelve fields "
             "changed in the most of them (a write moves several):", ""]
    header = "| field | " + " | ".join(counts) + " |"
    lines += [header, "| --- | " + " | ".join("---:" for _ in counts) + " |"]
    totals = {mode: sum(c.get("writes", 0) for c in by_phase.values()) for mode, by_phase in counts.items()}
    lines.append("| (status writes) | " + " | ".join(f"{totals[m]:,}" for m in counts) + " |")
    fields: dict[str, dict[str, int]] = {}
    for mode, by_phase in counts.items():
        for c in by_phase.values():
            for field, count in (c.get("fields") or {}).items():
                fields.setdefault(field, {}).setdefault(mode, 0)
                fields[field][mode] += count
    first = next(iter(counts))
    for field, by_mode in sorted(fields.items(), key=lambda kv: -kv[1].get(first, 0))[:12]:
        lines.append(f"| `{field}` | " + " | ".join(f"{by_mode.get(m, 0):,}" for m in counts) + " |")
    return lines


GOAL_WEBHOOK_P99_RATIO = 3.0


def webhook_section(results: dict[str, Any]) -> list[str]:
    """bench/webhooks.py's live-read latency (run_apiserver), when the run carries it."""
    runs = results.get("webhooks_apiserver") or []
    if isinstance(runs, dict):
        runs = [runs]
    runs = [r for r in runs if r.get("available")]
    if not runs:
        return []
    lines = ["", "### Webhook latency against the real API server", "",
             "bench/webhooks.py run_apiserver (etcd + kube-apiserver from the e2e cache, the service reading live "
             "through `Kube.world_for`; the mutating webhook reads only the roles' InstanceTypes), 600 sequential "
             "reviews each; `API server GET` is one GET of an InstanceType in the same rounds. Goal: validate "
             f"pd-pair p99 within {GOAL_WEBHOOK_P99_RATIO:g}x the GET's p99.", "",
             "| run (load average at its end) | review | p50 ms | p99 ms | p99 / GET p99 | goal |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in runs:
        latency = r["latency"]
        get = latency["API server GET"]["p99_ms"]
        when = f"{r.get('when', '')} ({', '.join(f'{x:.1f}' for x in r.get('loadavg_end', []))})"
        for name, row in latency.items():
            ratio = row["p99_ms"] / get if name != "API server GET" else None
            goal = ""
            if name == "validate pd-pair" and ratio is not None:
                goal = "met" if ratio <= GOAL_WEBHOOK_P99_RATIO else "**not met**"
            lines.append(f"| {when} | {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | "
                         f"{'' if ratio is None else f'{ratio:.2f}x'} | {goal} |")
    return lines


def profile_section(results: dict[str, Any]) -> list[str]:
    """Where ours and the baseline differ most, by verb and resource, at the largest N."""
    sizes = _sizes(results)
    if not sizes:
        return []
    top = goal_size(sizes)
    ours, base = results["sizes"][str(top)]["operator"], results["sizes"][str(top)]["baseline"]

    a, b = _by_resource(ours), _by_resource(base)
    if not a:
        return []
    keys = sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))[:12]
    lines = ["", f"The profile at N = {top}: API requests by verb and resource, apply + edit + delete, the twelve "
             "that differ most between ours and the baseline:", "",
             "| request | ours | baseline | ours - baseline |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {k} | {a.get(k, 0):,} | {b.get(k, 0):,} | {a.get(k, 0) - b.get(k, 0):+,} |" for k in keys]
    return lines + status_fields_section(results, top)


def _pool_nodes(sizes: list[int]) -> int:
    return pool_nodes(max(sizes)) if sizes else 0


def _gates(results: dict[str, Any]) -> str:
    gates = results.get("kueue_feature_gates") or {}
    if not gates:
        return ""
    return " **Kueue feature gates set for this run** (--kueue-gate): " + ", ".join(
        f"`{name}={str(on).lower()}`" for name, on in sorted(gates.items())) + "."


def _concurrency(results: dict[str, Any]) -> str:
    workers = results.get("kueue_concurrency") or {}
    if not workers:
        return ""
    return " **Kueue controller workers set for this run** (--kueue-concurrency): " + ", ".join(
        f"`{kind}={n}`" for kind, n in sorted(workers.items())) + "."


def section(results: dict[str, Any]) -> str:
    sizes = _sizes(results)
    lines = [BEGIN, "", "## Scale on the real stack: N deployments through Metacontroller (bench/e2e-scale.sh)", "",
             f"Run {results.get('started', '?')} -> {results.get('finished', '?')} ({results.get('source', '?')}) on "
             f"{results.get('cpus', '?')} "
             f"shared CPUs; load average (1/5/15 min) {results.get('loadavg_start')} at start, "
             f"{results.get('loadavg_end')} at end (each phase's own is in e2e-scale.json). Loopback control plane "
             "of tests/e2e (etcd, kube-apiserver, controller-manager, scheduler, Kueue v0.19.0, kwok, "
             "Metacontroller v4.17.2) on the same 2 cores as the operator and this driver; a dedicated pool of "
             f"{_pool_nodes(sizes)} kwok nodes (sized for the largest N) and a ClusterQueue with our joint AdmissionCheck and room for every Pod. Deployments of "
             "about 10 Pods in three shapes taken in turn: two Server roles of 5 one-Pod replicas (vLLM), 5 "
             "replicas of size 2 (SGLang), a routed prefill/decode pair (4 + 5 replicas, llm-d router, KV cache). "
             "Each N runs on one cluster, the operator first, then the **baseline**: a hook service "
             "answering the children our render precomputed for each spec, after an orjson parse, with the same "
             "replacement cadence and the same AdmissionCheck writes "
             "(bench/e2e_scale_baseline.py), so Metacontroller, the API server, Kueue and kwok do the same work; "
             "then, when the run has them, the operator and LeaderWorkerSet on LWS's shape (below)."
             + _gates(results) + _concurrency(results),
             ""]
    for run in results.get("runs") or []:
        lines.append(f"- N = {', '.join(map(str, run['sizes']))}: run {run['started']} -> {run['finished']} "
                     f"({run['source']}), load average {run['loadavg_start']} at start, {run['loadavg_end']} at end"
                     + (f"; {run['note']}" if run.get("note") else ""))
    if results.get("runs"):
        lines.append("")
    lines += ["![e2e scale](e2e-scale.png)", ""]
    rows = goals(results)
    if rows:
        lines += ["| goal | measured | target | |", "| --- | ---: | ---: | --- |"]
        for name, measured, target, ok in rows:
            verdict = "n/a" if ok is None else ("met" if ok else "**not met**")
            lines.append(f"| {name} | {measured} | {target} | {verdict} |")
        lines.append("")
    notes = results.get("notes") or []
    if notes:
        lines += ["What the run says (written with its results):", ""] + [f"- {note}" for note in notes] + [""]
    lines += ["Seconds until done (apply: every Pod and deployment Ready; edit: every Pod of the new image, Ready; "
              "delete: no deployment, Pod, Workload or Service left), hook calls and latency over the three phases, "
              "CPU-seconds over the three phases:", "",
              "| N | Pods | hooks | apply s | edit s | delete s | sync calls | sync p50 / p99 ms | "
              "hook CPU s | Metacontroller CPU s | hook / MC CPU | API server CPU s | Kueue CPU s | "
              "hook peak RSS MB |",
              "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n in sizes:
        for mode in ("operator", "baseline"):
            run = results["sizes"][str(n)][mode]
            sync = {"calls": 0, "p50": float("nan"), "p99": float("nan")}
            calls = sum(run[p]["hooks"].get("sync", {}).get("calls", 0) for p in PHASES)
            apply_sync = run["apply"]["hooks"].get("sync", {})
            sync.update(calls=calls, p50=apply_sync.get("p50_ms", float("nan")), p99=apply_sync.get("p99_ms", float("nan")))
            hook_proc = "operator" if mode == "operator" else "baseline"
            hook_cpu, mc_cpu = _cpu(run, hook_proc), _cpu(run, "metacontroller")
            rss = max(run[p]["peak_rss_mb"] for p in PHASES) if mode == "operator" else float("nan")
            lines.append(
                f"| {n} | {run['pods']} | {'ours' if mode == 'operator' else 'baseline'} | {run['apply']['seconds']:.1f} | "
                f"{run['edit']['seconds']:.1f} | {run['delete']['seconds']:.1f} | {sync['calls']} | "
                f"{sync['p50']:.1f} / {sync['p99']:.1f} | {hook_cpu:.1f} | {mc_cpu:.1f} | "
                f"{hook_cpu / max(mc_cpu, 1e-9):.0%} | {_cpu(run, 'kube-apiserver'):.1f} | {_cpu(run, 'kueue'):.1f} | "
                f"{'' if math.isnan(rss) else f'{rss:.0f}'} |")
    lines += ["", "Ours / baseline, seconds until done: "
              + "; ".join(f"N = {n}: apply {_ratio(results, n, 'apply'):.2f}x, edit {_ratio(results, n, 'edit'):.2f}x, "
                          f"delete {_ratio(results, n, 'delete'):.2f}x" for n in sizes) + "."]
    lines += ["", "Sync p50 / p99: during apply (the operator's from its /metrics histogram, interpolated within "
              "buckets; the baseline's from its own list). Hook peak RSS: the operator process's VmHWM, reset at "
              "each phase's start. The operator process also answers the admission webhooks in both modes (its "
              "CPU in the baseline rows' runs is in e2e-scale.json).", "",
              "API server requests by verb, apply + edit + delete:", "",
              "| N | hooks | " + " | ".join(_verbs(results)) + " |",
              "| ---: | --- | " + " | ".join("---:" for _ in _verbs(results)) + " |"]
    for n in sizes:
        for mode in ("operator", "baseline"):
            run = results["sizes"][str(n)][mode]
            counts = [sum(run[p]["apiserver_requests"].get(v, 0) for p in PHASES) for v in _verbs(results)]
            lines.append(f"| {n} | {'ours' if mode == 'operator' else 'baseline'} | "
                         + " | ".join(f"{c:,}" for c in counts) + " |")
    lines += profile_section(results)
    lines += lws_section(results)
    lines += webhook_section(results)
    peak = [max(results["sizes"][str(n)]["operator"][p]["peak_rss_mb"] for p in PHASES) for n in sizes]
    if peak:
        lines += ["", f"The operator's peak RSS (VmHWM, largest over the phases): "
                  + ", ".join(f"N = {n}: {mb:.0f} MB" for n, mb in zip(sizes, peak)) + "."]
    lines += ["", END]
    return "\n".join(lines)


def _ratio(results: dict[str, Any], n: int, phase: str) -> float:
    by = results["sizes"][str(n)]
    return by["operator"][phase]["seconds"] / max(by["baseline"][phase]["seconds"], 1e-9)


def _verbs(results: dict[str, Any]) -> list[str]:
    verbs: set[str] = set()
    for by in results["sizes"].values():
        for run in by.values():
            for p in PHASES:
                verbs |= set(run[p]["apiserver_requests"])
    order = ["GET", "LIST", "WATCH", "CREATE", "APPLY", "PATCH", "UPDATE", "DELETE"]
    return [v for v in order if v in verbs] + sorted(verbs - set(order))


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = _sizes(results)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"apply": "o-", "edit": "s--", "delete": "^:"}
    for mode, color in (("operator", "#1f77b4"), ("baseline", "#999999")):
        for phase in PHASES:
            ax.plot(sizes, [results["sizes"][str(n)][mode][phase]["seconds"] for n in sizes], styles[phase],
                    color=color, label=f"{'ours' if mode == 'operator' else 'baseline'}: {phase}")
    if len(sizes) >= 2:  # where linear growth from the smallest N would put ours' apply
        first = results["sizes"][str(sizes[0])]["operator"]["apply"]["seconds"]
        ax.plot(sizes, [first * n / sizes[0] for n in sizes], ":", color="#d62728", linewidth=1,
                label="linear in N (from ours' apply)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n}\n({results['sizes'][str(n)]['operator']['pods']} Pods)" for n in sizes])
    ax.set_xlabel("deployments")
    ax.set_ylabel("seconds until done")
    ax.set_title("convergence through Metacontroller: ours vs. baseline hook service")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """python -m bench.e2e_scale_report RESULTS.json OUT_DIR: the section and plot again (e.g. from
    the partial results a run writes after each pass)."""
    import json
    import sys

    write(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))


def write(results: dict[str, Any], out: Path) -> None:
    if _sizes(results):
        plot(results, out / "e2e-scale.png")
    md = out / "results.md"
    text = md.read_text() if md.exists() else "# Benchmark results\n"
    block = section(results)
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    md.write_text(text)


if __name__ == "__main__":
    main()
