"""What the planner remembers between passes, read from the status the last pass wrote
(docs/status.md): per role, the replicas it declared and each ordinal's next incarnation
(docs/kueue.md#rollout-cadence). Pure; every value read is bounded and type-checked."""

from __future__ import annotations

from typing import Any

from app import vocab
from app.control import observed as obs
from app.model.context import DeploymentContext


def previous_role_status(ctx: DeploymentContext, role: str) -> dict[str, Any]:
    """The role's entry in the last written status ({} when there is none)."""
    for entry in (ctx.md.status or {}).get("roles") or []:
        if isinstance(entry, dict) and entry.get("name") == role:
            return entry
    return {}


def previous_desired(ctx: DeploymentContext, role: str) -> int:
    """The replicas the last written status declared for the role (0 when unknown)."""
    desired = previous_role_status(ctx, role).get("desired")
    return min(desired, vocab.MAX_ROLE_REPLICAS) if isinstance(desired, int) and desired > 0 else 0


def previous_incarnations(ctx: DeploymentContext, role: str) -> list[int]:
    """status.roles[].nextIncarnations as the last written status has it (bounded, ints only)."""
    values = previous_role_status(ctx, role).get("nextIncarnations")
    if not isinstance(values, list):
        return []
    return [v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= vocab.MAX_INCARNATION else 0
            for v in values[:vocab.MAX_ROLE_REPLICAS]]


def next_incarnations(previous: list[int], observed: dict[int, obs.ObservedInstance]) -> list[int]:
    """Per ordinal: past every incarnation listed now, never below what status carried."""
    out = list(previous)
    for ordinal, inst in observed.items():
        if ordinal >= vocab.MAX_ROLE_REPLICAS or not inst.pods:
            continue
        out += [0] * (ordinal + 1 - len(out))
        out[ordinal] = max(out[ordinal], min(inst.incarnation() + 1, vocab.MAX_INCARNATION))
    while out and out[-1] == 0:
        out.pop()
    return out
