"""The router in front of the roles (`spec.router`): Deployment, Service, ConfigMap, RBAC.

One rendering per router name, each with its own upstream command line (read from source; see
docs/research/routers.md and app/engines/router_flags.py):

- llm-d-router: Envoy + the Endpoint Picker (an ext_proc server) in one Pod; prefill and decode
  leaders found by label selector; cache-aware scoring and the P/D decider in an
  EndpointPickerConfig document; the request timeout is Envoy's route timeout.
- vllm-router: Mooncake P/D works only with statically listed prefillers (discovered ones never
  get their engine id), so a pair is rendered as static per-instance addresses, which the
  per-instance headless Services make resolvable; a Server-only deployment uses discovery.
- sglang-gateway: Kubernetes discovery by prefill/decode selectors; prefill Pods carry the
  bootstrap-port annotation the gateway reads.

Removing `spec.router` drops these children from the sync response, so Metacontroller prunes them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from app import vocab
from app.api.objects import KubeObject
from app.engines import router_flags as rf
from app.model.context import DeploymentContext
from app.render import labels, names
from app.render.pod import RoleRender


def _json_text(document: dict[str, Any]) -> str:
    """A config document as JSON text. The EPP and Envoy read their `.yaml` files with YAML parsers,
    which accept JSON; it costs microseconds to write where PyYAML's representer costs milliseconds
    on every sync.

    orjson writes the same bytes as `json.dumps(indent=2)` for an ASCII document, in a tenth of the
    time (json's indenting encoder is pure Python: half of a typical sync). A document that is not
    ASCII goes through json, which escapes it, so the text (and its hash) never depends on which."""
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    return text if text.isascii() else json.dumps(document, indent=2)


def _pd_renders(renders: list[RoleRender]) -> tuple[list[RoleRender], list[RoleRender]]:
    prefill = [r for r in renders if r.role.kind == vocab.ROLE_KIND_PREFILL]
    decode = [r for r in renders if r.role.kind == vocab.ROLE_KIND_DECODE]
    return prefill, decode


def _kinds_served(ctx: DeploymentContext) -> list[str]:
    """Role kinds the router sends traffic to (by role-kind label value)."""
    if ctx.routed_pair:
        return ["prefill", "decode"]
    return sorted({r.kind_label for r in ctx.md.spec.roles if r.kind == vocab.ROLE_KIND_SERVER}) or ["server"]


def leader_labels(ctx: DeploymentContext, kind: str | None = None) -> dict[str, str]:
    """What identifies a serving leader of this deployment (optionally of one role kind)."""
    out = {**labels.deployment_selector(ctx.name), vocab.LABEL_MEMBER_INDEX: "0"}
    if kind:
        out[vocab.LABEL_ROLE_KIND] = kind
    return out


def _selector_args(flag: str, pairs: dict[str, str]) -> list[str]:
    return [flag, *(f"{k}={v}" for k, v in pairs.items())]


def _target_port(renders: list[RoleRender]) -> int:
    """The port the router dials on every leader (the decoders' routing proxy when present)."""
    return renders[0].ports.container if renders else vocab.ROUTER_PORT


def _timeout(ctx: DeploymentContext) -> int | None:
    return ctx.md.spec.router.request_timeout_seconds if ctx.md.spec.router else None


# --- llm-d-router ------------------------------------------------------------------------------


def llmd_epp_config(ctx: DeploymentContext) -> dict[str, Any]:
    """EndpointPickerConfig: label filters per kind, approximate prefix-cache scoring, the P/D decider."""
    router = ctx.md.spec.router
    assert router is not None
    scorers = [{"pluginRef": rf.LLMD_PLUGIN_PREFIX_SCORER, "weight": 2},
               {"pluginRef": rf.LLMD_PLUGIN_QUEUE_SCORER, "weight": 1},
               {"pluginRef": rf.LLMD_PLUGIN_PICKER}]
    plugins: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    for kind in _kinds_served(ctx):
        plugins.append({"name": f"{kind}-pods", "type": rf.LLMD_PLUGIN_LABEL_FILTER,
                        "parameters": {"matchLabels": {vocab.LABEL_ROLE_KIND: kind}}})
        profiles.append({"name": kind if ctx.routed_pair else "default",
                         "plugins": [{"pluginRef": f"{kind}-pods"}, *scorers]})
    plugins += [{"type": rf.LLMD_PLUGIN_PREFIX_PRODUCER}, {"type": rf.LLMD_PLUGIN_PREFIX_SCORER},
                {"type": rf.LLMD_PLUGIN_QUEUE_SCORER}, {"type": rf.LLMD_PLUGIN_PICKER}]
    if ctx.routed_pair:
        threshold = router.disaggregation_threshold_tokens
        if threshold:
            decider = {"type": rf.LLMD_PLUGIN_PD_DECIDER, "parameters": {rf.LLMD_THRESHOLD_PARAMETER: threshold}}
        else:
            # 0 disables the prefix-based decider (it would never disaggregate): always disaggregate.
            decider = {"type": rf.LLMD_PLUGIN_PD_ALWAYS}
        plugins += [decider, {"type": rf.LLMD_PLUGIN_PD_HANDLER,
                              "parameters": {"deciders": {"prefill": decider["type"]}}}]
    else:
        plugins.append({"type": "single-profile-handler"})
    return {"apiVersion": rf.LLMD_CONFIG_API_VERSION, "kind": rf.LLMD_CONFIG_KIND, "plugins": plugins,
            "schedulingProfiles": profiles}


def llmd_envoy_bootstrap(ctx: DeploymentContext) -> dict[str, Any]:
    """Envoy: the router listener with ext_proc to the EPP, routed to the endpoint it picks."""
    timeout = _timeout(ctx)
    route_timeout = f"{timeout}s" if timeout else "0s"
    http_filters = [
        {"name": "envoy.filters.http.ext_proc", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "ext_proc"}, "timeout": "10s"},
            "failure_mode_allow": False,
            "message_timeout": "1000s",
            "processing_mode": {"request_header_mode": "SEND", "response_header_mode": "SEND",
                                "request_body_mode": "FULL_DUPLEX_STREAMED",
                                "response_body_mode": "FULL_DUPLEX_STREAMED",
                                "request_trailer_mode": "SEND", "response_trailer_mode": "SEND"},
        }},
        {"name": "envoy.filters.http.router",
         "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
    ]
    router_listener = {
        "name": "router",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": vocab.ROUTER_PORT}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "router",
            "stream_idle_timeout": route_timeout,
            "route_config": {"name": "router", "virtual_hosts": [{
                "name": "engines", "domains": ["*"],
                "routes": [{"match": {"prefix": "/"},
                            "route": {"cluster": "original_destination", "timeout": route_timeout}}]}]},
            "http_filters": http_filters,
        }}]}],
    }
    ready_listener = {
        "name": "ready",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": rf.LLMD_ENVOY_READY_PORT}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "ready",
            "route_config": {"name": "ready", "virtual_hosts": [{
                "name": "admin", "domains": ["*"],
                "routes": [{"match": {"prefix": "/stats/prometheus"}, "route": {"cluster": "admin"}}]}]},
            "http_filters": [
                {"name": "envoy.filters.http.health_check", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck",
                    "pass_through_mode": False,
                    "headers": [{"name": ":path", "string_match": {"exact": rf.LLMD_ENVOY_READY_PATH}}]}},
                {"name": "envoy.filters.http.router",
                 "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
            ],
        }}]}],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": rf.LLMD_ENVOY_ADMIN_PORT}}},
        "static_resources": {
            "listeners": [router_listener, ready_listener],
            "clusters": [
                {"name": "ext_proc", "type": "STATIC", "connect_timeout": "5s", "lb_policy": "ROUND_ROBIN",
                 "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                     "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                     "explicit_http_config": {"http2_protocol_options": {}}}},
                 "load_assignment": {"cluster_name": "ext_proc", "endpoints": [{"lb_endpoints": [{"endpoint": {
                     "address": {"socket_address": {"address": "127.0.0.1", "port_value": rf.LLMD_EPP_GRPC_PORT}}}}]}]}},
                {"name": "original_destination", "type": "ORIGINAL_DST", "connect_timeout": "10s",
                 "lb_policy": "CLUSTER_PROVIDED",
                 "original_dst_lb_config": {"use_http_header": True, "http_header_name": rf.LLMD_DESTINATION_HEADER}},
                {"name": "admin", "type": "STATIC", "connect_timeout": "1s",
                 "load_assignment": {"cluster_name": "admin", "endpoints": [{"lb_endpoints": [{"endpoint": {
                     "address": {"socket_address": {"address": "127.0.0.1",
                                                    "port_value": rf.LLMD_ENVOY_ADMIN_PORT}}}}]}]}},
            ],
        },
    }


