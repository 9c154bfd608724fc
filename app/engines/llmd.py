"""llm-d-router: Envoy + the Endpoint Picker (an ext_proc server) in one Pod, and its entry (`LLMD`).

Prefill and decode leaders are found by label selector; cache-aware scoring and the P/D decider
are an EndpointPickerConfig document; the request timeout is Envoy's route timeout (read from
source: docs/research/routers.md, app/engines/router_flags.py).
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Final

import orjson

from app import vocab
from app.engines import router_flags as rf
from app.engines.router_entry import (
    DISTROLESS_NONROOT_UID,
    Router,
    RouterInputs,
    RouterPod,
    kinds_served,
    leader_labels,
    pod_readers,
    request_timeout,
    router_security_context,
    target_port,
)
from app.model.context import DeploymentContext

HTTP_CONNECTION_MANAGER: Final = ("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
                                  "HttpConnectionManager")


def _router_filter() -> dict[str, Any]:
    """Envoy's terminal HTTP filter."""
    return {"name": "envoy.filters.http.router",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}


def json_text(document: dict[str, Any]) -> str:
    """A config document as JSON text. The EPP and Envoy read their `.yaml` files with YAML parsers,
    which accept JSON; it costs microseconds to write where PyYAML's representer costs milliseconds
    on every sync.

    orjson writes the same bytes as `json.dumps(indent=2)` for an ASCII document, in a tenth of the
    time (json's indenting encoder is pure Python: half of a typical sync). A document that is not
    ASCII goes through json, which escapes it, so the text (and its hash) never depends on which."""
    text = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    return text if text.isascii() else json.dumps(document, indent=2)


# --- the EndpointPickerConfig ------------------------------------------------------------------


def _pd_plugins(ctx: DeploymentContext) -> list[dict[str, Any]]:
    """The profile handler: the P/D decider of a routed pair, else a single profile."""
    router = ctx.md.spec.router
    assert router is not None
    if not ctx.routed_pair:
        return [{"type": "single-profile-handler"}]
    threshold = router.disaggregation_threshold_tokens
    if threshold:
        decider = {"type": rf.LLMD_PLUGIN_PD_DECIDER, "parameters": {rf.LLMD_THRESHOLD_PARAMETER: threshold}}
    else:
        # 0 disables the prefix-based decider (it would never disaggregate): always disaggregate.
        decider = {"type": rf.LLMD_PLUGIN_PD_ALWAYS}
    return [decider, {"type": rf.LLMD_PLUGIN_PD_HANDLER, "parameters": {"deciders": {"prefill": decider["type"]}}}]


def llmd_epp_config(ctx: DeploymentContext) -> dict[str, Any]:
    """EndpointPickerConfig: label filters per kind, approximate prefix-cache scoring, the P/D decider."""
    scorers = [{"pluginRef": rf.LLMD_PLUGIN_PREFIX_SCORER, "weight": 2},
               {"pluginRef": rf.LLMD_PLUGIN_QUEUE_SCORER, "weight": 1},
               {"pluginRef": rf.LLMD_PLUGIN_PICKER}]
    plugins: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    for kind in kinds_served(ctx):
        plugins.append({"name": f"{kind}-pods", "type": rf.LLMD_PLUGIN_LABEL_FILTER,
                        "parameters": {"matchLabels": {vocab.LABEL_ROLE_KIND: kind}}})
        profiles.append({"name": kind if ctx.routed_pair else "default",
                         "plugins": [{"pluginRef": f"{kind}-pods"}, *scorers]})
    plugins += [{"type": rf.LLMD_PLUGIN_PREFIX_PRODUCER}, {"type": rf.LLMD_PLUGIN_PREFIX_SCORER},
                {"type": rf.LLMD_PLUGIN_QUEUE_SCORER}, {"type": rf.LLMD_PLUGIN_PICKER}]
    plugins += _pd_plugins(ctx)
    return {"apiVersion": rf.LLMD_CONFIG_API_VERSION, "kind": rf.LLMD_CONFIG_KIND, "plugins": plugins,
            "schedulingProfiles": profiles}


