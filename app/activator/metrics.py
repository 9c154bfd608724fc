"""The activator's metrics (docs/scale-to-zero.md#the-activator), in their own registry: the
activator is its own process, and its /metrics says only what it did."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

WAKES = Counter("modeldeployment_activator_wakes_total", "Wakes asked for (a held request found its deployment "
                "parked or waking)", ["namespace", "deployment"], registry=REGISTRY)
WAKE_SECONDS = Histogram("modeldeployment_activator_wake_seconds", "A woken request's wait: held until its first "
                         "byte was forwarded", ["namespace", "deployment"], registry=REGISTRY,
                         buckets=(0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900))
HELD = Gauge("modeldeployment_activator_requests_held", "Requests held now", ["namespace", "deployment"],
             registry=REGISTRY)
HELD_FAILED = Counter("modeldeployment_activator_held_timeouts_total", "Held requests answered 503 (reason: "
                      "timeout at wakeTimeout, overflow of the hold bound, failed wake, no scaler)",
                      ["namespace", "deployment", "reason"], registry=REGISTRY)
PARKED_SECONDS = Counter("modeldeployment_activator_parked_seconds_total", "Seconds a deployment had been parked "
                         "when a request woke it (from the scaler's status.parkedSince)",
                         ["namespace", "deployment"], registry=REGISTRY)
