"""The intents of a replica going away: its departure Event and the delete of its Workload
(docs/kueue.md#events, docs/kueue.md#rollout-cadence). Pure."""

from __future__ import annotations

from app import vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control.intents import DeleteWorkload, Intent, RecordEvent, parent_event
from app.model.context import DeploymentContext
from app.render import names


def replica_event(ctx: DeploymentContext, reason: str, role: str, ordinal: int, key: str, what: str) -> RecordEvent:
    replica = names.instance(ctx.name, role, ordinal)
    message = (f"replica {replica} (role {role}, ordinal {ordinal}) {what}; its siblings lose the KV blocks it "
               f"held once its {vocab.KV_LEASE_WINDOW_SECONDS}s cache lease window expires")
    return parent_event(ctx.md.metadata, reason, message, type_=vocab.EVENT_TYPE_NORMAL,
                        occurrence=(vocab.EVENT_NAME_REPLICA_DEPARTURE, f"{ctx.md.metadata.uid}/{role}/{ordinal}/{key}"))


def workload_occurrence_key(workload: KubeObject, slot_groups: list[str], next_incarnation: int) -> str:
    """The departure key of the incarnation a Workload standing without listed Pods was composed for,
    the one a pass that lists its Pods uses (ObservedInstance.occurrence_key), so the two views of
    one departure name one Event: the newest incarnation created in the Workload's slot (its index in
    `slot_groups`), `next_incarnation` when it is that slot's (created, not listed yet), else the one
    before it. A Workload in neither slot, or before any incarnation, is named by its UID."""
    name = (workload.get("metadata") or {}).get("name")
    slot = slot_groups.index(name) if name in slot_groups else None
    incarnation = None if slot is None else next_incarnation - (next_incarnation - slot) % len(slot_groups)
    if incarnation is None or incarnation < 0:
        return f"workload:{obs.workload_uid(workload)}"
    return f"incarnation:{incarnation}"


def departure_event(ctx: DeploymentContext, role: str, ordinal: int, inst: obs.ObservedInstance,
                     workload: KubeObject | None) -> RecordEvent:
    if inst.evicted or (obs.workload_evicted(workload) and inst.ran):
        return replica_event(ctx, vocab.EVENT_REPLICA_EVICTED, role, ordinal, inst.occurrence_key(),
                      "was evicted by Kueue and is rebuilt")
    return replica_event(ctx, vocab.EVENT_REPLICA_RESTARTED, role, ordinal, inst.occurrence_key(),
                  "lost a Pod and is rebuilt whole")


def delete_unless_deleting(ctx: DeploymentContext, group: str, workload: KubeObject | None, why: str) -> list[Intent]:
    """Nothing for a Workload already being deleted (Kueue's finalizer holds it a while): deleting it
    again on every pass would cost a GET and a DELETE each time, a large share of a rollout's API
    calls (bench/results.md#figures-quoted-from-the-code)."""
    if workload is None or obs.workload_deleting(workload):
        return []
    return [workload_delete(ctx.namespace, group, workload, why)]


def workload_delete(namespace: str, group: str, workload: KubeObject | None, why: str) -> DeleteWorkload:
    """The delete of a pod group's Workload, carrying the request's copy of it when the pass has one:
    the executor checks the copy's owners and deletes with the copy's UID as precondition, without
    reading the Workload again (docs/metacontroller.md#trust)."""
    meta = (workload or {}).get("metadata") or {}
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        return DeleteWorkload(namespace, group, why)
    owners = tuple((str(o.get("kind", "")), str(o.get("name", ""))) if isinstance(o, dict) else ("", "")
                   for o in meta.get("ownerReferences") or [])
    return DeleteWorkload(namespace, group, why, uid=uid, owners=owners)
