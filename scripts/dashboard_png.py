#!/usr/bin/env python3
"""Draws the Grafana dashboard's panels (manifests/monitoring/dashboards/modeldeployment.json) as one
PNG, from /metrics samples of a real run: a JSON-lines file of {"t": unix seconds, "metrics": the
Prometheus text exposition} per scrape, and {"t": ..., "step": "..."} where the run began a step.
tests/e2e/dashboard_run.py writes it (the run behind docs/images/dashboard.png is kept as
docs/images/dashboard-samples.jsonl.gz).

This is not a Grafana screenshot: each panel's query is evaluated here in Python over the scraped
samples (one operator replica, so no freshest-replica filter is needed), with a fixed 30 s window
where the dashboard says $__rate_interval, and drawn with matplotlib. Every time axis is the wall
clock in seconds since the first scrape; the run's steps are marked on it.

    pip install -e '.[dashboard]'       # matplotlib (prometheus-client is a dependency already)
    scripts/dashboard_png.py SAMPLES.jsonl[.gz] docs/images/dashboard.png
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

PHASES = ["Starting", "Ready", "Degraded", "Deleting"]
PHASE_COLORS = {"Starting": "#f2c94c", "Ready": "#27ae60", "Degraded": "#eb5757", "Deleting": "#828282"}
WINDOW = 30.0  # seconds: the window of every rate, increase and quantile ($__rate_interval in Grafana)
TIME_LABEL = "time since the first scrape (s, wall clock; one scrape a second)"

Labels = dict[str, str]
Scrape = dict[str, list[tuple[Labels, float]]]
Series = dict[str, tuple[list[float], list[float]]]


def load(path: Path) -> tuple[list[tuple[float, Scrape]], list[tuple[float, str]]]:
    """The scrapes (time, samples by metric name) and the run's step marks, in file order."""
    scrapes: list[tuple[float, Scrape]] = []
    steps: list[tuple[float, str]] = []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for line in text.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        if "step" in entry:
            steps.append((entry["t"], entry["step"]))
            continue
        by_name: Scrape = defaultdict(list)
        for family in text_string_to_metric_families(entry["metrics"]):
            for sample in family.samples:
                by_name[sample.name].append((sample.labels, sample.value))
        scrapes.append((entry["t"], by_name))
    return scrapes, steps


def series(scrapes, name: str, key: Callable[[Labels], str | None]) -> Series:
    """{line: (times, values)} of one metric, summed by `key(labels)` (None: skip the sample)."""
    t0 = scrapes[0][0]
    out: Series = defaultdict(lambda: ([], []))
    for t, by_name in scrapes:
        summed: dict[str, float] = defaultdict(float)
        for labels, value in by_name.get(name, []):
            k = key(labels)
            if k is not None:
                summed[k] += value
        for k, value in summed.items():
            out[k][0].append(t - t0)
            out[k][1].append(value)
    return dict(out)


def increase(scrapes, name: str, key: Callable[[Labels], str | None], per_second: bool = False) -> Series:
    """increase(name[WINDOW]) (or rate) by `key`, at every scrape: the counter now minus its value
    WINDOW seconds before (0 before the series existed: it counts from 0)."""
    raw = series(scrapes, name, key)
    t0 = scrapes[0][0]
    times = [t - t0 for t, _ in scrapes]
    out: Series = {}
    for k, (ts, vs) in raw.items():
        at = dict(zip(ts, vs))
        known = sorted(at)

        def value_at(x: float) -> float:
            before = [v for v in known if v <= x]
            return at[before[-1]] if before else 0.0

        xs, ys = [], []
        for x in times:
            if x < known[0] - WINDOW:
                continue
            delta = max(0.0, value_at(x) - value_at(x - WINDOW))
            xs.append(x)
            ys.append(delta / WINDOW if per_second else delta)
        out[k] = (xs, ys)
    return out


