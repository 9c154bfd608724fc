"""The router in front of the roles (`spec.router`): Deployment, Service, ConfigMap, RBAC.

What differs by router (its containers, ports, probes, config documents, the RBAC rules it needs,
its default image) is its entry's (app/engines/router_entry.py; llm-d-router in
app/engines/llmd.py, vllm-router and sglang-gateway in app/engines/gateways.py, read from source:
docs/research/routers.md). This module looks the entry up, hands it the roles as plain
`RouterInputs` and wraps the Pod it returns in the objects every router has.

Removing `spec.router` drops these children from the sync response, so Metacontroller prunes them.
"""

from __future__ import annotations

import hashlib
from typing import Any

from app import vocab
from app.api.objects import KubeObject
from app.engines.registry import router_for
from app.engines.router_entry import RouterInputs, Upstream
from app.model.context import DeploymentContext
from app.render import labels, names
from app.render.pod import RoleRender


def default_image(ctx: DeploymentContext) -> str:
    """spec.router.image, else the operator's setting, else the router's own default."""
    router = ctx.md.spec.router
    assert router is not None
    if router.image:
        return router.image
    if ctx.options.router_image:
        return ctx.options.router_image
    return router_for(router.name).default_image


def router_inputs(ctx: DeploymentContext, renders: list[RoleRender]) -> RouterInputs:
    """What the router's Pod is rendered from: every role's leaders, port and instance addresses."""

    def instance_host(role: str, ordinal: int) -> str:
        return f"{names.instance(ctx.name, role, ordinal)}.{ctx.namespace}.svc"

    return RouterInputs(
        ctx=ctx,
        image=default_image(ctx),
        upstreams=tuple(Upstream(r.role, r.ports.container) for r in renders),
        leaders={**labels.deployment_selector(ctx.name), vocab.LABEL_MEMBER_INDEX: "0"},
        instance_host=instance_host,
    )


def _objects(ctx: DeploymentContext, containers: list[dict[str, Any]], documents: dict[str, str],
             rules: list[dict[str, Any]]) -> list[KubeObject]:
    router = ctx.md.spec.router
    assert router is not None
    name = names.router(ctx.name)
    meta_labels = labels.common(ctx.name, vocab.ROUTER_COMPONENT)
    selector = labels.role_selector(ctx.name, vocab.ROUTER_COMPONENT)
    pod_annotations: dict[str, str] = {}
    volumes: list[dict[str, Any]] = []
    objects: list[KubeObject] = []
    if documents:
        digest = hashlib.sha256("".join(f"{k}\n{v}" for k, v in sorted(documents.items())).encode()).hexdigest()[:16]
        pod_annotations[vocab.ANNOTATION_ROUTER_CONFIG_HASH] = digest  # a changed document rolls the router Pods
        volumes.append({"name": vocab.ROUTER_CONFIG_VOLUME, "configMap": {"name": name}})
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": ctx.namespace, "labels": meta_labels},
                        "data": documents})
    objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": ctx.namespace, "labels": meta_labels}})
    if rules:
        objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": name, "namespace": ctx.namespace, "labels": meta_labels},
                        "rules": rules})
        objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": {"name": name, "namespace": ctx.namespace, "labels": meta_labels},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.namespace}]})
    template_meta: dict[str, Any] = {"labels": {**meta_labels}}
    if pod_annotations:
        template_meta["annotations"] = pod_annotations
    pod_spec: dict[str, Any] = {"serviceAccountName": name, "containers": containers,
                                "automountServiceAccountToken": bool(rules), "enableServiceLinks": False}
    if volumes:
        pod_spec["volumes"] = volumes
    objects.append({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ctx.namespace, "labels": meta_labels},
        "spec": {"replicas": router.replicas, "selector": {"matchLabels": selector},
                 "template": {"metadata": template_meta, "spec": pod_spec}},
    })
    objects.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ctx.namespace, "labels": meta_labels},
        "spec": {"type": "ClusterIP", "selector": selector,
                 "ports": [{"name": vocab.PORT_NAME_HTTP, "port": vocab.ROUTER_PORT, "targetPort": vocab.PORT_NAME_HTTP,
                            "protocol": "TCP"}]},
    })
    return objects


def render_router(ctx: DeploymentContext, renders: list[RoleRender]) -> list[KubeObject]:
    """The router's children (none without spec.router); its status is app.control.status's."""
    router = ctx.md.spec.router
    if router is None:
        return []
    pod = router_for(router.name).render(router_inputs(ctx, renders))
    return _objects(ctx, pod.containers, pod.documents, pod.rules)
