"""Status: rebuilt from observed state on every sync, deterministic (docs/status.md). The only place a
deployment's status is built: phase, role statuses, conditions, endpoint, the router's readiness.

`lastTransitionTime` moves only when a condition's status moves; it is carried over from the
parent's observed status, so a sync that changes nothing writes byte-identical status. A pass that
finds only progress within a transition, shortly after the last write, answers the last written
status and comes back when the settle window ends (`settle`, docs/status.md#settling).
"""

from __future__ import annotations

import copy
from typing import Any

from app import timestamps, vocab
from app.api.objects import KubeObject, ObservedGroups
from app.api.v1 import ModelDeployment, RouterSpec
from app.control import stages as replica_stages
from app.control.rollout import Action, RolePlan
from app.engines.common import KV_EVENT_PRODUCER_KINDS
from app.engines.registry import engine_of
from app.model.condition import ConditionValue
from app.model.context import DeploymentContext
from app.model.serving import serving
from app.render import names
from app.render.pod import RoleRender


def _cond(type_: str, status: str, reason: str, message: str) -> ConditionValue:
    return ConditionValue(type_, status, reason, message)


def domain_registered(ctx: DeploymentContext) -> ConditionValue:
    t = vocab.COND_DOMAIN_REGISTERED
    attachment = ctx.attachment
    if attachment is None:
        return _cond(t, "True", vocab.REASON_NOT_APPLICABLE, "no spec.kvCache: no shared pool is attached")
    if attachment.usable:
        domain = attachment.domain
        return _cond(t, "True", vocab.REASON_REGISTERED,
                     f"binding {attachment.binding} attaches pool {attachment.pool} in reuse domain "
                     f"{domain.name if domain else 'default'}")
    return _cond(t, "False", attachment.hold_reason or vocab.REASON_BINDING_NOT_READY,
                 f"{attachment.hold_message}; new and replacement replicas are held, running ones keep serving")


def quota_reserved(ctx: DeploymentContext, plans: list[RolePlan]) -> ConditionValue:
    t = vocab.COND_QUOTA_RESERVED
    declared = [p for plan in plans for p in plan.ordinals if p.action != Action.SHED]
    if not declared:
        return _cond(t, "Unknown", vocab.REASON_NO_REPLICAS, "no replica is declared")
    have = sum(1 for p in declared if p.reserved)
    want = len(declared)
    if have == want:
        return _cond(t, "True", vocab.REASON_RESERVED, f"{have} of {want} replicas have reserved quota")
    departed = sum(1 for p in declared if p.action == Action.REBUILD)
    if departed and have:
        return _cond(t, "False", vocab.REASON_PREEMPTED_IN_PART,
                     f"{departed} replica(s) were evicted or departed; {have} of {want} replicas have reserved quota")
    incomplete = sum(1 for p in declared if p.incomplete)
    if incomplete:
        return _cond(t, "False", vocab.REASON_POD_GROUP_INCOMPLETE,
                     f"{incomplete} replica pod group(s) lack Pods; {have} of {want} replicas have reserved quota")
    if not any(p.has_workload for p in declared):
        return _cond(t, "Unknown", vocab.REASON_ADMISSION_IN_FLIGHT,
                     f"0 of {want} replicas have a Kueue Workload yet")
    return _cond(t, "False", vocab.REASON_PENDING, f"{have} of {want} replicas have reserved quota; the rest are queued")


def cache_attached(ctx: DeploymentContext, renders: list[RoleRender], ready: int) -> ConditionValue:
    t = vocab.COND_CACHE_ATTACHED
    if ctx.attachment is None:
        return _cond(t, "True", vocab.REASON_NOT_APPLICABLE, "no spec.kvCache")
    unmanaged = [r.role.name for r in renders if r.unmanaged]
    if unmanaged:
        return _cond(t, "Unknown", vocab.REASON_UNMANAGED,
                     f"role(s) {', '.join(unmanaged)} took over the command line: the operator configured no cache "
                     f"client there and reports on none")
    if ready == 0:
        return _cond(t, "Unknown", vocab.REASON_NO_REPLICA_READY, "no replica is Ready yet")
    return _cond(t, "True", vocab.REASON_CACHE_ACTIVE,
                 f"{ready} ready replica(s) render the Mooncake client for pool {ctx.attachment.pool}")


