"""Router objects in front of the roles (spec.router)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.control.status import ConditionValue
from app.render.context import DeploymentContext
from app.render.pod import RoleRender


@dataclass
class RouterRender:
    children: list[dict[str, Any]] = field(default_factory=list)
    ready: int = 0
    status: dict[str, Any] = field(default_factory=dict)
    condition: ConditionValue | None = None


def render_router(ctx: DeploymentContext, renders: list[RoleRender], children: dict[str, Any]) -> RouterRender | None:
    if ctx.md.spec.router is None:
        return None
    raise NotImplementedError
