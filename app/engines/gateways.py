"""vllm-router and sglang-gateway: one Rust router container each, and their entries
(`VLLM_ROUTER`, `SGLANG_GATEWAY`), read from source (docs/research/routers.md,
app/engines/router_flags.py).

- vllm-router: Mooncake P/D works only with statically listed prefillers (discovered ones never
  get their engine id), so a pair is rendered as static per-instance addresses, which the
  per-instance headless Services make resolvable; a Server-only deployment uses discovery.
- sglang-gateway: Kubernetes discovery by prefill/decode selectors; prefill Pods carry the
  bootstrap-port annotation the gateway reads.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Final

from app import vocab
from app.engines import router_flags as rf
from app.engines.router_entry import (
    Router,
    RouterInputs,
    RouterPod,
    leader_labels,
    pod_readers,
    request_timeout,
    router_security_context,
    target_port,
)

DISCOVERY_FLAG: Final = "--service-discovery"


def _selector_args(flag: str, pairs: dict[str, str]) -> list[str]:
    return [flag, *(f"{k}={v}" for k, v in pairs.items())]


def _discovery(inputs: RouterInputs) -> list[str]:
    """Kubernetes discovery of the engine Pods in the deployment's namespace, on their serving port."""
    return [DISCOVERY_FLAG, "--service-discovery-namespace", inputs.ctx.namespace,
            "--service-discovery-port", str(target_port(inputs.upstreams))]


def _static_workers(inputs: RouterInputs) -> list[str]:
    """`--prefill URL BOOTSTRAP ... --decode URL ...` over every instance's stable address."""
    args: list[str] = []
    for upstream in inputs.upstreams:
        if upstream.role.kind != vocab.ROLE_KIND_PREFILL:
            continue
        for ordinal in range(upstream.role.replicas):
            host = inputs.instance_host(upstream.role.name, ordinal)
            args += ["--prefill", f"http://{host}:{upstream.port}", str(vocab.PREFILL_BOOTSTRAP_PORT)]
    for upstream in inputs.upstreams:
        if upstream.role.kind != vocab.ROLE_KIND_DECODE:
            continue
        for ordinal in range(upstream.role.replicas):
            args += ["--decode", f"http://{inputs.instance_host(upstream.role.name, ordinal)}:{upstream.port}"]
    return args


def _static_pair(inputs: RouterInputs) -> list[str]:
    """vllm-router's Mooncake P/D: the prefillers and decoders listed by address."""
    return ["--vllm-pd-disaggregation", "--kv-connector", "mooncake", *_static_workers(inputs)]


def _discovered_pair(inputs: RouterInputs) -> list[str]:
    """sglang-gateway's P/D: prefill and decode leaders discovered by their selectors."""
    return ["--pd-disaggregation", *_discovery(inputs),
            *_selector_args("--prefill-selector", leader_labels(inputs, "prefill")),
            *_selector_args("--decode-selector", leader_labels(inputs, "decode"))]


def _gateway_pod(inputs: RouterInputs, *, pair: Callable[[RouterInputs], list[str]], metrics_port: int,
                 command: tuple[str, ...] | None) -> RouterPod:
    """The router container: listener, discovery or static list, policy, timeout, metrics; it reads
    the engine Pods (RBAC) only when it discovers them."""
    ctx = inputs.ctx
    router = ctx.md.spec.router
    assert router is not None
    args = ["--host", "0.0.0.0", "--port", str(vocab.ROUTER_PORT)]
    if ctx.routed_pair:
        args += pair(inputs)
    else:
        args += [*_discovery(inputs), *_selector_args("--selector", leader_labels(inputs, "server"))]
    args += ["--policy", "cache_aware"]
    timeout = request_timeout(ctx)
    if timeout:
        args += ["--request-timeout-secs", str(timeout)]
    args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(metrics_port)]
    container: dict[str, Any] = {
        "name": "router",
        "image": inputs.image,
        "ports": [{"name": vocab.PORT_NAME_HTTP, "containerPort": vocab.ROUTER_PORT, "protocol": "TCP"},
                  {"name": vocab.PORT_NAME_METRICS, "containerPort": metrics_port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": rf.RUST_ROUTER_READINESS_PATH, "port": vocab.ROUTER_PORT},
                           "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": rf.RUST_ROUTER_LIVENESS_PATH, "port": vocab.ROUTER_PORT},
                          "periodSeconds": 10},
        "resources": ctx.options.router_resources.as_kube(),
        # The Rust routers' images run as root: hardened without runAsNonRoot.
        "securityContext": router_security_context(),
    }
    if command is not None:
        container["command"] = list(command)
    container["args"] = args + list(router.extra_args)
    return RouterPod([container], {}, pod_readers() if DISCOVERY_FLAG in args else [])


def render_vllm_router(inputs: RouterInputs) -> RouterPod:
    # Dockerfile.router has no ENTRYPOINT, only CMD: the command is rendered.
    return _gateway_pod(inputs, pair=_static_pair, metrics_port=rf.VLLM_ROUTER_METRICS_PORT,
                        command=rf.VLLM_ROUTER_COMMAND)


def render_sglang_gateway(inputs: RouterInputs) -> RouterPod:
    return _gateway_pod(inputs, pair=_discovered_pair, metrics_port=rf.SGLANG_GATEWAY_METRICS_PORT, command=None)


VLLM_ROUTER: Final = Router(
    name=vocab.ROUTER_VLLM,
    flags=rf.VLLM_ROUTER_FLAGS,
    owned_flags=rf.VLLM_ROUTER_OWNED_FLAGS,
    # clap 4 (the image's binary): no abbreviations, and a repeated scalar option is an error, so every
    # option the operator renders is owned, not merely defaulted.
    default_image=rf.VLLM_ROUTER_IMAGE,
    render=render_vllm_router,
    engines=frozenset({vocab.ENGINE_VLLM}),
    instance_services=True,
)

SGLANG_GATEWAY: Final = Router(
    name=vocab.ROUTER_SGLANG,
    flags=rf.SGLANG_GATEWAY_FLAGS,
    owned_flags=rf.SGLANG_GATEWAY_OWNED_FLAGS,
    # python-argparse: unique prefixes of the launcher's options, a repeated option's last value wins.
    default_image=rf.SGLANG_GATEWAY_IMAGE,
    render=render_sglang_gateway,
    engines=frozenset({vocab.ENGINE_SGLANG}),
    abbreviations=rf.SGLANG_GATEWAY_PY_FLAGS,
    # The gateway's discovery reads the bootstrap port from this annotation (no flag exists).
    prefill_annotations=MappingProxyType({vocab.ANNOTATION_SGLANG_BOOTSTRAP_PORT: str(vocab.PREFILL_BOOTSTRAP_PORT)}),
)