def replicas_up_to_date(plans: list[RolePlan]) -> ConditionValue:
    t = vocab.COND_REPLICAS_UP_TO_DATE
    rolling = []
    rebuilding = []
    for plan in plans:
        declared = [p for p in plan.ordinals if p.action != Action.SHED]
        outdated = sum(1 for p in declared if not p.up_to_date or p.action in (Action.REPLACE, Action.SUPERSEDE))
        if outdated:
            rolling.append(f"{plan.role}: {len(declared) - outdated} of {len(declared)} up to date")
        if any(p.action == Action.REBUILD for p in declared):
            rebuilding.append(plan.role)
    if rolling:
        return _cond(t, "False", vocab.REASON_ROLLOUT_IN_PROGRESS, "; ".join(rolling))
    if rebuilding:
        return _cond(t, "False", vocab.REASON_REPLACEMENT_IN_PROGRESS,
                     f"departed replicas are being replaced in role(s) {', '.join(rebuilding)}")
    return _cond(t, "True", vocab.REASON_UP_TO_DATE, "every replica runs the current render")


def role_kinds_ready(ready_by_kind: dict[str, int]) -> ConditionValue:
    t = vocab.COND_ROLE_KINDS_READY
    if not ready_by_kind:
        return _cond(t, "Unknown", vocab.REASON_NO_ROLE_STATUSES, "no role status yet")
    missing = [k for k, n in ready_by_kind.items() if n == 0]
    if missing:
        return _cond(t, "False", vocab.REASON_KINDS_NOT_READY, f"no ready replica of kind(s) {', '.join(missing)}")
    return _cond(t, "True", vocab.REASON_ALL_KINDS_READY, "every role kind has a ready replica")


def kv_events_publishing(ctx: DeploymentContext, renders: list[RoleRender]) -> ConditionValue:
    t = vocab.COND_KV_EVENTS_PUBLISHING
    off = engine_of(ctx.md).kv_events_off(ctx)
    if off == vocab.REASON_NO_ROUTER:
        return _cond(t, "False", off, "KV events are published only to a router; no spec.router")
    if off is not None:
        return _cond(t, "False", off, f"{ctx.md.spec.engine.name} renders no KV-event publisher")
    producers = [r for r in renders if r.role.kind in KV_EVENT_PRODUCER_KINDS]
    unmanaged = [r.role.name for r in producers if r.unmanaged]
    if unmanaged:
        return _cond(t, "Unknown", vocab.REASON_ROLE_UNMANAGED,
                     f"role(s) {', '.join(unmanaged)} took over the command line; no publisher was rendered there")
    if not producers:
        return _cond(t, "True", vocab.REASON_NOT_APPLICABLE, "no role produces cache blocks")
    return _cond(t, "True", vocab.REASON_PUBLISHING,
                 f"publisher configured on role(s) {', '.join(r.role.name for r in producers)}")


def weights_ready(ctx: DeploymentContext) -> ConditionValue:
    t = vocab.COND_WEIGHTS_READY
    if ctx.artifact is None:
        return _cond(t, "True", vocab.REASON_NOT_APPLICABLE, "no model.artifactRef")
    return _cond(t, "True" if ctx.artifact.ready else "False", ctx.artifact.reason,
                 ctx.artifact.message + ("" if ctx.artifact.ready else "; no Pod is created until it resolves"))


def merge_conditions(
    values: list[ConditionValue], previous: list[dict[str, Any]], generation: int | None, now: str
) -> list[dict[str, Any]]:
    """Conditions with lastTransitionTime carried over while the status is unchanged."""
    old = {c.get("type"): c for c in previous if isinstance(c, dict)}
    out = []
    for value in values:
        prior = old.get(value.type)
        moved = prior is None or prior.get("status") != value.status or not prior.get("lastTransitionTime")
        cond: dict[str, Any] = {
            "type": value.type,
            "status": value.status,
            "reason": value.reason,
            "message": value.message,
            # Not moved implies a prior condition (`moved` is true when there is none).
            "lastTransitionTime": now if moved else prior["lastTransitionTime"],  # type: ignore[index]
        }
        if generation is not None:
            cond["observedGeneration"] = generation
        out.append(cond)
    return out


def role_summary(ready_by_kind: dict[str, int], router_ready: int | None) -> str:
    parts = []
    if router_ready is not None:
        parts.append(f"{router_ready}{vocab.ROUTER_LETTER}")
    for kind in vocab.ROLE_KINDS:
        if kind in ready_by_kind:
            parts.append(f"{ready_by_kind[kind]}{vocab.ROLE_KIND_LETTER[kind]}")
    return "".join(parts)


def router_endpoint(ctx: DeploymentContext) -> str:
    """The router Service's URL."""
    return f"http://{names.router(ctx.name)}.{ctx.namespace}.svc:{vocab.ROUTER_PORT}"


