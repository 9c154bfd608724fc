"""What a pass tears down outside the per-ordinal plans, and when a finalize pass is done.

- A role no longer declared (admission freezes the role set, so only a stored object bypassing it
  could have one) still has Pods: the Pods go with the children, and their Workloads are deleted
  here, so nothing of it leaks.
- A finalize pass is done (`finalized`, the finalizer may go) once no Pod of the deployment is
  observed — its engine Pods (children) and its router Pods (related: they belong to the router's
  ReplicaSet) — and no Workload of any ordinal the plans know remains (docs/metacontroller.md#finalize).
- While router Pods remain, the router Deployment is kept at zero replicas, so its ReplicaSet
  deletes them at once rather than after the garbage collector's three hops; a deployment created
  again under the same name therefore never finds its predecessor's router Pods behind its router
  Service (docs/metacontroller.md#finalize).
"""

from __future__ import annotations

from app import vocab
from app.api.objects import KubeObject, ObservedGroups
from app.control import observed as obs
from app.control.intents import Intent
from app.control.observed import ObservedInstance
from app.control.departures import workload_delete
from app.control.rollout import RolePlan
from app.model.context import DeploymentContext
from app.render import names

ObservedPods = dict[str, dict[int, ObservedInstance]]


def orphan_workload_deletes(ctx: DeploymentContext, observed_pods: ObservedPods,
                            declared: set[str]) -> list[Intent]:
    """The Workload delete of every observed ordinal of a role not in `declared`."""
    intents: list[Intent] = []
    for role_name, by_ordinal in observed_pods.items():
        if role_name in declared:
            continue
        for ordinal in by_ordinal:
            for group in names.pod_groups(ctx.namespace, ctx.name, role_name, ordinal):
                workload = ctx.world.workload(ctx.namespace, group)
                if workload is not None or group == names.pod_group(ctx.namespace, ctx.name, role_name, ordinal):
                    intents.append(workload_delete(ctx.namespace, group, workload, "role no longer declared"))
    return intents


def router_pods_left(related: ObservedGroups) -> list[str]:
    """The names of the deployment's router Pods still on the API server (customize selects
    exactly these)."""
    return sorted(obs.pod_name(pod) for pod in (related.get(vocab.RELATED_PODS) or {}).values() if isinstance(pod, dict))


def router_held_empty(ctx: DeploymentContext, children: ObservedGroups) -> list[KubeObject]:
    """The observed router Deployment, as a child scaled to zero replicas (none if it is gone)."""
    observed = (children.get(vocab.CHILD_DEPLOYMENTS) or {}).get(f"{ctx.namespace}/{names.router(ctx.name)}")
    if not isinstance(observed, dict) or not isinstance(observed.get("spec"), dict):
        return []
    held = obs.as_child(observed)
    held["spec"] = {**observed["spec"], "replicas": 0}
    return [held]


def finalized(ctx: DeploymentContext, plans: list[RolePlan], observed_pods: ObservedPods,
              router_pods: list[str]) -> bool:
    """No engine or router Pod left, and no Workload of any planned ordinal."""
    workloads_left = any(
        ctx.world.workload(ctx.namespace, group) is not None
        for plan in plans for p in plan.ordinals for group in names.pod_groups(ctx.namespace, ctx.name, plan.role, p.ordinal))
    return not observed_pods and not router_pods and not workloads_left
