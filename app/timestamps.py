"""API timestamps: RFC 3339 in UTC, whole seconds (`lastTransitionTime`, `deletionTimestamp`) or
with microseconds (a Lease's `renewTime`, the operator's own stamps). One reader for all of them."""

from __future__ import annotations

from datetime import datetime


def parse(stamp: str | None) -> datetime | None:
    """The time a stamp names, or None when it is absent or not a timestamp (a field another
    controller wrote is read, never trusted)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def epoch_seconds(stamp: str) -> float:
    """Seconds since the epoch of a stamp known to be one; ValueError otherwise."""
    when = parse(stamp)
    if when is None:
        raise ValueError(f"not an RFC 3339 timestamp: {stamp!r}")
    return when.timestamp()