def endpoint(ctx: DeploymentContext, renders: list[RoleRender]) -> str | None:
    """The router Service when a router exists, else the first Server role's (or the first role's)."""
    if ctx.md.spec.router is not None:
        return router_endpoint(ctx)
    if not renders:
        return None
    front = next((r for r in renders if r.role.kind == vocab.ROLE_KIND_SERVER), renders[0])
    return f"http://{names.role_service(ctx.name, front.role.name)}.{ctx.namespace}.svc:{front.ports.service}"


def router_observed_ready(ctx: DeploymentContext, children: ObservedGroups) -> int | None:
    """Ready router Pods per the observed Deployment; None when it does not exist yet."""
    deployments = children.get(vocab.CHILD_DEPLOYMENTS) or {}
    observed = deployments.get(f"{ctx.namespace}/{names.router(ctx.name)}")
    if not isinstance(observed, dict):
        return None
    return int((observed.get("status") or {}).get("readyReplicas") or 0)


def router_ready(router: RouterSpec | None, observed_ready: int | None) -> ConditionValue:
    """RouterReady: not applicable without a router this pass, else from its observed Deployment."""
    t = vocab.COND_ROUTER_READY
    if router is None:
        return _cond(t, "True", vocab.REASON_NOT_APPLICABLE, "no spec.router")
    if observed_ready is None:
        return _cond(t, "Unknown", vocab.REASON_NOT_DEPLOYED, f"{router.name} Deployment not observed yet")
    if observed_ready == 0:
        return _cond(t, "False", vocab.REASON_NO_READY_REPLICAS, f"0 of {router.replicas} {router.name} replicas are Ready")
    return _cond(t, "True", vocab.REASON_ROUTER_READY,
                 f"{observed_ready} of {router.replicas} {router.name} replicas are Ready")


def _lost_instances(md: ModelDeployment, ready_by_role: dict[str, int]) -> list[str]:
    """Roles with fewer Ready replicas than the last status reported (capped by what is declared now)."""
    lost = []
    for previous in (md.status or {}).get("roles") or []:
        if not isinstance(previous, dict) or previous.get("name") not in ready_by_role:
            continue
        role = md.role(previous["name"])
        was = min(int(previous.get("ready") or 0), role.replicas if role else 0)
        if ready_by_role[previous["name"]] < was:
            lost.append(previous["name"])
    return lost


def parked(md: ModelDeployment) -> bool:
    """Every role declares 0 replicas (docs/scale-to-zero.md#zero-replicas): no Pods, no Workloads."""
    return all(role.replicas == 0 for role in md.spec.roles)


PARKED_MESSAGE = ("every role declares 0 replicas: no Pods and no Kueue Workloads (quota released); a request to the "
                  "endpoint wakes it when a ModelDeploymentScaler with scaleToZero governs it, or set replicas")


def ready(phase: str, phase_message: str) -> ConditionValue:
    """Ready: True when every declared replica is Ready, False ScaledToZero while parked."""
    t = vocab.COND_READY
    if phase == vocab.PHASE_READY:
        return _cond(t, "True", vocab.REASON_READY, phase_message)
    if phase == vocab.PHASE_IDLE:
        return _cond(t, "False", vocab.REASON_SCALED_TO_ZERO, PARKED_MESSAGE)
    return _cond(t, "False", vocab.REASON_NOT_READY, phase_message)


def _phase(md: ModelDeployment, finalizing: bool, all_ready: bool, ready_by_role: dict[str, int]) -> tuple[str, str]:
    """Degraded means a role lost Ready instances (and stays so until all are back); a scale-up of a
    Ready deployment is Starting its new replicas, not Degraded. Every role at 0 is Idle (parked)."""
    if finalizing or md.metadata.deletion_timestamp:
        return vocab.PHASE_DELETING, "the deployment is being deleted"
    if parked(md):
        return vocab.PHASE_IDLE, PARKED_MESSAGE
    if all_ready:
        return vocab.PHASE_READY, "every declared replica is Ready"
    if _lost_instances(md, ready_by_role) or (md.status or {}).get("phase") == vocab.PHASE_DEGRADED:
        # One message for both ways in, or the second pass would rewrite status (a hot loop).
        short = [r.name for r in md.spec.roles if ready_by_role.get(r.name, 0) < r.replicas]
        return vocab.PHASE_DEGRADED, f"role(s) {', '.join(short)} have fewer Ready replicas than declared"
    return vocab.PHASE_STARTING, "replicas are starting"


