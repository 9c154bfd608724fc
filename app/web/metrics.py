"""Prometheus metrics: hook and webhook calls, and per deployment what its last sync decided.

The per-deployment series come from the sync hook's own answer (`observe_sync`), so they say what
this replica of the service last told Metacontroller. With several replicas, each reports the
deployments it synced; `modeldeployment_last_sync_timestamp_seconds` tells which replica's series
are the freshest (the Grafana dashboard keeps only those; docs/operations.md).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from app import timestamps, vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.intents import Intent, SetWorkloadActive

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

# --- per deployment ----------------------------------------------------------------------------

PHASES = (vocab.PHASE_STARTING, vocab.PHASE_READY, vocab.PHASE_DEGRADED, vocab.PHASE_DELETING)
REPLICA_KINDS = {"desired": "desired", "ready": "ready", "quota_reserved": "quotaReserved"}
ROLLOUT_REASONS = (vocab.REASON_ROLLOUT_IN_PROGRESS, vocab.REASON_REPLACEMENT_IN_PROGRESS)

PHASE = Gauge("modeldeployment_phase", "1 for the deployment's current phase, 0 for the others",
              ["namespace", "name", "phase"])
ROLE_REPLICAS = Gauge("modeldeployment_role_replicas",
                      "Replicas per role: desired, ready, quota_reserved (holding an admitted Kueue Workload)",
                      ["namespace", "name", "role", "kind"])
ROLLOUT_IN_PROGRESS = Gauge("modeldeployment_rollout_in_progress",
                            "1 while replicas are being replaced (ReplicasUpToDate is False)", ["namespace", "name"])
LAST_SYNC = Gauge("modeldeployment_last_sync_timestamp_seconds",
                  "When this replica of the service last answered a sync for the deployment", ["namespace", "name"])
ADMISSION_WAIT = Histogram(
    "modeldeployment_admission_wait_seconds",
    "How long QuotaReserved stayed not True (since its last change) before every replica held quota",
    ["namespace", "name"],
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600),
)
RENDER_FAILURES = Counter(
    "modeldeployment_render_failures_total",
    "Sync passes that could not render (answered 429): reason retryable (resolves by itself) or spec (needs an edit)",
    ["namespace", "name", "reason"],
)
JOINT_RELEASES = Counter(
    "modeldeployment_joint_admission_releases_total",
    "Sync passes that deactivated the deployment's pod groups (a deadlock release; docs/kueue.md)",
    ["namespace", "name"],
)

# The role series each deployment has, to remove them when it goes (or a role does).
_roles: dict[tuple[str, str], set[str]] = {}
# Deployments with series, least recently synced first. The hooks port answers anyone who can reach
# it, and a pass that writes nothing confirms nothing with the API server, so a flood of made-up
# parents must not grow the registry without bound: past the cap the stalest deployment's series go.
MAX_TRACKED_DEPLOYMENTS = 10_000
_tracked: OrderedDict[tuple[str, str], None] = OrderedDict()


def _track(namespace: str, name: str) -> None:
    _tracked[(namespace, name)] = None
    _tracked.move_to_end((namespace, name))
    while len(_tracked) > MAX_TRACKED_DEPLOYMENTS:
        stale_namespace, stale_name = _tracked.popitem(last=False)[0]
        forget(stale_namespace, stale_name)
        for metric in (ADMISSION_WAIT, JOINT_RELEASES):
            _remove(metric, stale_namespace, stale_name)
        for reason in ("retryable", "spec"):
            _remove(RENDER_FAILURES, stale_namespace, stale_name, reason)


def _key(parent: KubeObject) -> tuple[str, str]:
    meta = parent.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def observe_sync(parent: KubeObject, status: KubeObject, intents: list[Intent], finalized: bool | None,
                 now: str) -> None:
    """Records one answered sync (or finalize) pass of a deployment."""
    namespace, name = _key(parent)
    if finalized:
        forget(namespace, name)
        _tracked.pop((namespace, name), None)
        return
    _track(namespace, name)
    phase = status.get("phase")
    for each in PHASES:
        PHASE.labels(namespace, name, each).set(1 if each == phase else 0)
    roles = set()
    for role in status.get("roles") or []:
        roles.add(role["name"])
        for kind, field in REPLICA_KINDS.items():
            ROLE_REPLICAS.labels(namespace, name, role["name"], kind).set(role.get(field) or 0)
    for gone in _roles.get((namespace, name), set()) - roles:
        for kind in REPLICA_KINDS:
            ROLE_REPLICAS.remove(namespace, name, gone, kind)
    _roles[(namespace, name)] = roles
    up_to_date = obs.status_condition(status, vocab.COND_REPLICAS_UP_TO_DATE)
    ROLLOUT_IN_PROGRESS.labels(namespace, name).set(
        1 if up_to_date and up_to_date.get("reason") in ROLLOUT_REASONS else 0)
    LAST_SYNC.labels(namespace, name).set(timestamps.epoch_seconds(now))
    before = obs.condition(parent, vocab.COND_QUOTA_RESERVED)
    after = obs.status_condition(status, vocab.COND_QUOTA_RESERVED)
    if before and after and before.get("status") != vocab.CONDITION_TRUE and after.get("status") == vocab.CONDITION_TRUE \
            and before.get("lastTransitionTime"):
        ADMISSION_WAIT.labels(namespace, name).observe(max(0.0, timestamps.epoch_seconds(now) - timestamps.epoch_seconds(before["lastTransitionTime"])))
    if any(isinstance(i, SetWorkloadActive) and not i.active and i.released_at == now for i in intents):
        JOINT_RELEASES.labels(namespace, name).inc()


def observe_render_failure(parent: KubeObject, retryable: bool) -> None:
    namespace, name = _key(parent)
    _track(namespace, name)
    RENDER_FAILURES.labels(namespace, name, "retryable" if retryable else "spec").inc()


def forget(namespace: str, name: str) -> None:
    """A deployment that finalized: its gauges go (counters and histograms stay, as totals do)."""
    for each in PHASES:
        _remove(PHASE, namespace, name, each)
    for role in _roles.pop((namespace, name), set()):
        for kind in REPLICA_KINDS:
            _remove(ROLE_REPLICAS, namespace, name, role, kind)
    _remove(ROLLOUT_IN_PROGRESS, namespace, name)
    _remove(LAST_SYNC, namespace, name)


def _remove(metric: Any, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass  # never set on this replica
