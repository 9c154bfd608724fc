"""Rule 21 (docs/admission.md#the-rules): the cost of one deployment is bounded, at admission and in sync.

One sync renders, plans and answers every Pod of a deployment in one request; its time and memory
grow with the total Pods (Σ replicas × size). The bound, MODELDEPLOYMENT_MAX_PODS_PER_DEPLOYMENT
(default 2,048), keeps one sync within the operator Pod's memory (bench/bound.py measures it).
"""

from __future__ import annotations

from app import vocab
from app.api.v1 import ModelDeployment


def total_pods(md: ModelDeployment) -> int:
    return sum(role.replicas * role.size for role in md.spec.roles)


REMEDY = "split the roles' replicas across several deployments, or lower replicas or size"


def too_many_pods(md: ModelDeployment, bound: int) -> str | None:
    """What is wrong when the deployment declares more Pods than the bound (None when it does not)."""
    total = total_pods(md)
    if total <= bound:
        return None
    terms = " + ".join(f"{role.name} {role.replicas}×{role.size}" for role in md.spec.roles)
    return (f"{total} Pods are declared ({terms}); one deployment holds at most {bound} "
            f"({vocab.SETTING_MAX_PODS_PER_DEPLOYMENT}) so that one sync fits the operator's memory")
