"""Ready on composition, the planner's half (docs/kueue.md#ready-on-composition): the follow-ups a
pass leaves for the single-role groups whose Pods it creates, and the pure steps the executor's
half (app/kube/composition.py) takes on each copy of the Workload it waits for."""

from __future__ import annotations

from enum import Enum

from app import vocab
from app.api.objects import KubeObject
from app.control import observed as obs
from app.control import skew
from app.control.intents import Intent, ReadyOnComposition
from app.control.rollout import Action, RolePlan
from app.model.context import DeploymentContext
from app.render.revision import effective_revision

# What a single-role group's check says once Ready (a pass and a follow-up write the same words).
SINGLE_ROLE_READY = "admitted as soon as Kueue reserves its quota (a single-role deployment)"
# The plan creates Pods for these replicas when its entry carries Pods (a new group).
CREATING = (Action.CREATE, Action.REPLACE, Action.SUPERSEDE, Action.REBUILD)


def ready_on_composition(ctx: DeploymentContext, plans: list[RolePlan]) -> list[Intent]:
    """A single-role deployment's groups whose Pods this pass creates and whose Workload the request
    does not show: the follow-up that writes their check Ready once Kueue composes them and the
    earlier incarnation's Pods are gone, the decision this pass would make then
    (docs/kueue.md#ready-on-composition). Kueue composes a group only after the pass has answered,
    so without it the write waits for the next pass, behind every parent in Metacontroller's queue."""
    generation = ctx.md.metadata.generation
    if len(ctx.md.spec.roles) > 1 or generation is None:
        return []
    out: list[Intent] = []
    for plan in plans:
        if plan.hold is not None:
            continue
        for entry in plan.ordinals:
            # (A creating entry's Pods are the role's current render; its up_to_date describes the
            # instance it gives up.)
            if entry.action not in CREATING or not entry.pods:
                continue
            group = obs.pod_group_of(entry.pods[0])
            if not group or ctx.world.workload(ctx.namespace, group) is not None:
                continue
            out.append(ReadyOnComposition(namespace=ctx.namespace, deployment=ctx.name,
                                          deployment_uid=ctx.md.metadata.uid, generation=generation,
                                          revision=effective_revision(ctx.options.render_rehearsal),
                                          workload=group, stopping_pods=entry.stopping_pods,
                                          message=SINGLE_ROLE_READY, members=members_to_verify(entry.pods),
                                          fingerprint=obs.pod_fingerprint(entry.pods[0]) or ""))
    return out


def members_to_verify(pods: list[KubeObject]) -> tuple[str, ...]:
    """The group's Pods whose render the follow-up reads before it writes: a multi-Pod group's, whose
    names are the same in every render, so a pass whose view had not listed an older render's Pods
    under those names asked for Pods that were already there (Metacontroller's create finds them);
    none of a one-Pod group, whose name carries its render (docs/kueue.md#ready-on-composition)."""
    return tuple(map(obs.pod_name, pods)) if len(pods) > 1 else ()


def members_on_render(intent: ReadyOnComposition, members: list[KubeObject | None]) -> bool:
    """Every member the follow-up read is stored, not being deleted, on the intent's render."""
    return all(pod is not None and not obs.pod_terminating(pod) and obs.pod_fingerprint(pod) == intent.fingerprint
               for pod in members)


def deployment_unchanged(intent: ReadyOnComposition, live: KubeObject | None, now: str) -> bool:
    """The follow-up's deployment, read now, is still the object and the spec generation its pass
    decided on, and no operator of a newer render revision answers it (a deletion, an edit, a scale
    or an upgrade since: the next pass decides; docs/operations.md#upgrading-the-operator)."""
    meta = (live or {}).get("metadata") or {}
    status = (live or {}).get("status") or {}
    return (live is not None and meta.get("uid") == intent.deployment_uid
            and meta.get("generation") == intent.generation and not meta.get("deletionTimestamp")
            and skew.defers_to(status.get("newestRender") if isinstance(status, dict) else None,
                               intent.revision, now) is None)


class Composed(str, Enum):
    """What a follow-up does on a copy of the Workload it waits for."""

    WRITE = "write"  # write Ready, once the stopping Pods are gone and the deployment is unchanged
    WAIT = "wait"  # not yet: Kueue has not put our check on it
    DONE = "done"  # nothing left to do: the check is decided, or the Workload is going


def composed_step(workload: KubeObject) -> Composed:
    """The follow-up's step on one copy of its Workload (docs/kueue.md#ready-on-composition)."""
    if (obs.workload_deleting(workload) or obs.workload_admitted(workload)
            or (workload.get("spec") or {}).get("active") is False):
        return Composed.DONE
    check = obs.our_check(workload)
    if check is None:
        return Composed.WAIT
    if check.get("state") in (vocab.CHECK_STATE_READY, vocab.CHECK_STATE_RETRY):
        return Composed.DONE
    return Composed.WRITE

