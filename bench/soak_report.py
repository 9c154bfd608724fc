"""Writes the soak's figures into bench/soak.md between its results markers (the rest of the file,
the method and the bugs found, is written by hand and kept)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

BEGIN = "<!-- soak:results (written by bench/soak_report.py from bench/soak.json) -->"
END = "<!-- /soak:results -->"


def _cell(value: Any) -> str:
    return "–" if value is None else str(value)


def results(s: dict[str, Any]) -> str:
    lines = [BEGIN, ""]
    code = s["code"]
    lines += [
        f"**Run:** seed `{s['seed']}`, {s['duration_seconds'] / 60:.0f} minutes of schedule ({s['wall_seconds'] / 60:.1f} "
        f"minutes wall, start-up included), {s['size']} deployments, started {s['started']}, commit "
        f"`{code['commit'][:10]}` ({code['subject']}){' with uncommitted changes' if code['dirty'] == 'yes' else ''}"
        f"{', run from a clean export of it' if code['dirty'].startswith('no (') else ''}.",
        "",
        f"Rerun: `{s['command']}`",
        "",
        f"- **{s['operations']} user operations and {s['faults']} faults** in {s['episodes']} episodes; "
        f"kinds never drawn: {', '.join(s['kinds_missing']) or 'none'}.",
        f"- **Violations: {len(s['violations'])}**; deployments not converged within the "
        f"{s['bound_seconds']:.0f} s bound: {len(s['unconverged'])}.",
        f"- Kueue stalls the operator reported (a replica admitted and never placed) and the soak remedied as "
        f"the message says, by restarting Kueue: {len(s.get('remedies', []))}"
        + "".join(f"; {r['time']} s, episode {r['episode']}: {', '.join(r['deployments'])}" for r in s.get("remedies", []))
        + ".",
        f"- Operator peak RSS **{s['operator_rss_mib']['peak']} MiB** (bound {s['operator_rss_mib']['limit']:.0f} MiB).",
        f"- Deployments: {', '.join(f'{n} ({k})' for n, k in s['deployments'].items())}; scaler operations "
        f"{'on' if s['scalers'] else 'off (ModelDeploymentScaler not installed)'}.",
        f"- Observations: {s['observations']['count']} (tick p50 {s['observations']['tick_p50_seconds']} s, p99 "
        f"{s['observations']['tick_p99_seconds']} s), {s['observations']['failed_reads']} failed reads (API server "
        f"restarts); load average at the end {', '.join(f'{x:.1f}' for x in s['loadavg'])}.",
        f"- Pod watch (every Ready window, for the turnover invariant): "
        f"{s['observations'].get('pod_watch_events', 0)} changes seen, "
        f"{s['observations'].get('pod_watch_broken', 0)} times broken and listed again (API server restarts).",
        "",
        "### Operations and faults by kind",
        "",
        "| category | kind | count | results |",
        "| --- | --- | ---: | --- |",
    ]
    for category, kinds in s["by_kind"].items():
        for kind, n in kinds.items():
            res = ", ".join(f"{k} {v}" for k, v in sorted(s["results_by_kind"].get(kind, {}).items()))
            lines.append(f"| {category} | {kind} | {n} | {res} |")
    lines += ["", "### Time to converge (seconds)", "",
              "From the end of a fault, alone on a converged system (the episode's headline), to every deployment "
              "converged; and after each chaos phase (operations and overlapping faults), from its last action.", "",
              "| after | n | p50 | p99 | max |", "| --- | ---: | ---: | ---: | ---: |"]
    for kind, c in s["convergence_after_fault"].items():
        kind = "the last quiet (after the whole schedule)" if kind == "final" else kind
        lines.append(f"| {kind} | {c['n']} | {_cell(c['p50'])} | {_cell(c['p99'])} | {_cell(c['max'])} |")
    c = s["convergence_after_chaos"]
    lines.append(f"| chaos phase | {c['n']} | {_cell(c['p50'])} | {_cell(c['p99'])} | {_cell(c['max'])} |")
    cleanup = list(s["delete_cleanup_seconds"].values())
    if cleanup:
        lines += ["", f"Deletes: from a deleted deployment gone to nothing of it left (Pods, Workloads, Services, "
                      f"router objects), the last delete of each of {len(cleanup)} deployments: max {max(cleanup)} s."]
    lines += ["", "### API requests by verb (apiserver_request_total, summed over API server restarts)", "",
              "| verb | requests |", "| --- | ---: |"]
    lines += [f"| {verb} | {n} |" for verb, n in s["apiserver_requests_by_verb"].items()]
    lines += ["", "Top resources: " + ", ".join(f"{k or '(non-resource paths)'} {v}"
                                          for k, v in s["apiserver_requests_by_resource_top"].items()), ""]
    lines += ["### Webhooks", "",
              "Direct probes (AdmissionReview to the operator; `unreachable` while it was killed or frozen): "
              + ", ".join(f"`{k}` {v}" for k, v in s["webhook_probes"].items()) + ".", "",
              "The API server's calls of our webhooks by code: "
              + (", ".join(f"`{k}` {v}" for k, v in s["apiserver_webhook_calls_by_code"].items()) or "none") + ".", ""]
    lines += ["### Events (largest counts per reason and object at the end)", "",
              "| reason | object | count |", "| --- | --- | ---: |"]
    lines += [f"| {e['reason']} | {e['object']} | {e['count']} |" for e in s["events_top"]]
    lines += ["", f"Dwells with our deployments converged and untouched (their Events must not grow): {s['events_dwells']}; "
              f"Event growth in them that had occurred before the dwell (delivered late): "
              f"{s.get('events_delivered_late', 0)}.", ""]
    restarts = s.get("control_plane_restarts", [])
    lines += [f"Kubernetes control-plane processes that exited on their own and were started again (as the kubelet "
              f"restarts a static Pod): {len(restarts)}"
              + "".join(f"; {r['time']} s {r['component']} (code {r['code']}: {r['last_error'][:160]})" for r in restarts)
              + ".", ""]
    lines += ["### What the invariants judged", "",
              "| measure | count |", "| --- | ---: |"]
    lines += [f"| {k} | {v} |" for k, v in sorted(s.get("invariant_evidence", {}).items())]
    lines += ["", "### Violations", ""]
    if not s["violations"]:
        lines.append("None.")
    for v in s["violations"]:
        lines.append(f"- {v['time']} s **{v['invariant']}**: {v['message']}")
        lines.append(f"  objects: {', '.join(v['objects'][:6])}; last operations: {' / '.join(v['last_operations'][-4:])}")
    lines += ["", END]
    return "\n".join(lines)


def write_report(summary: dict[str, Any], path: Path) -> None:
    block = results(summary)
    text = path.read_text() if path.exists() else f"# Chaos soak\n\n{BEGIN}\n{END}\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
