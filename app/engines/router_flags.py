"""Router command lines as read from upstream: what each router's entrypoint accepts, and what the
operator owns on it.

For each router (`llm-d-router`, `vllm-router`, `sglang-gateway`) this module records

* the long option names its container's entrypoint accepts (without the leading ``--``),
* how that entrypoint parses them (abbreviations, repeated options: noted on each router's entry),
* the options the operator renders and therefore owns (admission refuses them in
  ``spec.router.extraArgs``, rule 18),
* the images, commands, ports, paths and config-document names the routers' Pods are rendered with
  (app/engines/llmd.py, app/engines/gateways.py; each router's entry gathers its own).

Provenance (see docs/research/routers.md for the full citations and reasoning):

Re-derived here, from the released wheels on PyPI (scripts/extract-engine-flags.sh writes
app/engines/data/*.json; these sets are read from those files):
    vllm-router 0.1.17    vllm_router/router_args.py, the Python launcher (console script
                          `vllm-router`)                                -> VLLM_ROUTER_PY_FLAGS
    sglang-router 0.3.2   sglang_router/router_args.py (image entrypoint `python3 -m
                          sglang_router.launch_router`, docker/gateway.Dockerfile@8448045c;
                          image lmsysorg/sgl-model-gateway:v0.3.2)      -> SGLANG_GATEWAY_PY_FLAGS

Read from Go and Rust sources that are not published to a registry this project reaches, so kept
here as data, as read (2026), and not re-derivable by the extractor:
    llm-d-router          github.com/llm-d/llm-d-router tag v0.10.0 = commit
                          71f4f0999f95b96c49a9d0c4afbd18dfdb943c26 (flag sets identical at HEAD
                          ebab687927f5331c1b39defcb579a07951bce56c):
                          EPP flags pkg/epp/server/options.go, pkg/common/observability/logging/
                          options.go (+ controller-runtime v0.23.3 zap.Options.BindFlags)
                                                                        -> LLMD_EPP_FLAGS
                          sidecar flags pkg/sidecar/proxy/options.go     -> LLMD_SIDECAR_FLAGS
                          config schema apix/config/v1alpha1/endpointpickerconfig_types.go and the
                          plugin READMEs under pkg/epp/framework/plugins/
    vllm-router (Rust)    github.com/vllm-project/router src/main.rs @
                          03e9af5c1982f7568d79021d80d812edecb2d702 (the image's binary,
                          Dockerfile.router)                            -> VLLM_ROUTER_RUST_FLAGS
                          plus two further indexed revisions of src/main.rs
                                                    -> VLLM_ROUTER_RUST_FLAGS_OTHER_REVISIONS
    sglang-gateway (Rust) sgl-project/sglang sgl-model-gateway/src/main.rs @
                          f47e04e04c2a9408b8b106fb62612daa45d4b067
                                                        -> SGLANG_GATEWAY_RUST_ONLY_FLAGS

Names in the frozensets carry no leading dashes.
"""

from __future__ import annotations

from typing import Final

from app.engines.flags import read_table


def _launcher_flags(file_name: str) -> frozenset[str]:
    """The long option names (without dashes) of a router's Python launcher, from its data file."""
    return frozenset(o[2:] for o in read_table(file_name)["options"] if o.startswith("--"))


# ------------------------------------------------------------------------------------------
# llm-d-router: Endpoint Picker (EPP) + Envoy, and the P/D routing sidecar on decoders
# ------------------------------------------------------------------------------------------

LLMD_EPP_IMAGE: Final = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
# The P/D routing sidecar's image is an operator setting's default: vocab.DEFAULT_ROUTING_SIDECAR_IMAGE.
# The EPP is an Envoy ext_proc server, not an HTTP proxy: "standalone mode" runs Envoy in the
# same Pod (config/charts/llm-d-router-standalone/values.yaml preset).
LLMD_ENVOY_IMAGE: Final = "docker.io/envoyproxy/envoy:distroless-v1.33.2"
LLMD_ENVOY_COMMAND: Final = ("envoy",)

