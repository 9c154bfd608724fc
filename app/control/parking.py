"""A scaler's parking and waking: pure rules of one pass (docs/scale-to-zero.md).

The scaler is the one writer of the 0 <-> N change of its own `spec.replicas`. It parks when no
request reached the deployment for `scaleToZero.idleAfter` (what the engines' counters say, from
the idleness reader's annotation, and what the activator holds, from its wake request), and wakes
to `wakeReplicas` when the activator asks after the deployment was parked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app import durations, timestamps, vocab
from app.api.scaler import ModelDeploymentScaler

STATE_PARKED = "Parked"
STATE_WAKING = "Waking"
STATE_SERVING = "Serving"


@dataclass(frozen=True)
class Decision:
    """What the pass does about parking: the units to set (None: leave them), and why."""

    units: int | None = None
    reason: str = ""
    message: str = ""


def _stamp(scaler: ModelDeploymentScaler, key: str) -> datetime | None:
    return timestamps.parse(scaler.metadata.annotations.get(key))


def _status_stamp(scaler: ModelDeploymentScaler, key: str) -> datetime | None:
    value = (scaler.status or {}).get(key)
    return timestamps.parse(value) if isinstance(value, str) else None


def last_activity(scaler: ModelDeploymentScaler, now: str, ready_units: int) -> str:
    """The latest of: the last request the engines counted, the activator's last wake request, the
    last the status recorded. With none of them, `now` (idleness counts from the first pass). While
    the deployment starts or wakes (units declared, none Ready) it is `now`: a deployment is idle
    only while it could serve, so idleAfter counts from its first Ready unit and a start longer than
    idleAfter (a large model's load) never parks it before it served."""
    if state(scaler, ready_units) == STATE_WAKING:
        return now
    seen = [s for s in (_stamp(scaler, vocab.ANNOTATION_LAST_REQUEST), _stamp(scaler, vocab.ANNOTATION_WAKE_REQUESTED),
                        _status_stamp(scaler, "lastRequestTime")) if s is not None]
    if not seen:
        return now
    return _rfc3339(max(seen))


def parked_since(scaler: ModelDeploymentScaler, now: str) -> str | None:
    """When the scaler parked (its status' stamp carried over), None while it declares units."""
    if scaler.spec.replicas > 0:
        return None
    previous = (scaler.status or {}).get("parkedSince")
    return previous if isinstance(previous, str) and timestamps.parse(previous) else now


def idle_seconds(last: str, now: str) -> float:
    return timestamps.epoch_seconds(now) - timestamps.epoch_seconds(last)


def park_due(scaler: ModelDeploymentScaler, last: str, now: str) -> bool:
    """Park when the scaler has scaleToZero, declares units, and nothing came for idleAfter."""
    stz = scaler.spec.scale_to_zero
    if stz is None or scaler.spec.replicas == 0:
        return False
    idle_after = durations.seconds(stz.idle_after)
    return idle_after is not None and idle_seconds(last, now) >= idle_after


def wake_due(scaler: ModelDeploymentScaler, since: str | None) -> bool:
    """Wake when parked and the activator asked after the park (an older ask was answered already)."""
    if scaler.spec.scale_to_zero is None or scaler.spec.replicas > 0 or since is None:
        return False
    asked = _stamp(scaler, vocab.ANNOTATION_WAKE_REQUESTED)
    parked_at = timestamps.parse(since)
    return asked is not None and parked_at is not None and asked > parked_at


def seconds_until_idle(scaler: ModelDeploymentScaler, last: str, now: str) -> float | None:
    """When the next pass should look again (the park deadline), None when no park is pending."""
    stz = scaler.spec.scale_to_zero
    if stz is None or scaler.spec.replicas == 0:
        return None
    idle_after = durations.seconds(stz.idle_after)
    if idle_after is None:
        return None
    return max(1.0, idle_after - idle_seconds(last, now))


def decide(scaler: ModelDeploymentScaler, deployment: str, last: str, since: str | None, now: str) -> Decision:
    """Park, wake, or leave the units as they are."""
    stz = scaler.spec.scale_to_zero
    if stz is None:
        return Decision()
    if park_due(scaler, last, now):
        return Decision(0, vocab.EVENT_PARKED,
                        f"no request reached ModelDeployment {deployment} since {last} (idleAfter {stz.idle_after}): "
                        f"parking, spec.replicas {scaler.spec.replicas} -> 0; its Pods and Workloads go and its quota "
                        "is released; the next request wakes it")
    if wake_due(scaler, since):
        asked = scaler.metadata.annotations.get(vocab.ANNOTATION_WAKE_REQUESTED, "")
        return Decision(stz.wake_replicas, vocab.EVENT_WOKEN,
                        f"a request to ModelDeployment {deployment} is held (wake requested at {asked}): waking, "
                        f"spec.replicas 0 -> {stz.wake_replicas}")
    return Decision()


def state(scaler: ModelDeploymentScaler, ready_units: int) -> str:
    """Parked (0 units), Waking (units declared, none Ready), Serving."""
    if scaler.spec.replicas == 0:
        return STATE_PARKED
    return STATE_WAKING if ready_units == 0 else STATE_SERVING


def _rfc3339(when: datetime) -> str:
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")
