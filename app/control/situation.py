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
    # No Pod listed, but an admitted Workload stands in the slot the ordinal's next incarnation is
    # created in: the Pods a pass created for it, which this view has not listed yet.
    UNLISTED = "unlisted"
    EMPTY = "empty"  # nothing of it reads: it may be filled
    DEPARTED = "departed"  # a Pod deleted, failed, evicted, a member of an admitted group missing
    DRIFTED = "drifted"  # admitted, but Kueue places the group elsewhere than its Pods run: a turnover candidate
    SUPERSEDED = "superseded"  # queued (not admitted) on an obsolete render
    INCOMPLETE = "incomplete"  # a group not yet admitted lacks a member
    CURRENT = "current"  # on the current render
    NEWER = "newer"  # made by a newer render revision from the current spec: kept as it is
    OBSOLETE = "obsolete"  # admitted on an obsolete render: a turnover candidate


def classify(*, declared: bool, inst: obs.ObservedInstance | None, workload: KubeObject | None,
             fingerprint: str, size: int, held: bool, revision: int = 0, generation: int | None = None,
             upcoming_slot: bool = False) -> Situation:
    """The rules' order of precedence, as one pure function of what one ordinal reads.
    `upcoming_slot`: `workload` stands in the slot the ordinal's next incarnation is created in."""
    pods = inst.pods if inst is not None else []
    if not declared:
        return Situation.UNDECLARED if pods or workload is not None else Situation.GONE_UNDECLARED
    if inst is None or not pods:
        if workload is None:
            return Situation.EMPTY
        # Only a group whose Pods a pass created is ever admitted in the slot being filled, possibly
        # before any pass lists them (docs/kueue.md#ready-on-composition): a view without them, beside
        # that admitted Workload, has not caught up.
        lagging = upcoming_slot and obs.workload_admitted(workload) and not obs.workload_deleting(workload)
        return Situation.UNLISTED if lagging else Situation.EMPTY_WITH_WORKLOAD
    standing = judge_render(inst, fingerprint=fingerprint, revision=revision, generation=generation)
    current = standing is not Standing.OBSOLETE
    admitted = obs.workload_admitted(workload) and not obs.workload_deleting(workload)
    missing = len(inst.members()) < size
    # An eviction stops a group that ran; a group evicted while still gated is only requeued.
    evicted = (obs.workload_evicted(workload) and inst.ran) or inst.evicted
    # A member missing from an admitted group is a departure once the group ran. While every listed
    # member is still gated, the view may simply not list the rest yet (it lists Pods in the order
    # they were written: all members exist before Kueue composes, admits and ungates the group), so
    # a current group is completed under the same names instead.
    lost_member = missing and admitted and (inst.ran or not current)
    if (inst.terminating or inst.finished or evicted or obs.workload_deleting(workload) or lost_member):
        return Situation.DEPARTED
    if admitted and obs.placement_drifted(workload, pods):
        return Situation.DRIFTED
    if not current and not admitted and not held:
        return Situation.SUPERSEDED
    if missing:
        return Situation.INCOMPLETE
    return {Standing.CURRENT: Situation.CURRENT, Standing.NEWER: Situation.NEWER}.get(standing, Situation.OBSOLETE)