def quantile_over_time(scrapes, name: str, group: str | None, q: float) -> Series:
    """histogram_quantile(q, sum by (le, group) (rate(name_bucket[WINDOW]))) at every scrape."""
    t0 = scrapes[0][0]
    buckets = []
    for t, by_name in scrapes:
        by_group: dict[str, dict[float, float]] = defaultdict(dict)
        for labels, value in by_name.get(f"{name}_bucket", []):
            le = float("inf") if labels["le"] in ("+Inf", "inf") else float(labels["le"])
            g = labels.get(group, "") if group else ""
            by_group[g][le] = by_group[g].get(le, 0.0) + value
        buckets.append((t, by_group))
    out: Series = defaultdict(lambda: ([], []))
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
                        value = previous_le  # Prometheus answers the highest finite bound
                    else:
                        span = delta[le] - previous_count
                        value = previous_le + (le - previous_le) * ((rank - previous_count) / span if span else 1)
                    out[g][0].append(t - t0)
                    out[g][1].append(value)
                    break
                previous_le, previous_count = le, delta[le]
    return dict(out)


def gaps_broken(t: list[float], v: list[float]) -> tuple[list[float], list[float]]:
    """A NaN wherever two points are more than two scrapes apart, so a line is not drawn across a
    stretch without data (a quantile with no observation in its window)."""
    xs, ys = [], []
    for i, (x, y) in enumerate(zip(t, v)):
        if i and x - t[i - 1] > 2.5:
            xs.append((x + t[i - 1]) / 2)
            ys.append(float("nan"))
        xs.append(x)
        ys.append(y)
    return xs, ys


def phase_spans(scrapes) -> dict[str, list[tuple[float, str]]]:
    """{namespace/name: [(time, phase)]}: the phase whose gauge is 1 at each scrape."""
    t0 = scrapes[0][0]
    spans: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for t, by_name in scrapes:
        for labels, value in by_name.get("modeldeployment_phase", []):
            if value == 1:
                spans[f"{labels['namespace']}/{labels['name']}"].append((t - t0, labels["phase"]))
    return dict(spans)


def panels(scrapes) -> list[tuple[str, str, str, Series]]:
    """The dashboard's panels after the Phase timeline, in its order: (title, y label, how to draw
    it: step, line or points, the series)."""
    w = f"{WINDOW:.0f} s"
    admission: Series = {}
    for q in (0.5, 0.95):
        for _, data in quantile_over_time(scrapes, "modeldeployment_admission_wait_seconds", None, q).items():
            admission[f"p{int(q * 100)}"] = data
    ms = {"hook": quantile_over_time(scrapes, "modeldeployment_hook_duration_seconds", "hook", 0.99),
          "webhook": quantile_over_time(scrapes, "modeldeployment_webhook_duration_seconds", "webhook", 0.99)}
    return [
        ("Replicas per role (desired, ready, quota_reserved)", "replicas", "step",
         series(scrapes, "modeldeployment_role_replicas", lambda l: f"{l['name']}/{l['role']} {l['kind']}")),
        (f"Admission wait p50 / p95 (histogram_quantile over {w}, a point while an observation is in the "
         "window;\nbuckets 1, 2, 5, 10 … s, so a wait under 1 s reads as an interpolation inside 0–1 s)",
         "time QuotaReserved stayed not True (s)", "points", admission),
        ("Rollouts in progress (sum)", "deployments", "step",
         series(scrapes, "modeldeployment_rollout_in_progress", lambda l: "deployments rolling out")),
        (f"Render failures by reason (increase over {w})", f"sync passes answered 429 per {w}", "line",
         increase(scrapes, "modeldeployment_render_failures_total", lambda l: f"{l['name']} {l['reason']}")),
        (f"Joint-admission releases (increase over {w})", f"passes that set Retry per {w}", "line",
         increase(scrapes, "modeldeployment_joint_admission_releases_total", lambda l: l["name"])),
        (f"Hook latency p99 (histogram_quantile over {w})", "p99 latency (ms, interpolated in its bucket)", "line",
         {k: (t, [x * 1000 for x in v]) for k, (t, v) in ms["hook"].items()}),
        (f"Hook errors (rate over {w})", "answers other than 200 per second", "line",
         increase(scrapes, "modeldeployment_hook_errors_total", lambda l: f"{l['hook']} {l['kind']}", per_second=True)),
        (f"Webhook latency p99 (histogram_quantile over {w})", "p99 latency (ms, interpolated in its bucket)", "line",
         {k: (t, [x * 1000 for x in v]) for k, (t, v) in ms["webhook"].items()}),
        (f"Webhook decisions (rate over {w})", "decisions per second", "line",
         increase(scrapes, "modeldeployment_webhook_decisions_total",
                  lambda l: f"{l['webhook']} allowed={l['allowed']}", per_second=True)),
    ]


