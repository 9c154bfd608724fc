"""Idleness from the engines' own request counters: pure rules (docs/scale-to-zero.md#idle-after).

The reader (app/kube/idleness.py) scrapes the serving leaders' Prometheus text; these functions
say what it means: the requests counted so far and those in flight, whether anything happened
since the last look, and whether the scaler's last-request annotation may be written again.
"""

from __future__ import annotations

from dataclasses import dataclass

from app import vocab


@dataclass(frozen=True)
class Counts:
    """One leader's request counters: completed so far, and running or queued now."""

    completed: float
    in_flight: float


def _sample(line: str) -> tuple[str, float] | None:
    """A Prometheus text sample's metric name and value (labels dropped), None for comments and junk."""
    if not line or line.startswith("#"):
        return None
    name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
    if name_end <= 0:
        return None
    rest = line[line.rfind("}") + 1:] if "{" in line[:name_end + 1] else line[name_end:]
    try:
        return line[:name_end], float(rest.split()[0])
    except (IndexError, ValueError):
        return None


def counts(text: str) -> Counts | None:
    """The request counters in one scrape; None when the text holds none of them (metrics off)."""
    completed = in_flight = 0.0
    seen = False
    for line in text.splitlines():
        sample = _sample(line.strip())
        if sample is None:
            continue
        name, value = sample
        if name in vocab.IDLENESS_COUNTERS:
            completed += value
            seen = True
        elif name in vocab.IDLENESS_GAUGES:
            in_flight += value
            seen = True
    return Counts(completed, in_flight) if seen else None


def active(previous: Counts | None, now: Counts | None) -> bool:
    """A request happened since the last look: a counter moved, or one is in flight. A leader whose
    counters cannot be read counts as active, so a deployment is never parked on missing data. The
    first look at a leader compares with its engine's start (the counters begin at 0): any request
    it completed counts, so a fresh replica's first requests are learned in one round, not two (and
    after the operator restarts, a leader that ever served counts once, never parking early)."""
    if now is None:
        return True
    if now.in_flight > 0:
        return True
    return now.completed != (previous.completed if previous is not None else 0.0)


def write_due(last_written: float | None, now: float) -> bool:
    """At most one last-request write per deployment every IDLENESS_WRITE_INTERVAL_SECONDS."""
    return last_written is None or now - last_written >= vocab.IDLENESS_WRITE_INTERVAL_SECONDS
