"""Prometheus metrics for hook and webhook calls (count, latency, errors by endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

HOOK_LATENCY = Histogram(
    "modeldeployment_hook_duration_seconds", "Metacontroller hook latency by hook", ["hook"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
HOOK_ERRORS = Counter("modeldeployment_hook_errors_total", "Hook calls that did not answer 200", ["hook", "kind"])
WEBHOOK_LATENCY = Histogram(
    "modeldeployment_webhook_duration_seconds", "Admission webhook latency", ["webhook"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
WEBHOOK_DECISIONS = Counter(
    "modeldeployment_webhook_decisions_total", "Admission decisions", ["webhook", "allowed"]
)