def role_status(ctx: DeploymentContext, render: RoleRender, plan: RolePlan,
                stages: replica_stages.RoleStages | None = None) -> dict[str, Any]:
    """One `status.roles[]` entry: the declared replicas' counts, the render's plain facts, the
    KV-event endpoints of a publishing role, and its not-Ready replicas (docs/status.md#replica-stages)."""
    declared = [p for p in plan.ordinals if p.action != Action.SHED and p.ordinal < render.role.replicas]
    entry: dict[str, Any] = {
        "name": render.role.name,
        "kind": render.role.kind,
        "desired": render.role.replicas,
        "ready": sum(1 for p in declared if p.ready),
        "quotaReserved": sum(1 for p in declared if p.reserved),
        "admitted": sum(1 for p in declared if p.admitted),
        "unmanaged": render.unmanaged,
        "image": render.image,
    }
    if render.kv_events:
        service = names.role_service(ctx.name, render.role.name)
        entry["kvEventsEndpoints"] = [f"tcp://{service}:{vocab.KV_EVENTS_PORT}",
                                      f"tcp://{service}:{vocab.KV_EVENTS_REPLAY_PORT}"]
        entry["kvEventsTopic"] = "kv@"
    if plan.next_incarnations:
        entry["nextIncarnations"] = plan.next_incarnations
    if stages is not None:
        entry.update(replica_stages.wire(stages))
    return entry


def kv_cache_status(ctx: DeploymentContext) -> dict[str, Any] | None:
    """`status.kvCache`: the binding, its pool and its reuse domain (None without spec.kvCache)."""
    if ctx.attachment is None:
        return None
    kv: dict[str, Any] = {"binding": ctx.attachment.binding}
    if ctx.attachment.pool:
        kv["pool"] = ctx.attachment.pool
    if ctx.attachment.domain is not None:
        kv["domain"] = ctx.attachment.domain.wire()
    return kv


def conditions(ctx: DeploymentContext, renders: list[RoleRender], plans: list[RolePlan], *,
               router: RouterSpec | None, observed_router: int | None, total_ready: int,
               ready_by_kind: dict[str, int]) -> list[ConditionValue]:
    """Every condition of the pass, in status order."""
    return [
        domain_registered(ctx),
        quota_reserved(ctx, plans),
        cache_attached(ctx, renders, total_ready),
        replicas_up_to_date(plans),
        role_kinds_ready(ready_by_kind),
        kv_events_publishing(ctx, renders),
        router_ready(router, observed_router),
        weights_ready(ctx),
    ]


def build_status(ctx: DeploymentContext, renders: list[RoleRender], plans: list[RolePlan],
                 children: ObservedGroups, *, finalizing: bool, now: str, stall_note: str = "",
                 stages: list[replica_stages.RoleStages] | None = None) -> KubeObject:
    """The status from this pass's renders and plans and the observed children (the router's
    Deployment). A finalizing pass renders no router, so it reports none. `stall_note` (a replica
    Kueue admitted and never placed, app/control/stalls.py) is added to the phase message of a
    deployment that is not Ready; `stages` (app/control/stages.py), per role, its not-Ready replicas."""
    router = None if finalizing else ctx.md.spec.router
    observed_router = router_observed_ready(ctx, children) if router is not None else None
    ready_routers = None if router is None else observed_router or 0
    per_role = stages if stages is not None else [None] * len(plans)
    role_statuses = [role_status(ctx, render, plan, role_stages)
                     for render, plan, role_stages in zip(renders, plans, per_role)]
    ready_by_kind: dict[str, int] = {}
    for entry in role_statuses:
        ready_by_kind[entry["kind"]] = ready_by_kind.get(entry["kind"], 0) + entry["ready"]
    all_ready = all(entry["ready"] == entry["desired"] for entry in role_statuses)
    if ready_routers is not None:
        all_ready = all_ready and ready_routers >= 1
    ready_by_role = {r["name"]: r["ready"] for r in role_statuses}
    phase, phase_message = _phase(ctx.md, finalizing, all_ready, ready_by_role)
    if stall_note and phase != vocab.PHASE_READY:
        phase_message = f"{phase_message}; {stall_note}"
    values = conditions(ctx, renders, plans, router=router, observed_router=observed_router,
                        total_ready=sum(r["ready"] for r in role_statuses), ready_by_kind=ready_by_kind)
    values.append(ready(phase, phase_message))
    previous = (ctx.md.status or {}).get("conditions") or []
    out: dict[str, Any] = {
        "phase": phase,
        "phaseMessage": phase_message,
        "roleSummary": role_summary(ready_by_kind, ready_routers),
        "roles": role_statuses,
        "conditions": merge_conditions(values, previous, ctx.md.metadata.generation, now),
    }
    url = endpoint(ctx, renders)
    if url:
        out["endpoint"] = url
    kv = kv_cache_status(ctx)
    if kv is not None:
        out["kvCache"] = kv
    if router is not None:
        out["router"] = {"name": router.name, "desired": router.replicas, "ready": ready_routers,
                         "endpoint": router_endpoint(ctx)}
    return out


