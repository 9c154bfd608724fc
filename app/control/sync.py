"""The sync, finalize and customize logic: pure functions of the hook request.

Handlers (app.web.hooks) parse the request, call these, hand the intents to the executor and
answer. Nothing here performs I/O or reads a clock: `now` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from app import vocab
from app.api.hooks import HookRequest
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment, Role
from app.control import endpoint, gang, skew, stages, stalls, status, teardown
from app.control import observed as obs
from app.control import bounds
from app.control.bounds import too_many_pods
from app.control.intents import Intent, RecordEvent, warning_event
from app.control.rollout import Action, RolePlan, plan_role
from app.engines.owned import owned_env_names
from app.model.context import DeploymentContext, RenderOptions, build_context
from app.render import labels, names, tenant
from app.render.errors import RenderError
from app.render.revision import effective_revision
from app.render.pod import Ports, RoleRender, render_role
from app.render.router import render_router
from app.render.services import role_services
from app.world import World

# Come back while something waits on time rather than on a watched object.
RESYNC_WAITING_SECONDS = 30.0


@dataclass(frozen=True)
class SyncSettings:
    options: RenderOptions = RenderOptions()
    gang_release_after_seconds: float = 600.0
    max_pods_per_deployment: int = vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT
    # The activator's Pods, for the endpoint switch (docs/scale-to-zero.md#the-endpoint-switch).
    activator: endpoint.ActivatorAddresses = field(default_factory=endpoint.ActivatorAddresses)
    # A replica this long in one non-Ready stage gets one ReplicaStuck Warning (docs/status.md#events).
    replica_stuck_after_seconds: float = vocab.DEFAULT_REPLICA_STUCK_SECONDS


@dataclass
class SyncResult:
    status: KubeObject
    children: list[KubeObject]
    intents: list[Intent] = field(default_factory=list)
    resync_after: float | None = None
    finalized: bool | None = None
    # The joint set reached its release bound: the handler lists the other holders and passes them
    # in (`reconcile(..., peers=...)`); this result stands only when none can be listed.
    needs_peers: bool = False
    # Each role's plan, for a reader of what the pass decided (`modeldeployment plan`).
    plans: list[RolePlan] = field(default_factory=list)


@dataclass(frozen=True)
class Refusal:
    """A pass that cannot build a replica: nothing is answered (children and status stay as they
    are), `events` say why (a RenderFailed Warning among them), and the pass is retried soon when
    `retryable` (the cause may resolve by itself), later when it needs a spec edit
    (docs/metacontroller.md#errors-and-retries)."""

    message: str
    retryable: bool
    events: list[Intent]


def _teardown_render(role: Role, failure: RenderError) -> RoleRender:
    """A role a finalizing pass cannot render (its InstanceType deleted or malformed): nothing of it
    is created again, so its Pods and Workloads are torn down by ordinal alone and a broken
    InstanceType never wedges the finalizer (docs/metacontroller.md#finalize)."""
    port = vocab.DEFAULT_SERVING_PORT
    return RoleRender(role=role, image="", fingerprint="", ports=Ports(port, port, None, port), template={},
                      hold=f"not rendered while the deployment is deleted: {failure}")


def _render_roles(ctx: DeploymentContext, *,
                  finalizing: bool = False) -> tuple[list[RoleRender], list[Intent]] | Refusal:
    renders: list[RoleRender] = []
    events: list[Intent] = []
    failures: list[RenderError] = []
    for role in ctx.md.spec.roles:
        try:
            render = render_role(ctx, role)
        except RenderError as exc:
            if finalizing:
                renders.append(_teardown_render(role, exc))
                continue
            failures.append(exc)
            continue
        renders.append(render)
    skewed: dict[str, list[RoleRender]] = {}
    for render in renders:
        if render.skipped_runtime_versions:
            skewed.setdefault(render.role.instance_type, []).append(render)
    events.extend(_skew_event(ctx, group) for group in skewed.values())
    events.extend(_tenant_key_event(ctx, render) for render in renders if render.tenant_keys_ignored)
    if failures:
        message = "; ".join(str(f) for f in failures)
        return Refusal(message, retryable=all(f.retryable for f in failures),
                       events=[*events, warning_event(ctx.md.metadata, vocab.EVENT_RENDER_FAILED, message)])
    return renders, events


def _skew_event(ctx: DeploymentContext, group: list[RoleRender]) -> RecordEvent:
    """One event per InstanceType whose pool disagrees on its runtime version."""
    first = group[0]
    skipped = ", ".join(first.skipped_runtime_versions)
    roles = ", ".join(r.role.name for r in group)
    message = (f"InstanceType {first.role.instance_type} reports runtime versions {first.runtime_version}, {skipped}: "
               f"role(s) {roles} use the lowest, {first.runtime_version}, the only one every node of the pool runs "
               f"(skipped: {skipped}); the nodes reporting {first.runtime_version} hold the pool back")
    return warning_event(ctx.md.metadata, vocab.EVENT_RUNTIME_VERSION_SKEW, message)


def admitted_tenant_env(engine: str, env_names: Iterable[str]) -> list[str]:
    """The tenant-bearing variables among `env_names` that the webhook admits on `engine`: the render
    drops them (app.render.tenant) though the engine does not own them (app.engines.owned), e.g.
    MOONCAKE_TENANT_ID on vLLM, MOONCAKE_CONFIG_PATH on SGLang (docs/operations.md#what-each-port-trusts)."""
    bearing = tenant.tenant_env(engine)
    owned = owned_env_names(engine)
    return [name for name in env_names if name in bearing and name not in owned]


def _tenant_key_event(ctx: DeploymentContext, render: RoleRender) -> RecordEvent:
    """A stored role carried tenant-bearing keys of its own: the operator's values were rendered.
    The message says, per key, what the webhook does with it: it refuses every owned key (and every
    mount at the client configuration) on the deployment's next update, but admits a variable the
    engine does not own, which the render then drops on every sync."""
    engine = ctx.md.spec.engine.name
    admitted = set(admitted_tenant_env(engine, (e.name for e in render.role.env)))
    let_in = [k for k in render.tenant_keys_ignored if k.startswith("env[") and k.rsplit(" ", 1)[-1] in admitted]
    refused = [k for k in render.tenant_keys_ignored if k not in let_in]
    fates = []
    if refused:
        fates.append(f"the webhook refuses {'; '.join(refused)} on the deployment's next update, whatever it changes")
    if let_in:
        fates.append(f"the webhook admits {'; '.join(let_in)} (not an operator-owned variable on {engine}), so the "
                     "operator drops it from every render for as long as the role carries it")
    keys = "; ".join(render.tenant_keys_ignored)
    message = (f"roles[{render.role.name}]: ignored {keys}: the KV cache tenant and its client configuration are "
               "the operator's (from the KVCachePoolBinding), so the operator's values were rendered — remove "
               f"these from the role ({'; '.join(fates)})")
    return warning_event(ctx.md.metadata, vocab.EVENT_TENANT_KEY_IGNORED, message)


def _pod_bound(md: ModelDeployment, bound: int) -> Refusal | None:
    """The Pod bound for objects stored before it: refuse the pass (429 + RenderFailed), never render
    them (docs/admission.md#the-rules, rule 21)."""
    problem = too_many_pods(md, bound)
    if problem is None:
        return None
    problem = f"spec.roles: {problem} — {bounds.REMEDY}"
    return Refusal(problem, retryable=False, events=[warning_event(md.metadata, vocab.EVENT_RENDER_FAILED, problem)])


def _services(ctx: DeploymentContext, render: RoleRender, plan: RolePlan) -> list[KubeObject]:
    """The role's Services for the ordinals the plan keeps (which ones it has: app.render.services)."""
    kept = (e.ordinal for e in plan.ordinals if e.action != Action.SHED and e.ordinal < render.role.replicas)
    return role_services(ctx, render, kept)


def reconcile(request: HookRequest, settings: SyncSettings, *, now: str,
              peers: list[gang.Holder] | None = None) -> SyncResult | Refusal:
    """One pass of sync (or finalize when `request.finalizing`): what to answer and do, or why not.
    `peers`: every deployment's joint admission holding record, when the handler listed them
    (docs/kueue.md#deadlock-release)."""
    md = request.deployment
    finalizing = request.finalizing
    bound = None if finalizing else _pod_bound(md, settings.max_pods_per_deployment)
    if bound is not None:  # (a teardown creates no Pod: never wedge a finalizer on the bound)
        return bound
    world = World.from_related(request.related)
    ctx = build_context(md, world, settings.options)
    rendered = _render_roles(ctx, finalizing=finalizing)
    if isinstance(rendered, Refusal):
        return rendered
    renders, intents = rendered
    observed_pods = obs.pods_by_role(ctx.name, request.children.get(vocab.CHILD_PODS))
    deferring = not finalizing and _defer_to_newer(ctx, renders, now)

    plans: list[RolePlan] = []
    children: list[KubeObject] = []
    for render in renders:
        plan = plan_role(ctx, render, observed_pods.get(render.role.name, {}), finalizing=finalizing)
        plans.append(plan)
        intents.extend(plan.intents)
        children.extend(plan.pods())
        if not finalizing:
            children.extend(_services(ctx, render, plan))
    # Pods of roles no longer declared (cannot happen through admission, but never leak them).
    intents.extend(teardown.orphan_workload_deletes(ctx, observed_pods, {r.role.name for r in renders}))

    ungate_stalls: list[stalls.UngateStall] = []
    joint = gang.GangDecision()
    replica_stages = [stages.role_stages(ctx, plan, observed_pods.get(plan.role, {}), now=now) for plan in plans]
    if not finalizing:
        intents.extend(stages.stuck_events(ctx, replica_stages, now=now,
                                           after_seconds=settings.replica_stuck_after_seconds))
        children.extend(render_router(ctx, renders))
        joint = gang.decide(ctx, plans, now=now, release_after_seconds=settings.gang_release_after_seconds,
                            peers=peers)
        intents.extend(joint.intents)
        ungate_stalls = stalls.ungate_stalls(ctx, plans, observed_pods, now=now)
        intents.extend(stalls.events(ctx, ungate_stalls))

    result_status = status.build_status(ctx, renders, plans, request.children, finalizing=finalizing, now=now,
                                        stall_note=stalls.phase_note(ctx, ungate_stalls), stages=replica_stages)
    if joint.record is not None:
        result_status["jointAdmission"] = joint.record
    release_after = None if finalizing else endpoint.switch(md, children, result_status, settings.activator)
    if deferring:
        children = skew.as_newer_applied(children, request.children)
    result_status, settle_after = _written_status(ctx, result_status, now)
    result = SyncResult(status=result_status, children=children, intents=intents,
                        resync_after=settle_after if finalizing else _soonest(_resync_after(plans, joint),
                                                                              release_after, settle_after),
                        needs_peers=joint.needs_peers, plans=plans)
    if finalizing:
        _finish_teardown(ctx, request, plans, observed_pods, result)
    return result


def _finish_teardown(ctx: DeploymentContext, request: HookRequest, plans: list[RolePlan],
                     observed_pods: dict[str, dict[int, obs.ObservedInstance]], result: SyncResult) -> None:
    """A finalize pass: done once every Pod and router Pod is gone (docs/metacontroller.md#finalize)."""
    router_pods = teardown.router_pods_left(request.related)
    if router_pods:
        result.children.extend(teardown.router_held_empty(ctx, request.children))
    result.finalized = teardown.finalized(ctx, plans, observed_pods, router_pods)
    result.resync_after = None if result.finalized else _soonest(RESYNC_WAITING_SECONDS, result.resync_after)


def _defer_to_newer(ctx: DeploymentContext, renders: list[RoleRender], now: str) -> bool:
    """docs/operations.md#upgrading-the-operator: while a newer operator answers this deployment's
    passes, this one holds new replicas of every role (the newer one creates and turns over) and
    answers its other children as the newer one applied them. True while deferring."""
    own = effective_revision(ctx.options.render_rehearsal)
    newer = skew.defers_to((ctx.md.status or {}).get("newestRender"), own, now)
    if newer is not None:
        for render in renders:
            render.hold = render.hold or skew.hold(newer, own)
    return newer is not None


def _written_status(ctx: DeploymentContext, fresh: KubeObject, now: str) -> tuple[KubeObject, float | None]:
    """The status a sync pass answers, with its newestRender, and when to come back for the progress
    it holds back (docs/status.md#settling): this pass's, or the last written one while only
    progress moved within the settle window."""
    answer, settle_after = status.settle(ctx.md.status, fresh, now)
    answer["newestRender"] = _newest_render(ctx, answer, now)
    return answer, settle_after


def _newest_render(ctx: DeploymentContext, written: KubeObject, now: str) -> dict[str, Any]:
    """status.newestRender for the status this pass writes (app/control/skew.py)."""
    previous = dict(ctx.md.status or {})
    last = previous.pop("newestRender", None)
    previous.pop("observedGeneration", None)
    return skew.record(last, effective_revision(ctx.options.render_rehearsal), now, changed=previous != written)


def _soonest(*after: float | None) -> float | None:
    waits = [a for a in after if a is not None]
    return min(waits) if waits else None


def _resync_after(plans: list[RolePlan], joint: gang.GangDecision) -> float | None:
    """When to come back unasked (docs/metacontroller.md#responses): only while the pass waits on
    time. A held replica (its hold names no watched object) every RESYNC_WAITING_SECONDS; a joint
    set's partial reservation reaching its bound, its back-off ending, or the set it waits on to yield
    reaching its own bound (at most that period, at least a second).
    A wait on Kueue (a reservation, an admission) or on a Workload going needs none: the watched
    Workload's change brings the next pass, as it does for any hook. Nor does a replica Kueue has
    not placed yet: it is placed within a second, and a stall is named by the periodic resync
    (docs/kueue.md#an-admitted-replica-kueue-never-places), not by a pass asked for every replica."""
    waiting = any(p.action == Action.WAIT for plan in plans for p in plan.ordinals)
    until = joint.wait
    if until is None:
        return RESYNC_WAITING_SECONDS if waiting else None
    return min(RESYNC_WAITING_SECONDS, max(1.0, until))


def customize(md: ModelDeployment) -> dict[str, Any]:
    """Related objects Metacontroller should watch and hand to sync (docs/metacontroller.md#customize)."""
    namespace = md.metadata.namespace
    rules: list[dict[str, Any]] = [{
        "apiVersion": vocab.API_VERSION,
        "resource": vocab.PLURAL_INSTANCE_TYPES,
        "names": sorted({r.instance_type for r in md.spec.roles}),
    }]
    if md.spec.kv_cache is not None:
        rules.append({"apiVersion": vocab.API_VERSION, "resource": vocab.PLURAL_KV_CACHE_POOL_BINDINGS,
                      "namespace": namespace, "names": [md.spec.kv_cache.pool_ref.name]})
        # The pool and backend names live in the Binding, which customize cannot read: watch them all
        # (cluster-scoped and few).
        rules.append({"apiVersion": vocab.API_VERSION, "resource": vocab.PLURAL_KV_CACHE_POOLS,
                      "labelSelector": {"matchLabels": {}}})
        rules.append({"apiVersion": vocab.API_VERSION, "resource": vocab.PLURAL_KV_CACHE_BACKENDS,
                      "labelSelector": {"matchLabels": {}}})
    if md.spec.model.artifact_ref is not None:
        rules.append({"apiVersion": vocab.API_VERSION, "resource": vocab.PLURAL_MODEL_ARTIFACTS,
                      "namespace": namespace, "names": [md.spec.model.artifact_ref.name]})
    groups = [group for role in md.spec.roles for ordinal in range(role.replicas)
              for group in names.pod_groups(namespace, md.metadata.name, role.name, ordinal)]
    rules.append({"apiVersion": vocab.KUEUE_API_VERSION, "resource": vocab.PLURAL_WORKLOADS,
                  "namespace": namespace, "names": groups})
    # Its router Pods, whatever spec.router says now: a finalize waits for them (teardown).
    rules.append({"apiVersion": vocab.CORE_API_VERSION, "resource": vocab.PLURAL_PODS, "namespace": namespace,
                  "labelSelector": {"matchLabels": labels.role_selector(md.metadata.name, vocab.ROUTER_COMPONENT)}})
    return {"relatedResources": rules}