def _llmd(ctx: DeploymentContext, renders: list[RoleRender], image: str) -> tuple[list[dict[str, Any]], dict[str, str], list[dict[str, Any]]]:
    router = ctx.md.spec.router
    assert router is not None
    kinds = _kinds_served(ctx)
    base = ",".join(f"{k}={v}" for k, v in leader_labels(ctx).items())
    selector = f"{base},{vocab.LABEL_ROLE_KIND} in ({','.join(kinds)})"
    served = [r for r in renders if r.role.kind_label in kinds]
    epp_args = [
        f"--endpoint-selector={selector}",
        f"--endpoint-target-ports={_target_port(served)}",
        f"--pool-namespace={ctx.namespace}",
        f"--grpc-port={rf.LLMD_EPP_GRPC_PORT}",
        f"--grpc-health-port={rf.LLMD_EPP_HEALTH_PORT}",
        f"--metrics-port={rf.LLMD_EPP_METRICS_PORT}",
        "--secure-serving=false",
        "--metrics-endpoint-auth=false",
        f"--config-file={vocab.ROUTER_CONFIG_DIR}/epp-config.yaml",
    ]
    if router.replicas > 1:
        epp_args.append("--ha-enable-leader-election")
    epp = {
        "name": "epp",
        "image": image,
        "args": epp_args + list(router.extra_args),
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "grpc", "containerPort": rf.LLMD_EPP_GRPC_PORT, "protocol": "TCP"},
                  {"name": "grpc-health", "containerPort": rf.LLMD_EPP_HEALTH_PORT, "protocol": "TCP"},
                  {"name": vocab.PORT_NAME_METRICS, "containerPort": rf.LLMD_EPP_METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"grpc": {"port": rf.LLMD_EPP_HEALTH_PORT, "service": "liveness"}, "periodSeconds": 10},
        "readinessProbe": {"grpc": {"port": rf.LLMD_EPP_HEALTH_PORT, "service": "readiness"}, "periodSeconds": 5},
        "resources": ctx.options.router_resources.as_kube(),
        "volumeMounts": [{"name": vocab.ROUTER_CONFIG_VOLUME, "mountPath": vocab.ROUTER_CONFIG_DIR,
                          "readOnly": True}],
    }
    envoy = {
        "name": "envoy",
        "image": rf.LLMD_ENVOY_IMAGE,
        "command": [*rf.LLMD_ENVOY_COMMAND, "--config-path", f"{vocab.ROUTER_CONFIG_DIR}/envoy.yaml",
                    "--log-level", "warn",
                    "--drain-strategy", "immediate", "--drain-time-s", "60"],
        "ports": [{"name": vocab.PORT_NAME_HTTP, "containerPort": vocab.ROUTER_PORT, "protocol": "TCP"},
                  {"name": "ready", "containerPort": rf.LLMD_ENVOY_READY_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": rf.LLMD_ENVOY_READY_PATH, "port": rf.LLMD_ENVOY_READY_PORT},
                           "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": rf.LLMD_ENVOY_READY_PATH, "port": rf.LLMD_ENVOY_READY_PORT},
                          "periodSeconds": 10},
        "resources": ctx.options.router_resources.as_kube(),
        "volumeMounts": [{"name": vocab.ROUTER_CONFIG_VOLUME, "mountPath": vocab.ROUTER_CONFIG_DIR,
                          "readOnly": True}],
    }
    documents = {
        "epp-config.yaml": _json_text(llmd_epp_config(ctx)),
        "envoy.yaml": _json_text(llmd_envoy_bootstrap(ctx)),
    }
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    if router.replicas > 1:
        rules += [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
    return [envoy, epp], documents, rules


# --- vllm-router / sglang-gateway --------------------------------------------------------------


def _static_workers(ctx: DeploymentContext, renders: list[RoleRender]) -> list[str]:
    """`--prefill URL BOOTSTRAP ... --decode URL ...` over every instance's stable address."""
    prefill, decode = _pd_renders(renders)
    args: list[str] = []
    for render in prefill:
        for ordinal in range(render.role.replicas):
            host = f"{names.instance(ctx.name, render.role.name, ordinal)}.{ctx.namespace}.svc"
            args += ["--prefill", f"http://{host}:{render.ports.container}", str(vocab.PREFILL_BOOTSTRAP_PORT)]
    for render in decode:
        for ordinal in range(render.role.replicas):
            host = f"{names.instance(ctx.name, render.role.name, ordinal)}.{ctx.namespace}.svc"
            args += ["--decode", f"http://{host}:{render.ports.container}"]
    return args


def _rust_router(ctx: DeploymentContext, renders: list[RoleRender], image: str, name: str
                 ) -> tuple[list[dict[str, Any]], dict[str, str], list[dict[str, Any]]]:
    router = ctx.md.spec.router
    assert router is not None
    args = ["--host", "0.0.0.0", "--port", str(vocab.ROUTER_PORT)]
    discovery = ["--service-discovery", "--service-discovery-namespace", ctx.namespace,
                 "--service-discovery-port", str(_target_port(renders))]
    uses_discovery = True
    if ctx.routed_pair and name == vocab.ROUTER_VLLM:
        args += ["--vllm-pd-disaggregation", "--kv-connector", "mooncake", *_static_workers(ctx, renders)]
        uses_discovery = False
    elif ctx.routed_pair:
        args += ["--pd-disaggregation", *discovery,
                 *_selector_args("--prefill-selector", leader_labels(ctx, "prefill")),
                 *_selector_args("--decode-selector", leader_labels(ctx, "decode"))]
    else:
        args += [*discovery, *_selector_args("--selector", leader_labels(ctx, "server"))]
    args += ["--policy", "cache_aware"]
    timeout = _timeout(ctx)
    if timeout:
        args += ["--request-timeout-secs", str(timeout)]
    metrics_port = rf.VLLM_ROUTER_METRICS_PORT if name == vocab.ROUTER_VLLM else rf.SGLANG_GATEWAY_METRICS_PORT
    args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(metrics_port)]
    container: dict[str, Any] = {
        "name": "router",
        "image": image,
        "ports": [{"name": vocab.PORT_NAME_HTTP, "containerPort": vocab.ROUTER_PORT, "protocol": "TCP"},
                  {"name": vocab.PORT_NAME_METRICS, "containerPort": metrics_port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": rf.RUST_ROUTER_READINESS_PATH, "port": vocab.ROUTER_PORT},
                           "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": rf.RUST_ROUTER_LIVENESS_PATH, "port": vocab.ROUTER_PORT},
                          "periodSeconds": 10},
        "resources": ctx.options.router_resources.as_kube(),
    }
    if name == vocab.ROUTER_VLLM:
        container["command"] = list(rf.VLLM_ROUTER_COMMAND)
    container["args"] = args + list(router.extra_args)
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}] if uses_discovery else []
    return [container], {}, rules


def default_image(ctx: DeploymentContext) -> str:
    router = ctx.md.spec.router
    assert router is not None
    if router.image:
        return router.image
    if ctx.options.router_image:
        return ctx.options.router_image
    return {vocab.ROUTER_LLMD: rf.LLMD_EPP_IMAGE, vocab.ROUTER_VLLM: rf.VLLM_ROUTER_IMAGE,
            vocab.ROUTER_SGLANG: rf.SGLANG_GATEWAY_IMAGE}[router.name]


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
    image = default_image(ctx)
    if router.name == vocab.ROUTER_LLMD:
        containers, documents, rules = _llmd(ctx, renders, image)
    else:
        containers, documents, rules = _rust_router(ctx, renders, image, router.name)
    return _objects(ctx, containers, documents, rules)


def needs_instance_services(ctx: DeploymentContext) -> bool:
    """vllm-router's static prefill/decode list addresses every instance by its headless Service."""
    return ctx.routed_pair and ctx.md.spec.router is not None and ctx.md.spec.router.name == vocab.ROUTER_VLLM