# pkg/epp/server/options.go AddFlags + logging options (-v) + zap.Options.BindFlags.
LLMD_EPP_FLAGS: Final = frozenset(
    {
        "allow-experimental-plugins",
        "cache-info-metric",
        "cert-path",
        "config-file",
        "config-text",
        "disable-endpoint-subset-filter",
        "drain-timeout",
        "emit-endpoint-scores",
        "enable-cert-reload",
        "enable-grpc-stream-metrics",
        "enable-pprof",
        "endpoint-selector",
        "endpoint-target-ports",
        "grpc-health-port",
        "grpc-max-recv-msg-size",
        "grpc-max-send-msg-size",
        "grpc-port",
        "ha-enable-leader-election",
        "health-checking",
        "kv-cache-usage-percentage-metric",
        "lora-info-metric",
        "metrics-cert-dir",
        "metrics-client-ca-file",
        "metrics-endpoint-auth",
        "metrics-port",
        "metrics-staleness-threshold",
        "pool-group",
        "pool-name",
        "pool-namespace",
        "refresh-metrics-interval",
        "refresh-prometheus-metrics-interval",
        "secure-serving",
        "tls-cipher-suites",
        "tls-min-version",
        "total-queued-requests-metric",
        "total-running-requests-metric",
        "tracing",
        "v",
        "zap-devel",
        "zap-encoder",
        "zap-log-level",
        "zap-stacktrace-level",
        "zap-time-encoding",
    }
)

# Accepted by the parser but refused by Options.Validate() when set explicitly
# ("deprecated and cannot be used; configure metrics via engineConfigs").
LLMD_EPP_REJECTED_FLAGS: Final = frozenset(
    {
        "total-queued-requests-metric",
        "total-running-requests-metric",
        "kv-cache-usage-percentage-metric",
        "lora-info-metric",
        "cache-info-metric",
    }
)

# pkg/sidecar/proxy/options.go AddFlags (v0.10.0) + zap.Options.BindFlags.
LLMD_SIDECAR_FLAGS: Final = frozenset(
    {
        "cert-path",
        "configuration",
        "configuration-file",
        "data-parallel-size",
        "decode-chunk-size",
        "ec-connector",
        "enable-p2p-pull",
        "enable-prefiller-sampling",
        "enable-ssrf-protection",
        "enable-tls",
        "inference-pool",
        "kv-connector",
        "max-idle-conns-per-host",
        "metrics-port",
        "model-server-port",
        "mooncake-bootstrap-port",
        "moriio-decode-handshake-port",
        "moriio-decode-hosts",
        "moriio-decode-notify-port",
        "moriio-dp-size",
        "moriio-dp-size-local",
        "moriio-local-pod-ip",
        "moriio-parallel-decode-wait-timeout",
        "moriio-parallel-dispatch",
        "moriio-prefill-handshake-port",
        "moriio-prefill-notify-port",
        "moriio-remote-hosts",
        "moriio-tp-size",
        "moriio-write-mode",
        "p2p-connector-port",
        "pool-group",
        "port",
        "prefill-max-retries",
        "prefill-retry-backoff",
        "secure-proxy",
        "tls-insecure-skip-verify",
        "tracing",
        "vllm-port",  # deprecated alias of model-server-port since v0.10.0
        "zap-devel",
        "zap-encoder",
        "zap-log-level",
        "zap-stacktrace-level",
        "zap-time-encoding",
    }
)

# Ports (EPP defaults in options.go; Envoy ports are the operator's choice, matching the chart).
LLMD_EPP_GRPC_PORT: Final = 9002  # ext_proc, Envoy -> EPP
LLMD_EPP_HEALTH_PORT: Final = 9003  # gRPC health: services "liveness", "readiness", "inference-extension"
LLMD_EPP_METRICS_PORT: Final = 9090  # /metrics (authn/z unless --metrics-endpoint-auth=false)
LLMD_ENVOY_ADMIN_PORT: Final = 19000  # bound to 127.0.0.1
LLMD_ENVOY_READY_PORT: Final = 19001  # GET /ready (health_check filter), /stats/prometheus
LLMD_ENVOY_READY_PATH: Final = "/ready"
LLMD_DESTINATION_HEADER: Final = "x-gateway-destination-endpoint"  # EPP -> Envoy ORIGINAL_DST