# --- Envoy's bootstrap ---------------------------------------------------------------------------


def _router_listener(route_timeout: str) -> dict[str, Any]:
    """The router's listener: every request through ext_proc to the EPP, then to the endpoint it picks."""
    ext_proc = {"name": "envoy.filters.http.ext_proc", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": "ext_proc"}, "timeout": "10s"},
        "failure_mode_allow": False,
        "message_timeout": "1000s",
        "processing_mode": {"request_header_mode": "SEND", "response_header_mode": "SEND",
                            "request_body_mode": "FULL_DUPLEX_STREAMED",
                            "response_body_mode": "FULL_DUPLEX_STREAMED",
                            "request_trailer_mode": "SEND", "response_trailer_mode": "SEND"},
    }}
    return {
        "name": "router",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": vocab.ROUTER_PORT}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
            "@type": HTTP_CONNECTION_MANAGER,
            "stat_prefix": "router",
            "stream_idle_timeout": route_timeout,
            "route_config": {"name": "router", "virtual_hosts": [{
                "name": "engines", "domains": ["*"],
                "routes": [{"match": {"prefix": "/"},
                            "route": {"cluster": "original_destination", "timeout": route_timeout}}]}]},
            "http_filters": [ext_proc, _router_filter()],
        }}]}],
    }


def _ready_listener() -> dict[str, Any]:
    """The readiness listener: /ready answered by Envoy itself, /stats/prometheus from its admin."""
    health_check = {"name": "envoy.filters.http.health_check", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck",
        "pass_through_mode": False,
        "headers": [{"name": ":path", "string_match": {"exact": rf.LLMD_ENVOY_READY_PATH}}]}}
    return {
        "name": "ready",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": rf.LLMD_ENVOY_READY_PORT}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
            "@type": HTTP_CONNECTION_MANAGER,
            "stat_prefix": "ready",
            "route_config": {"name": "ready", "virtual_hosts": [{
                "name": "admin", "domains": ["*"],
                "routes": [{"match": {"prefix": "/stats/prometheus"}, "route": {"cluster": "admin"}}]}]},
            "http_filters": [health_check, _router_filter()],
        }}]}],
    }


def _local_endpoint(cluster: str, port: int) -> dict[str, Any]:
    return {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [{"endpoint": {
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]}


def _clusters() -> list[dict[str, Any]]:
    """The EPP over HTTP/2, the original destination the EPP names, and Envoy's admin."""
    return [
        {"name": "ext_proc", "type": "STATIC", "connect_timeout": "5s", "lb_policy": "ROUND_ROBIN",
         "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
             "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
             "explicit_http_config": {"http2_protocol_options": {}}}},
         "load_assignment": _local_endpoint("ext_proc", rf.LLMD_EPP_GRPC_PORT)},
        {"name": "original_destination", "type": "ORIGINAL_DST", "connect_timeout": "10s",
         "lb_policy": "CLUSTER_PROVIDED",
         "original_dst_lb_config": {"use_http_header": True, "http_header_name": rf.LLMD_DESTINATION_HEADER}},
        {"name": "admin", "type": "STATIC", "connect_timeout": "1s",
         "load_assignment": _local_endpoint("admin", rf.LLMD_ENVOY_ADMIN_PORT)},
    ]


def llmd_envoy_bootstrap(ctx: DeploymentContext) -> dict[str, Any]:
    """Envoy: the router listener with ext_proc to the EPP, routed to the endpoint it picks."""
    timeout = request_timeout(ctx)
    route_timeout = f"{timeout}s" if timeout else "0s"
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": rf.LLMD_ENVOY_ADMIN_PORT}}},
        "static_resources": {
            "listeners": [_router_listener(route_timeout), _ready_listener()],
            "clusters": _clusters(),
        },
    }


# --- the Pod -------------------------------------------------------------------------------------


def _config_mount() -> list[dict[str, Any]]:
    return [{"name": vocab.ROUTER_CONFIG_VOLUME, "mountPath": vocab.ROUTER_CONFIG_DIR, "readOnly": True}]


