#!/usr/bin/env python3
"""Draws the Grafana dashboard's panels (manifests/monitoring/dashboards/modeldeployment.json) as one
PNG, from /metrics samples of a real run: a JSON-lines file of {"t": unix seconds, "metrics": the
Prometheus text exposition}, as tests/e2e/test_install.py writes while it drives a deployment
(.e2e-work/install-metrics-samples.jsonl; the run behind docs/images/dashboard.png is kept as
docs/images/dashboard-samples.jsonl.gz).

This is not a Grafana screenshot: the same queries are evaluated here in Python over the scraped
samples (one operator replica, so no freshest-replica filter is needed) and drawn with matplotlib.

    pip install matplotlib prometheus-client
    scripts/dashboard_png.py SAMPLES.jsonl docs/images/dashboard.png
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

PHASES = {"Starting": 1, "Ready": 2, "Degraded": 3, "Deleting": 4}
WINDOW = 10.0  # seconds, the rate window for latency quantiles


def load(path: Path) -> list[tuple[float, dict[str, list[tuple[dict[str, str], float]]]]]:
    samples = []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for line in text.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(entry["metrics"]):
            for sample in family.samples:
                by_name[sample.name].append((sample.labels, sample.value))
        samples.append((entry["t"], by_name))
    return samples


def series(samples, name: str, key) -> dict[str, tuple[list[float], list[float]]]:
    """{label key: (times, values)} for one metric; `key(labels)` names a line (None: skip)."""
    out: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    t0 = samples[0][0]
    for t, by_name in samples:
        for labels, value in by_name.get(name, []):
            k = key(labels)
            if k is None:
                continue
            out[k][0].append(t - t0)
            out[k][1].append(value)
    return dict(out)


def quantile_over_time(samples, name: str, group: str, q: float) -> dict[str, tuple[list[float], list[float]]]:
    """histogram_quantile(q, rate(name_bucket[WINDOW])) by `group`, evaluated at each sample."""
    t0 = samples[0][0]
    buckets = []
    for t, by_name in samples:
        by_group: dict[str, dict[float, float]] = defaultdict(dict)
        for labels, value in by_name.get(f"{name}_bucket", []):
            le = float("inf") if labels["le"] in ("+Inf", "inf") else float(labels["le"])
            by_group[labels.get(group, "")][le] = by_group[labels.get(group, "")].get(le, 0.0) + value
        buckets.append((t, by_group))
    out: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    start = 0
    for i, (t, now) in enumerate(buckets):
        while buckets[start][0] < t - WINDOW:
            start += 1
        if start == i:
            continue
        before = buckets[start][1]
        for g, counts in now.items():
            delta = {le: c - before.get(g, {}).get(le, 0.0) for le, c in counts.items()}
            total = delta.get(float("inf"), 0.0)
            if total <= 0:
                continue
            rank, previous_le, previous_count = q * total, 0.0, 0.0
            for le in sorted(delta):
                if delta[le] >= rank:
                    if le == float("inf"):
                        value = previous_le
                    else:
                        span = delta[le] - previous_count
                        value = previous_le + (le - previous_le) * ((rank - previous_count) / span if span else 1)
                    out[g][0].append(t - t0)
                    out[g][1].append(value)
                    break
                previous_le, previous_count = le, delta[le]
    return dict(out)


def draw(samples, out: Path) -> None:
    started = datetime.fromtimestamp(samples[0][0], timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = samples[-1][0] - samples[0][0]
    fig, axes = plt.subplots(4, 2, figsize=(16, 17))
    fig.suptitle("ModelDeployment operator — the dashboard's panels drawn from real /metrics samples\n"
                 f"{len(samples)} scrapes, one a second, over {seconds:.0f} s of tests/e2e/test_install.py "
                 f"(started {started}); matplotlib rendering, not a Grafana screenshot", fontsize=12)

    ax = axes[0][0]
    for k, (t, v) in series(samples, "modeldeployment_phase",
                            lambda l: f"{l['namespace']}/{l['name']}|{l['phase']}").items():
        deployment, phase = k.split("|")
        points = [(x, PHASES[phase]) for x, y in zip(t, v) if y == 1]
        if points:
            ax.scatter([p[0] for p in points], [p[1] for p in points], s=6, label=f"{deployment} {phase}")
    ax.set_yticks(list(PHASES.values()), list(PHASES))
    ax.set_title("Phase (the last sync's answer)")
    ax.legend(fontsize=7)

    ax = axes[0][1]
    for k, (t, v) in sorted(series(samples, "modeldeployment_role_replicas",
                                   lambda l: f"{l['name']} {l['role']} {l['kind']}").items()):
        ax.step(t, v, where="post", label=k)
    ax.set_title("Replicas per role (desired / ready / quota_reserved)")
    ax.legend(fontsize=7)

    ax = axes[1][0]
    final = samples[-1][1]
    edges, counts = [], []
    previous = 0.0
    for labels, value in sorted(final.get("modeldeployment_admission_wait_seconds_bucket", []),
                                key=lambda s: float("inf") if s[0]["le"] in ("+Inf", "inf") else float(s[0]["le"])):
        edges.append(labels["le"])
        counts.append(value - previous)
        previous = value
    ax.bar(range(len(edges)), counts, tick_label=[f"≤{e}" for e in edges])
    ax.tick_params(axis="x", labelsize=7, rotation=45)
    total = sum(v for _, v in final.get("modeldeployment_admission_wait_seconds_count", []))
    ax.set_title(f"Admission wait (histogram at the end of the run; {total:.0f} observations)")
    ax.set_ylabel("observations per bucket (s)")

    ax = axes[1][1]
    for k, (t, v) in series(samples, "modeldeployment_rollout_in_progress", lambda l: l["name"]).items():
        ax.step(t, v, where="post", label=k)
    ax.set_title("Rollouts in progress")
    ax.set_ylim(-0.1, 1.5)
    ax.legend(fontsize=7)

    ax = axes[2][0]
    failures = series(samples, "modeldeployment_render_failures_total", lambda l: f"{l['name']} {l['reason']}")
    for k, (t, v) in failures.items():
        ax.step(t, v, where="post", label=k)
    ax.set_title("Render failures by reason (cumulative)" + ("" if failures else ": none in this run"))
    if failures:
        ax.legend(fontsize=7)

    ax = axes[2][1]
    releases = series(samples, "modeldeployment_joint_admission_releases_total", lambda l: l["name"])
    for k, (t, v) in releases.items():
        ax.step(t, v, where="post", label=k)
    ax.set_title("Joint-admission releases (cumulative)" + ("" if releases else ": none in this run"))
    if releases:
        ax.legend(fontsize=7)

    ax = axes[3][0]
    for k, (t, v) in quantile_over_time(samples, "modeldeployment_hook_duration_seconds", "hook", 0.99).items():
        ax.plot(t, [x * 1000 for x in v], label=k)
    for k, (t, v) in quantile_over_time(samples, "modeldeployment_webhook_duration_seconds", "webhook", 0.99).items():
        ax.plot(t, [x * 1000 for x in v], linestyle="--", label=f"webhook {k}")
    ax.set_title(f"Hook and webhook latency p99 over {WINDOW:.0f} s windows")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)

    ax = axes[3][1]
    for name, key in (("modeldeployment_hook_duration_seconds_count", "hook"),
                      ("modeldeployment_webhook_decisions_total", "allowed")):
        for k, (t, v) in series(samples, name, lambda l, key=key: f"{name.split('_')[1]} {key}={l.get(key)}").items():
            ax.step(t, v, where="post", label=k)
    ax.set_title("Hook calls and webhook decisions (cumulative)")
    ax.legend(fontsize=7)

    for row in axes:
        for ax in row:
            ax.set_xlabel("seconds since the first scrape")
            ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    samples = load(Path(argv[1]))
    if len(samples) < 2:
        print(f"error: {argv[1]} holds fewer than two scrapes", file=sys.stderr)
        return 2
    draw(samples, Path(argv[2]))
    print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