# EndpointPickerConfig document (apiVersion llm-d.ai/v1alpha1; the loader still accepts the
# deprecated inference.networking.x-k8s.io/v1alpha1). Plugin types the operator renders.
LLMD_CONFIG_API_VERSION: Final = "llm-d.ai/v1alpha1"
LLMD_CONFIG_KIND: Final = "EndpointPickerConfig"
LLMD_PLUGIN_LABEL_FILTER: Final = "label-selector-filter"  # params: matchLabels / matchExpressions
LLMD_PLUGIN_PREFIX_PRODUCER: Final = "approx-prefix-cache-producer"
LLMD_PLUGIN_PREFIX_SCORER: Final = "prefix-cache-scorer"  # approximate, no KV events needed
# Not rendered: the precise (KV-event driven) precise-prefix-cache-producer, which needs a real
# token-producer (a vLLM render URL); the combined precise-prefix-cache-scorer is deprecated in v0.10.0.
LLMD_PLUGIN_QUEUE_SCORER: Final = "queue-scorer"
LLMD_PLUGIN_PICKER: Final = "max-score-picker"
LLMD_PLUGIN_PD_HANDLER: Final = "disagg-profile-handler"  # params.deciders.prefill = <decider name>
LLMD_PLUGIN_PD_DECIDER: Final = "prefix-based-pd-decider"  # params.nonCachedTokens, promptTokens
LLMD_PLUGIN_PD_ALWAYS: Final = "always-disagg-pd-decider"
# The disaggregation threshold: disaggregate when the non-cached prompt suffix is >= this many
# tokens. 0 DISABLES the decider (never disaggregates), so a threshold of 0 must render
# always-disagg-pd-decider instead.
LLMD_THRESHOLD_PARAMETER: Final = "nonCachedTokens"

# ------------------------------------------------------------------------------------------
# vllm-router
# ------------------------------------------------------------------------------------------

VLLM_ROUTER_IMAGE: Final = "docker.io/vllm/vllm-router:nightly"  # no release tags published
# Dockerfile.router has no ENTRYPOINT, only CMD ["vllm-router", ...]: render the command.
VLLM_ROUTER_COMMAND: Final = ("vllm-router",)

VLLM_ROUTER_RUST_FLAGS: Final = frozenset(
    {
        "api-key",
        "api-key-validation-urls",
        "backend",
        "runtime",  # alias of --backend
        "balance-abs-threshold",
        "balance-rel-threshold",
        "cache-threshold",
        "cb-failure-threshold",
        "cb-success-threshold",
        "cb-timeout-duration-secs",
        "cb-window-duration-secs",
        "cors-allowed-origins",
        "decode",
        "decode-policy",
        "decode-selector",
        "disable-circuit-breaker",
        "disable-retries",
        "enable-igw",
        "enable-trace",
        "eviction-interval",
        "health-check-endpoint",
        "health-check-interval-secs",
        "health-check-timeout-secs",
        "health-failure-threshold",
        "health-success-threshold",
        "help",
        "history-backend",
        "host",
        "intra-node-data-parallel-size",
        "kv-connector",
        "log-dir",
        "log-level",
        "max-concurrent-requests",
        "max-payload-size",
        "max-tree-size",
        "otel-excluded-paths",
        "otel-sampling-ratio",
        "otlp-traces-endpoint",
        "policy",
        "port",
        "prefill",  # consumed by a pre-clap pass: --prefill URL [BOOTSTRAP_PORT|none]
        "prefill-policy",
        "prefill-selector",
        "profile",
        "prometheus-host",
        "prometheus-port",
        "request-id-headers",
        "request-timeout-secs",
        "retry-backoff-multiplier",
        "retry-initial-backoff-ms",
        "retry-jitter-factor",
        "retry-max-backoff-ms",
        "retry-max-retries",
        "selector",
        "service-discovery",
        "service-discovery-namespace",
        "service-discovery-port",
        "version",
        "vllm-discovery-address",
        "vllm-pd-disaggregation",
        "worker-startup-check-interval",
        "worker-startup-timeout-secs",
        "worker-urls",
    }
)
# Options seen in other indexed revisions of src/main.rs (newer or branch builds).
VLLM_ROUTER_RUST_FLAGS_OTHER_REVISIONS: Final = frozenset(
    {
        "config",
        "hash-key-config",
        "enable-program-scheduling",
        "program-scheduling-config-json",
        "kv-tokenizer-path",
        "kv-model",
        "kv-hash-algo",
        "kv-block-size",
        "kv-hash-seed",
        "kv-events-topic-filter",
        "kv-events-port",
        "kv-events-endpoint",
        "kv-index-max-entries",
        "wasm-middleware",
        "wasm-middleware-sha256",
        "wasm-middleware-route",
        "pd-disaggregation",  # older revision (811db12b), removed since
        "model-path",  # older revision
        "tokenizer-path",  # older revision
    }
)
# pip vllm-router 0.1.17, vllm_router/router_args.py (console script `vllm-router`), re-derived
# from the wheel by scripts/extract-engine-flags.sh.
VLLM_ROUTER_PY_FLAGS: Final = _launcher_flags("vllm-router-0.1.17.json")
VLLM_ROUTER_FLAGS: Final = (
    VLLM_ROUTER_RUST_FLAGS | VLLM_ROUTER_RUST_FLAGS_OTHER_REVISIONS | VLLM_ROUTER_PY_FLAGS
)
VLLM_ROUTER_METRICS_PORT: Final = 29000  # --prometheus-port default; host defaults to 127.0.0.1