def _epp_args(inputs: RouterInputs) -> list[str]:
    ctx = inputs.ctx
    router = ctx.md.spec.router
    assert router is not None
    kinds = kinds_served(ctx)
    base = ",".join(f"{k}={v}" for k, v in leader_labels(inputs).items())
    selector = f"{base},{vocab.LABEL_ROLE_KIND} in ({','.join(kinds)})"
    served = [u for u in inputs.upstreams if u.role.kind_label in kinds]
    args = [
        f"--endpoint-selector={selector}",
        f"--endpoint-target-ports={target_port(served)}",
        f"--pool-namespace={ctx.namespace}",
        f"--grpc-port={rf.LLMD_EPP_GRPC_PORT}",
        f"--grpc-health-port={rf.LLMD_EPP_HEALTH_PORT}",
        f"--metrics-port={rf.LLMD_EPP_METRICS_PORT}",
        "--secure-serving=false",
        "--metrics-endpoint-auth=false",
        f"--config-file={vocab.ROUTER_CONFIG_DIR}/epp-config.yaml",
    ]
    if router.replicas > 1:
        args.append("--ha-enable-leader-election")
    return args + list(router.extra_args)


def _epp(inputs: RouterInputs) -> dict[str, Any]:
    """The Endpoint Picker: router.extraArgs go to it."""
    return {
        "name": "epp",
        "image": inputs.image,
        "args": _epp_args(inputs),
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "grpc", "containerPort": rf.LLMD_EPP_GRPC_PORT, "protocol": "TCP"},
                  {"name": "grpc-health", "containerPort": rf.LLMD_EPP_HEALTH_PORT, "protocol": "TCP"},
                  {"name": vocab.PORT_NAME_METRICS, "containerPort": rf.LLMD_EPP_METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"grpc": {"port": rf.LLMD_EPP_HEALTH_PORT, "service": "liveness"}, "periodSeconds": 10},
        "readinessProbe": {"grpc": {"port": rf.LLMD_EPP_HEALTH_PORT, "service": "readiness"}, "periodSeconds": 5},
        "resources": inputs.ctx.options.router_resources.as_kube(),
        "volumeMounts": _config_mount(),
        "securityContext": router_security_context(DISTROLESS_NONROOT_UID),
    }


def _envoy(inputs: RouterInputs) -> dict[str, Any]:
    return {
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
        "resources": inputs.ctx.options.router_resources.as_kube(),
        "volumeMounts": _config_mount(),
        "securityContext": router_security_context(DISTROLESS_NONROOT_UID),
    }


def _rules(inputs: RouterInputs) -> list[dict[str, Any]]:
    """The EPP watches the engine Pods; with several replicas it elects a leader (leases, events)."""
    router = inputs.ctx.md.spec.router
    assert router is not None
    rules = pod_readers()
    if router.replicas > 1:
        rules += [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
    return rules


def render(inputs: RouterInputs) -> RouterPod:
    """Envoy and the EPP, their two documents, the EPP's RBAC."""
    documents = {
        "epp-config.yaml": json_text(llmd_epp_config(inputs.ctx)),
        "envoy.yaml": json_text(llmd_envoy_bootstrap(inputs.ctx)),
    }
    return RouterPod([_envoy(inputs), _epp(inputs)], documents, _rules(inputs))


LLMD: Final = Router(
    name=vocab.ROUTER_LLMD,
    flags=rf.LLMD_EPP_FLAGS,  # router.extraArgs go to the EPP container
    owned_flags=rf.LLMD_OWNED_FLAGS,
    # go-pflag: no abbreviations, a repeated option's last value wins.
    default_image=rf.LLMD_EPP_IMAGE,
    render=render,
    reads_threshold=True,
    # llm-d's metrics extractor picks the engine's metric names by this label (vllm by default).
    engine_labels=MappingProxyType({vocab.ENGINE_SGLANG: MappingProxyType({vocab.LABEL_LLMD_ENGINE_TYPE: "sglang"})}),
)
