"""Prometheus metrics: hook and webhook calls, and per deployment what its last sync decided.

The per-deployment series come from the sync hook's own answer (`observe_sync`), so they say what
this replica of the service last told Metacontroller. With several replicas, each reports the
deployments it synced; `modeldeployment_last_sync_timestamp_seconds` tells which replica's series
are the freshest (the Grafana dashboard keeps only those; docs/operations.md#metrics). A finalize
answered here removes the deployment's gauges at once but keeps its last-sync time, so the other
replica's older series are not the freshest; every series of a deployment this replica has not
synced for `SERIES_EXPIRE_SECONDS` goes (`expire`, on every pass and every scrape).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable

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
# The hooks port answers anyone who can reach it, and a pass that writes nothing confirms nothing
# with the API server, so a flood of made-up parents must not grow the registry without bound: past
# the cap the stalest deployment's series go.
MAX_TRACKED_DEPLOYMENTS = 10_000
# A deployment this replica has not synced for this long has its series removed: every parent gets
# a pass each resync period from one replica or the other, so a live deployment keeps fresh series
# on at least one, and a deployment finalized (or taken over) by the other replica stops showing
# here within this bound (docs/operations.md#metrics).
SERIES_EXPIRE_SECONDS = 3.0 * vocab.RESYNC_PERIOD_SECONDS


class Tracked:
    """The deployments with series on this replica, least recently synced first, each with when
    (on `clock`) this replica last synced it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, cap: int = MAX_TRACKED_DEPLOYMENTS,
                 expire_after: float = SERIES_EXPIRE_SECONDS) -> None:
        self.clock = clock
        self.cap = cap
        self.expire_after = expire_after
        self.synced: OrderedDict[tuple[str, str], float] = OrderedDict()

    def seen(self, key: tuple[str, str]) -> list[tuple[str, str]]:
        """Records a pass of `key`; the deployments whose series must go: expired, or past the cap."""
        self.synced[key] = self.clock()
        self.synced.move_to_end(key)
        gone = self.expired()
        while len(self.synced) > self.cap:
            gone.append(self.synced.popitem(last=False)[0])
        return gone

    def expired(self) -> list[tuple[str, str]]:
        """Drops and returns the deployments not synced for `expire_after` (oldest first)."""
        gone = []
        cutoff = self.clock() - self.expire_after
        while self.synced:
            key, at = next(iter(self.synced.items()))
            if at > cutoff:
                break
            del self.synced[key]
            gone.append(key)
        return gone


TRACKED = Tracked()


def _track(namespace: str, name: str) -> None:
    for stale in TRACKED.seen((namespace, name)):
        _drop(*stale)


def expire() -> None:
    """Removes every series of each deployment this replica has not synced for SERIES_EXPIRE_SECONDS."""
    for stale in TRACKED.expired():
        _drop(*stale)


def _drop(namespace: str, name: str) -> None:
    """Every series of a deployment: its gauges, counters and histograms."""
    forget(namespace, name)
    _remove(LAST_SYNC, namespace, name)
    for metric in (ADMISSION_WAIT, JOINT_RELEASES):
        _remove(metric, namespace, name)
    for reason in ("retryable", "spec"):
        _remove(RENDER_FAILURES, namespace, name, reason)


def _key(parent: KubeObject) -> tuple[str, str]:
    meta = parent.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def observe_sync(parent: KubeObject, status: KubeObject, intents: list[Intent], finalized: bool | None,
                 now: str) -> None:
    """Records one answered sync (or finalize) pass of a deployment."""
    namespace, name = _key(parent)
    _track(namespace, name)
    if finalized:
        # Its gauges go; its last sync stays (until it expires), so the dashboard's freshest-replica
        # filter hides the other replica's older series at once (docs/operations.md#metrics).
        forget(namespace, name)
        LAST_SYNC.labels(namespace, name).set(timestamps.epoch_seconds(now))
        return
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
    """A deployment that finalized: its state gauges go (its last sync, counters and histograms stay,
    as totals do, until they expire)."""
    for each in PHASES:
        _remove(PHASE, namespace, name, each)
    for role in _roles.pop((namespace, name), set()):
        for kind in REPLICA_KINDS:
            _remove(ROLE_REPLICAS, namespace, name, role, kind)
    _remove(ROLLOUT_IN_PROGRESS, namespace, name)


def _remove(metric: Any, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass  # never set on this replica