# ------------------------------------------------------------------------------------------
# sglang-gateway (SGLang Model Gateway, formerly sgl-router)
# ------------------------------------------------------------------------------------------

SGLANG_GATEWAY_IMAGE: Final = "docker.io/lmsysorg/sgl-model-gateway:v0.3.2"  # was lmsysorg/sglang-router

# pip sglang-router 0.3.2, sglang_router/router_args.py (the image's entrypoint), re-derived from
# the wheel by scripts/extract-engine-flags.sh.
SGLANG_GATEWAY_PY_FLAGS: Final = _launcher_flags("sglang-router-0.3.2.json")
# Options only the Rust binary (`sgl-model-gateway` / `smg` / `amg`) has at f47e04e0.
SGLANG_GATEWAY_RUST_ONLY_FLAGS: Final = frozenset(
    {
        "dp-minimum-tokens-scheduler",
        "enable-wasm",
        "eviction-interval",
        "oracle-dsn",
        "oracle-user",
        "postgres-pool-max-size",
        "runtime",
        "worker-load-check-interval",
    }
)
SGLANG_GATEWAY_FLAGS: Final = SGLANG_GATEWAY_PY_FLAGS | SGLANG_GATEWAY_RUST_ONLY_FLAGS
SGLANG_GATEWAY_METRICS_PORT: Final = 29000  # --prometheus-port default; host default 0.0.0.0

# Health endpoints vllm-router and sglang-gateway both serve on their listener.
RUST_ROUTER_LIVENESS_PATH: Final = "/liveness"
RUST_ROUTER_READINESS_PATH: Final = "/readiness"

# ------------------------------------------------------------------------------------------
# Options refused in router.extraArgs (rule 18): the rendered ones, the ones that switch the
# discovery/config source away from the rendered one, and options that break the rendered
# wiring. Names without dashes, comparable to each router's flags (its entry's `owned_flags`).
# ------------------------------------------------------------------------------------------

LLMD_OWNED_FLAGS: Final = frozenset(
    {
        "endpoint-selector",
        "endpoint-target-ports",
        "pool-name",
        "pool-namespace",
        "pool-group",
        "config-file",
        "config-text",
        "grpc-port",
        "grpc-health-port",
        "metrics-port",
        "secure-serving",
        "metrics-endpoint-auth",
        "ha-enable-leader-election",
    }
) | LLMD_EPP_REJECTED_FLAGS

VLLM_ROUTER_OWNED_FLAGS: Final = frozenset(
    {
        "host",
        "port",
        "vllm-pd-disaggregation",
        "pd-disaggregation",
        "kv-connector",
        "service-discovery",
        "service-discovery-namespace",
        "service-discovery-port",
        "selector",
        "prefill-selector",
        "decode-selector",
        "prefill",
        "decode",
        "worker-urls",
        "vllm-discovery-address",
        "enable-igw",
        "mini-lb",
        "backend",
        "runtime",
        "policy",
        "request-timeout-secs",
        "prometheus-host",
        "prometheus-port",
        "config",  # a JSON document that can carry any of the above
    }
)

SGLANG_GATEWAY_OWNED_FLAGS: Final = frozenset(
    {
        "host",
        "port",
        "pd-disaggregation",
        "service-discovery",
        "service-discovery-namespace",
        "service-discovery-port",
        "selector",
        "prefill-selector",
        "decode-selector",
        "prefill",
        "decode",
        "worker-urls",
        "enable-igw",
        "mini-lb",
        "backend",
        "runtime",
        "policy",
        "request-timeout-secs",
        "prometheus-host",
        "prometheus-port",
    }
)
