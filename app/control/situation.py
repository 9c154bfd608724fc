"""What one ordinal of a role is in, read from the request alone: the rollout planner applies one
rule per situation (docs/kueue.md#rollout-cadence). Pure."""

from __future__ import annotations

from enum import Enum

from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.skew import Standing, judge_render


class Situation(str, Enum):
    """What one ordinal of a role is in, read from the request alone; each has one rule below."""

    GONE_UNDECLARED = "gone-undeclared"  # beyond the declared replicas, nothing of it reads
    UNDECLARED = "undeclared"  # beyond the declared replicas, Pods or a Workload remain
    EMPTY_WITH_WORKLOAD = "empty-with-workload"  # no Pod, but its Workload stands
    EMPTY = "empty"  # nothing of it reads: it may be filled
    DEPARTED = "departed"  # a Pod deleted, failed, evicted, a member of an admitted group missing
    DRIFTED = "drifted"  # admitted, but Kueue places the group elsewhere than its Pods run: a turnover candidate
    SUPERSEDED = "superseded"  # queued (not admitted) on an obsolete render
    INCOMPLETE = "incomplete"  # a group not yet admitted lacks a member
    CURRENT = "current"  # on the current render
    NEWER = "newer"  # made by a newer render revision from the current spec: kept as it is
    OBSOLETE = "obsolete"  # admitted on an obsolete render: a turnover candidate


def classify(*, declared: bool, inst: obs.ObservedInstance | None, workload: KubeObject | None,
             fingerprint: str, size: int, held: bool, revision: int = 0, generation: int | None = None) -> Situation:
    """The rules' order of precedence, as one pure function of what one ordinal reads."""
    pods = inst.pods if inst is not None else []
    if not declared:
        return Situation.UNDECLARED if pods or workload is not None else Situation.GONE_UNDECLARED
    if inst is None or not pods:
        return Situation.EMPTY_WITH_WORKLOAD if workload is not None else Situation.EMPTY
    standing = judge_render(inst, fingerprint=fingerprint, revision=revision, generation=generation)
    current = standing is not Standing.OBSOLETE
    admitted = obs.workload_admitted(workload) and not obs.workload_deleting(workload)
    missing = len(inst.members()) < size
    # An eviction stops a group that ran; a group evicted while still gated is only requeued.
    evicted = (obs.workload_evicted(workload) and inst.ran) or inst.evicted
    if (inst.terminating or inst.finished or evicted or obs.workload_deleting(workload)
            or (missing and admitted)):
        return Situation.DEPARTED
    if admitted and obs.placement_drifted(workload, pods):
        return Situation.DRIFTED
    if not current and not admitted and not held:
        return Situation.SUPERSEDED
    if missing:
        return Situation.INCOMPLETE
    return {Standing.CURRENT: Situation.CURRENT, Standing.NEWER: Situation.NEWER}.get(standing, Situation.OBSOLETE)
