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

GOAL_CONVERGENCE_RATIO = 1.2
GOAL_CPU_SHARE = 0.10
GOAL_EXPONENT = 1.1
BEGIN = "<!-- e2e-scale:begin (bench/e2e-scale.sh writes this section) -->"
END = "<!-- e2e-scale:end -->"
PHASES = ("apply", "edit", "delete")


def _fit(xs: list[float], ys: list[float]) -> float:
    """Slope of log(y) against log(x), least squares."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


def _sizes(results: dict[str, Any]) -> list[int]:
    return sorted(int(n) for n, by in results["sizes"].items() if "operator" in by and "baseline" in by)


def _cpu(run: dict[str, Any], name: str) -> float:
    return sum(run[p]["cpu_seconds"].get(name, 0.0) for p in PHASES)


def goals(results: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    rows: list[tuple[str, str, str, bool | None]] = []
    sizes = _sizes(results)
    if not sizes:
        return rows
    top = sizes[-1]
    ours, base = results["sizes"][str(top)]["operator"], results["sizes"][str(top)]["baseline"]
    ratio = ours["apply"]["seconds"] / base["apply"]["seconds"]
    rows.append((f"convergence (apply -> all Ready) at N = {top}: ours / baseline", f"{ratio:.2f}x",
                 f"<= {GOAL_CONVERGENCE_RATIO:g}x", ratio <= GOAL_CONVERGENCE_RATIO))
    share = _cpu(ours, "operator") / max(_cpu(ours, "metacontroller"), 1e-9)
    floor = _cpu(base, "baseline") / max(_cpu(base, "metacontroller"), 1e-9)
    rows.append((f"operator CPU / Metacontroller CPU at N = {top}, apply + edit + delete (the baseline hook "
                 f"service's own: {floor:.0%})", f"{share:.0%}", f"<= {GOAL_CPU_SHARE:.0%}", share <= GOAL_CPU_SHARE))
    if len(sizes) >= 2:
        k = _fit([float(n) for n in sizes], [results["sizes"][str(n)]["operator"]["apply"]["seconds"] for n in sizes])
        kb = _fit([float(n) for n in sizes], [results["sizes"][str(n)]["baseline"]["apply"]["seconds"] for n in sizes])
        rows.append((f"growth exponent of convergence time in N ({', '.join(map(str, sizes))}; baseline {kb:.2f})",
                     f"{k:.2f}", f"<= {GOAL_EXPONENT:g}", k <= GOAL_EXPONENT))
    return rows


def section(results: dict[str, Any]) -> str:
    sizes = _sizes(results)
    lines = [BEGIN, "", "## Scale on the real stack: N deployments through Metacontroller (bench/e2e-scale.sh)", "",
             f"Run {results.get('started', '?')} -> {results.get('finished', '?')} ({results.get('source', '?')}) on "
             f"{results.get('cpus', '?')} "
             f"shared CPUs; load average (1/5/15 min) {results.get('loadavg_start')} at start, "
             f"{results.get('loadavg_end')} at end (each phase's own is in e2e-scale.json). Loopback control plane "
             "of tests/e2e (etcd, kube-apiserver, controller-manager, scheduler, Kueue v0.19.0, kwok, "
             "Metacontroller v4.17.2) on the same 2 cores as the operator and this driver; a dedicated pool of 16 "
             "kwok nodes and a ClusterQueue with our joint AdmissionCheck and room for every Pod. Deployments of "
             "about 10 Pods in three shapes taken in turn: two Server roles of 5 one-Pod replicas (vLLM), 5 "
             "replicas of size 2 (SGLang), a routed prefill/decode pair (4 + 5 replicas, llm-d router, KV cache). "
             "Each N runs twice on the same cluster, the operator first, then the **baseline**: a hook service "
             "answering the children our render precomputed for each spec, after an orjson parse, with the same "
             "replacement cadence and the same AdmissionCheck writes "
             "(bench/e2e_scale_baseline.py), so Metacontroller, the API server, Kueue and kwok do the same work.",
             "", "![e2e scale](e2e-scale.png)", ""]
    rows = goals(results)
    if rows:
        lines += ["| goal | measured | target | |", "| --- | ---: | ---: | --- |"]
        for name, measured, target, ok in rows:
            verdict = "n/a" if ok is None else ("met" if ok else "**not met**")
            lines.append(f"| {name} | {measured} | {target} | {verdict} |")
        lines.append("")
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