# --- settling (docs/status.md#settling) -----------------------------------------------------------

# Progress within a transition (counts, replica stages, condition words) is written at most this
# long after the last write; anything else at once. No reader of progress acts faster
# (docs/status.md#settling).
SETTLE_SECONDS = 15.0

# Keys of a written status the settle window never compares: Metacontroller's, and the render record
# stamped after it (app/control/skew.py renews it only with a status written anyway).
_UNCOMPARED = ("observedGeneration", "newestRender")
# Per role, what moves as replicas pass through their stages (their own record: notReady).
_ROLE_PROGRESS = ("ready", "quotaReserved", "admitted", "notReady", "notReadyUnlisted")


def _role_standing(role: Any) -> Any:
    """A role entry without its progress; what stays of notReady is what a later pass reads back
    (Kueue's eviction words) and which replicas are Failing."""
    if not isinstance(role, dict):
        return role
    out = {k: v for k, v in role.items() if k not in _ROLE_PROGRESS}
    items = [item for item in role.get("notReady") or [] if isinstance(item, dict)]
    out["failing"] = sorted(str(item.get("ordinal")) for item in items if item.get("stage") == vocab.STAGE_FAILING)
    out["evictions"] = sorted((str(item.get("ordinal")), words) for item in items
                              if (words := replica_stages.eviction_words(item)) is not None)
    return out


# A condition's words always settle; its status (and lastTransitionTime) too, but Ready's, which
# the phase carries and `kubectl wait --for=condition=Ready` reads (docs/status.md#settling).
_CONDITION_PROGRESS = ("reason", "message")
_CONDITION_STATUS = ("status", "lastTransitionTime")


def _condition_standing(condition: Any) -> Any:
    if not isinstance(condition, dict):
        return condition
    progress = _CONDITION_PROGRESS if condition.get("type") == vocab.COND_READY else \
        _CONDITION_PROGRESS + _CONDITION_STATUS
    return {k: v for k, v in condition.items() if k not in progress}


def standing(written: KubeObject) -> KubeObject:
    """What a status says that must be written at once: everything but the progress within a
    transition (the phase message and role summary, the per-role counts and replica stages, the
    router's ready count, a condition's reason and message), and whether the counts make it serve."""
    out = {k: v for k, v in written.items() if k not in ("phaseMessage", "roleSummary", *_UNCOMPARED)}
    # Whether it serves, as the endpoint switch and the activator read it from the counts.
    out["serving"] = serving(written)
    if isinstance(written.get("roles"), list):
        out["roles"] = [_role_standing(role) for role in written["roles"]]
    if isinstance(written.get("conditions"), list):
        out["conditions"] = [_condition_standing(c) for c in written["conditions"]]
    if isinstance(written.get("router"), dict):
        out["router"] = {k: v for k, v in written["router"].items() if k != "ready"}
    return out


def settle(last: KubeObject | None, fresh: KubeObject, now: str,
           window: float = SETTLE_SECONDS) -> tuple[KubeObject, float | None]:
    """The status to answer and, when it holds progress back, the seconds until the pass that writes
    it. `last` is the status Metacontroller stored (the parent's), `fresh` this pass's without its
    newestRender. Fresh unless every difference is progress within a transition and the last write
    (its newestRender.renewedAt) is younger than `window`: then the last written status as it was,
    equal to this pass's in every part the planner reads back (those are never progress), but the
    replica stages' `since` and the Ready counts behind Degraded, which a later pass reads as the
    status last reported them."""
    if not isinstance(last, dict):
        return fresh, None
    written = {k: v for k, v in last.items() if k not in _UNCOMPARED}
    if written == fresh:
        return fresh, None
    record = last.get("newestRender")
    stamp = record.get("renewedAt") if isinstance(record, dict) else None
    then, at = timestamps.parse(stamp if isinstance(stamp, str) else None), timestamps.parse(now)
    age = None if then is None or at is None else (at - then).total_seconds()
    if age is None or not 0.0 <= age < window or standing(written) != standing(fresh):
        return fresh, None
    return copy.deepcopy(written), max(1.0, window - age)
