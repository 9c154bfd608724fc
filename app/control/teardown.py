"""What a pass tears down outside the per-ordinal plans, and when a finalize pass is done.

- A role no longer declared (admission freezes the role set, so only a stored object bypassing it
  could have one) still has Pods: the Pods go with the children, and their Workloads are deleted
  here, so nothing of it leaks.
- A finalize pass is done (`finalized`, the finalizer may go) once no Pod of the deployment is
  observed and no Workload of any ordinal the plans know remains (docs/metacontroller.md#finalize).
"""

from __future__ import annotations

from app.control.intents import Intent
from app.control.observed import ObservedInstance
from app.control.rollout import RolePlan, workload_delete
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
            group = names.pod_group(ctx.namespace, ctx.name, role_name, ordinal)
            intents.append(workload_delete(ctx.namespace, group, ctx.world.workload(ctx.namespace, group),
                                           "role no longer declared"))
    return intents


def finalized(ctx: DeploymentContext, plans: list[RolePlan], observed_pods: ObservedPods) -> bool:
    """No Pod left, and no Workload of any planned ordinal."""
    workloads_left = any(
        ctx.world.workload(ctx.namespace, names.pod_group(ctx.namespace, ctx.name, plan.role, p.ordinal)) is not None
        for plan in plans for p in plan.ordinals)
    return not observed_pods and not workloads_left