def draw(scrapes, steps, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = scrapes[0][0]
    started = datetime.fromtimestamp(t0, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = scrapes[-1][0] - t0
    fig, axes = plt.subplots(5, 2, figsize=(17, 23))
    fig.suptitle("ModelDeployment operator — the dashboard's ten panels, evaluated over real /metrics scrapes\n"
                 f"{len(scrapes)} scrapes over {seconds:.0f} s of tests/e2e/dashboard_run.py on the e2e control "
                 f"plane (started {started}); matplotlib, not a Grafana screenshot; windows of {WINDOW:.0f} s",
                 fontsize=12)
    flat = [ax for row in axes for ax in row]

    ax = flat[0]
    spans = phase_spans(scrapes)
    names = sorted(spans)
    for row, name in enumerate(names):
        points = spans[name]
        for (x, phase), (x_next, _) in zip(points, points[1:] + [(points[-1][0] + 1, "")]):
            ax.broken_barh([(x, min(x_next - x, 1.5))], (row - 0.35, 0.7), color=PHASE_COLORS.get(phase, "k"))
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    handles = [plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS[p]) for p in PHASES]
    ax.legend(handles, PHASES, fontsize=7, loc="upper right", ncol=4)
    ax.set_title("Phase (the last sync's answer)")

    for ax, (title, ylabel, how, data) in zip(flat[1:], panels(scrapes)):
        for k, (t, v) in sorted(data.items()):
            t, v = gaps_broken(t, v)
            if how == "step":
                ax.step(t, v, where="post", label=k)
            elif how == "points":
                ax.plot(t, v, marker="o", markersize=3, linestyle="none", label=k)
            else:
                ax.plot(t, v, marker=".", markersize=3, label=k)
        if data:
            ax.legend(fontsize=7, loc="best", ncol=2 if len(data) > 4 else 1, framealpha=0.6)
        ax.set_title(title, fontsize=10 if "\n" in title else 12)
        ax.set_ylabel(ylabel)
    flat[3].set_ylim(-0.1, 1.6)

    marks = [(max(0.0, t - t0), text) for t, text in steps if text != "end" and not text.startswith("chat's Events")]
    for ax in flat:
        ax.set_xlim(0, seconds)
        ax.set_xlabel(TIME_LABEL)
        ax.grid(alpha=0.3)
        for i, (x, _) in enumerate(marks, 1):
            ax.axvline(x, color="#555555", linestyle=":", linewidth=0.8)
            ax.annotate(str(i), (x, 1.0), xycoords=("data", "axes fraction"), fontsize=7, ha="left", va="top",
                        xytext=(2, -2), textcoords="offset points")
    legend = "   ".join(f"{i} at {x:.0f} s: {text}" for i, (x, text) in enumerate(marks, 1))
    fig.text(0.5, 0.945, "Steps (dotted lines): " + legend, ha="center", fontsize=9, wrap=True)
    fig.tight_layout(rect=(0, 0, 1, 0.935))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=72)


MISSING_MATPLOTLIB = ("error: scripts/dashboard_png.py draws with matplotlib, which is not installed here — install "
                     "the project's dashboard extra: .venv/bin/pip install -e '.[dashboard]' (or pip install matplotlib)")


def matplotlib_missing() -> bool:
    """Whether matplotlib cannot be imported (checked before the samples are read)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is None


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if matplotlib_missing():
        print(MISSING_MATPLOTLIB, file=sys.stderr)
        return 2
    scrapes, steps = load(Path(argv[1]))
    if len(scrapes) < 2:
        print(f"error: {argv[1]} holds fewer than two scrapes", file=sys.stderr)
        return 2
    draw(scrapes, steps, Path(argv[2]))
    print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
