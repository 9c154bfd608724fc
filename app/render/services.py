"""A role's Services: the role Service in front of its leaders, and a headless Service per
instance where peers or the router must resolve one instance by name (docs/rendering.md#services).
"""

from __future__ import annotations

from typing import Iterable

from app import vocab
from app.api.objects import KubeObject
from app.engines.registry import router_for
from app.model.context import DeploymentContext
from app.render import labels, names
from app.render.pod import RoleRender


def role_service(ctx: DeploymentContext, render: RoleRender) -> KubeObject:
    role = render.role
    ports = [{"name": vocab.PORT_NAME_HTTP, "port": render.ports.service, "targetPort": render.ports.container,
              "protocol": "TCP"}]
    if render.kv_events:
        ports += [
            {"name": "kv-events", "port": vocab.KV_EVENTS_PORT, "targetPort": vocab.KV_EVENTS_PORT, "protocol": "TCP"},
            {"name": "kv-replay", "port": vocab.KV_EVENTS_REPLAY_PORT, "targetPort": vocab.KV_EVENTS_REPLAY_PORT,
             "protocol": "TCP"},
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.role_service(ctx.name, role.name), "namespace": ctx.namespace,
                     "labels": labels.common(ctx.name, role.name)},
        "spec": {"type": "ClusterIP", "selector": labels.leader_selector(ctx.name, role.name), "ports": ports},
    }


def instance_service(ctx: DeploymentContext, render: RoleRender, ordinal: int) -> KubeObject:
    """Headless Service per instance above size 1: peers resolve before any of them is Ready."""
    role = render.role
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.instance(ctx.name, role.name, ordinal), "namespace": ctx.namespace,
                     "labels": {**labels.common(ctx.name, role.name), vocab.LABEL_POD_ORDINAL: str(ordinal)}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels.instance_selector(ctx.name, role.name, ordinal),
            "ports": [{"name": vocab.PORT_NAME_HTTP, "port": render.ports.container,
                       "targetPort": render.ports.container, "protocol": "TCP"}],
        },
    }


def instance_services_rendered(ctx: DeploymentContext, render: RoleRender) -> bool:
    """Each instance gets its own headless Service above size 1 (its Pods resolve their leader),
    and a routed pair's Prefill and Decode instances do under a router that lists them statically
    by address (vllm-router's Mooncake P/D: docs/research/routers.md)."""
    if render.role.size > 1:
        return True
    router = ctx.md.spec.router
    return (router is not None and ctx.routed_pair and router_for(router.name).instance_services
            and render.role.kind in (vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE))


def role_services(ctx: DeploymentContext, render: RoleRender, ordinals: Iterable[int]) -> list[KubeObject]:
    """The role Service, then one instance Service per ordinal in `ordinals` when the role's
    instances need their own (`instance_services_rendered`)."""
    services = [role_service(ctx, render)]
    if instance_services_rendered(ctx, render):
        services += [instance_service(ctx, render, ordinal) for ordinal in ordinals]
    return services
