"""Router command lines as read from upstream source: pure data, no logic.

For each router (`llm-d-router`, `vllm-router`, `sglang-gateway`) this module records

* the long option names its container's entrypoint accepts (without the leading ``--``),
* how that entrypoint parses them (abbreviations, repeated options),
* the options the operator renders (and therefore owns: admission refuses them in
  ``spec.router.extraArgs``, rule 18), keyed by purpose,
* images, entrypoints, ports, probe paths, annotations and the RBAC each reads.

Sources (read 2026; see docs/research/routers.md for the full citations and reasoning):

llm-d-router
    github.com/llm-d/llm-d-router (renamed from llm-d/llm-d-inference-scheduler; the routing
    sidecar moved here from the archived llm-d/llm-d-routing-sidecar), tag v0.10.0 =
    commit 71f4f0999f95b96c49a9d0c4afbd18dfdb943c26; flag sets identical at HEAD
    ebab687927f5331c1b39defcb579a07951bce56c.
      EPP flags      pkg/epp/server/options.go, pkg/common/observability/logging/options.go
                     (+ controller-runtime v0.23.3 zap.Options.BindFlags)
      sidecar flags  pkg/sidecar/proxy/options.go, pkg/sidecar/constants/constants.go
      config schema  apix/config/v1alpha1/endpointpickerconfig_types.go, plugin READMEs under
                     pkg/epp/framework/plugins/
vllm-router
    github.com/vllm-project/router (not fetchable here; read through the file index):
      Rust CLI (the image's entrypoint, Dockerfile.router copies target/release/vllm-router)
                     src/main.rs @ 03e9af5c1982f7568d79021d80d812edecb2d702, plus two further
                     indexed revisions of src/main.rs (commits not reported by the index) whose
                     extra options are listed in VLLM_ROUTER_RUST_FLAGS_OTHER_REVISIONS
      Python launcher (pip `vllm-router` 0.1.17, console script `vllm-router`)
                     vllm_router/router_args.py
      discovery      src/service_discovery.rs @ 06127e3cf1d0c9241b54597356b87d89aa2123a6
sglang-gateway
    SGLang Model Gateway (formerly sgl-router), sgl-project/sglang/sgl-model-gateway:
      image entrypoint  docker/gateway.Dockerfile @ 8448045c5b58df38de9142f3d5b84de62353e535:
                        ENTRYPOINT ["python3", "-m", "sglang_router.launch_router"]
      Python launcher   pip `sglang-router` 0.3.2 (= image lmsysorg/sgl-model-gateway:v0.3.2),
                        sglang_router/router_args.py
      Rust CLI          sgl-model-gateway/src/main.rs @ f47e04e04c2a9408b8b106fb62612daa45d4b067
      discovery         sgl-model-gateway/src/service_discovery.rs @ 09d3b255f368...

Names in the frozensets carry no leading dashes. A value of ``None`` in the rendered-flag
tables means "not a command-line option for this router" (e.g. llm-d's threshold lives in
the EndpointPickerConfig document, its timeout in the Envoy route).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final, Mapping

# ------------------------------------------------------------------------------------------
# llm-d-router: Endpoint Picker (EPP) + Envoy, and the P/D routing sidecar on decoders
# ------------------------------------------------------------------------------------------

LLMD_SOURCE: Final = "github.com/llm-d/llm-d-router@v0.10.0 (71f4f0999f95b96c49a9d0c4afbd18dfdb943c26)"

LLMD_EPP_IMAGE: Final = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
LLMD_EPP_ENTRYPOINT: Final = ("/app/epp",)
LLMD_SIDECAR_IMAGE: Final = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
LLMD_SIDECAR_ENTRYPOINT: Final = ("/app/pd-sidecar",)
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
# Values of --kv-connector (pkg/sidecar/constants/constants.go). "mooncake" since v0.9.0
# (PR #1193); v0.8.0 knew only nixlv2, shared-storage, sglang.
LLMD_SIDECAR_KV_CONNECTORS: Final = ("nixlv2", "shared-storage", "sglang", "mooncake", "offloading")

# Ports (EPP defaults in options.go; Envoy ports are the operator's choice, matching the chart).
LLMD_EPP_GRPC_PORT: Final = 9002  # ext_proc, Envoy -> EPP
LLMD_EPP_HEALTH_PORT: Final = 9003  # gRPC health: services "liveness", "readiness", "inference-extension"
LLMD_EPP_METRICS_PORT: Final = 9090  # /metrics (authn/z unless --metrics-endpoint-auth=false)
LLMD_ENVOY_ADMIN_PORT: Final = 19000  # bound to 127.0.0.1
LLMD_ENVOY_READY_PORT: Final = 19001  # GET /ready (health_check filter), /stats/prometheus
LLMD_ENVOY_READY_PATH: Final = "/ready"
LLMD_SIDECAR_DECODER_PORT: Final = 8200  # vLLM behind the sidecar (sidecar default in v0.10.0)
# The sidecar answers GET /health itself (always 200); probe a path it forwards to vLLM.
LLMD_SIDECAR_FORWARDED_PROBE_PATH: Final = "/v1/models"
LLMD_PREFILLER_HEADER: Final = "x-prefiller-host-port"  # EPP -> sidecar, "<ip>:<port>"
LLMD_DESTINATION_HEADER: Final = "x-gateway-destination-endpoint"  # EPP -> Envoy ORIGINAL_DST
# POD_NAME must match this (the EPP derives its "deployment" name from it in selector mode).
LLMD_EPP_POD_NAME_PATTERN: Final = r"^(.+)-[a-z0-9]+-[a-z0-9]+$"
LLMD_EPP_ENV: Final = ("NAMESPACE", "POD_NAME")  # both from the downward API
# Pod label the core-metrics-extractor reads to pick the engine's metric names (vllm default).
LLMD_ENGINE_TYPE_LABEL: Final = "llm-d.ai/engine-type"

# EndpointPickerConfig document (apiVersion llm-d.ai/v1alpha1; the loader still accepts the
# deprecated inference.networking.x-k8s.io/v1alpha1). Plugin types the operator renders.
LLMD_CONFIG_API_VERSION: Final = "llm-d.ai/v1alpha1"
LLMD_CONFIG_KIND: Final = "EndpointPickerConfig"
LLMD_PLUGIN_LABEL_FILTER: Final = "label-selector-filter"  # params: matchLabels / matchExpressions
LLMD_PLUGIN_PREFIX_PRODUCER: Final = "approx-prefix-cache-producer"
LLMD_PLUGIN_PREFIX_SCORER: Final = "prefix-cache-scorer"  # approximate, no KV events needed
# Precise (KV-event driven, opt-in): precise-prefix-cache-producer (kvEventsConfig.discoverPods,
# podDiscoveryConfig.socketPort = 5557) feeding prefix-cache-scorer
# (prefixMatchInfoProducerName); needs a real `token-producer` (vllm render URL). The combined
# `precise-prefix-cache-scorer` type still loads but is deprecated in v0.10.0.
LLMD_PLUGIN_PRECISE_PRODUCER: Final = "precise-prefix-cache-producer"
LLMD_PLUGIN_TOKEN_PRODUCER: Final = "token-producer"
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

VLLM_ROUTER_SOURCE: Final = (
    "github.com/vllm-project/router src/main.rs@03e9af5c1982f7568d79021d80d812edecb2d702 "
    "(Rust binary, image entrypoint); pip vllm-router 0.1.17 router_args.py (Python launcher)"
)
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
# pip vllm-router 0.1.17, vllm_router/router_args.py (console script `vllm-router`).
VLLM_ROUTER_PY_FLAGS: Final = frozenset(
    {
        "api-key",
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
        "enable-program-scheduling",
        "eviction-interval-secs",
        "health-check-endpoint",
        "health-check-interval-secs",
        "health-check-timeout-secs",
        "health-failure-threshold",
        "health-success-threshold",
        "help",
        "host",
        "intra-node-data-parallel-size",
        "kv-aware-session-affinity-ttl-secs",
        "kv-connector",
        "kv-event-block-size",
        "kv-event-model",
        "kv-event-replay-source",
        "kv-event-source",
        "kv-penalty-disk",
        "kv-penalty-external",
        "kv-penalty-host",
        "log-dir",
        "log-level",
        "max-concurrent-requests",
        "max-payload-size",
        "max-tree-size",
        "mini-lb",
        "pd-kv-events",
        "policy",
        "port",
        "prefill",
        "prefill-policy",
        "prefill-selector",
        "program-scheduling-config-json",
        "prometheus-host",
        "prometheus-port",
        "queue-size",
        "queue-timeout-secs",
        "rate-limit-tokens-per-second",
        "request-id-headers",
        "request-timeout-secs",
        "retry-backoff-multiplier",
        "retry-initial-backoff-ms",
        "retry-jitter-factor",
        "retry-max-backoff-ms",
        "retry-max-retries",
        "router-temperature",
        "selector",
        "service-discovery",
        "service-discovery-namespace",
        "service-discovery-port",
        "vllm-discovery-address",
        "vllm-pd-disaggregation",
        "wasm-middleware",
        "wasm-middleware-route",
        "wasm-middleware-sha256",
        "worker-startup-check-interval",
        "worker-startup-timeout-secs",
        "worker-urls",
    }
)
VLLM_ROUTER_FLAGS: Final = (
    VLLM_ROUTER_RUST_FLAGS | VLLM_ROUTER_RUST_FLAGS_OTHER_REVISIONS | VLLM_ROUTER_PY_FLAGS
)
VLLM_ROUTER_KV_CONNECTORS: Final = ("nixl", "mooncake", "moriio")  # moriio: Python 0.1.17 / newer Rust
VLLM_ROUTER_POLICIES: Final = (
    "random",
    "round_robin",
    "cache_aware",
    "power_of_two",
    "consistent_hash",
    "sticky_least_loaded",
    "rendezvous_hash",
)
VLLM_ROUTER_METRICS_PORT: Final = 29000  # --prometheus-port default; host defaults to 127.0.0.1
# Prefill Pod annotation read by K8s discovery for the Mooncake bootstrap port (hard-coded).
VLLM_ROUTER_BOOTSTRAP_PORT_ANNOTATION: Final = "vllm.ai/bootstrap-port"

# ------------------------------------------------------------------------------------------
# sglang-gateway (SGLang Model Gateway, formerly sgl-router)
# ------------------------------------------------------------------------------------------

SGLANG_GATEWAY_SOURCE: Final = (
    "pip sglang-router 0.3.2 sglang_router/router_args.py (image entrypoint "
    "`python3 -m sglang_router.launch_router`, docker/gateway.Dockerfile@8448045c); "
    "sgl-model-gateway/src/main.rs@f47e04e04c2a9408b8b106fb62612daa45d4b067 (Rust CLI)"
)
SGLANG_GATEWAY_IMAGE: Final = "docker.io/lmsysorg/sgl-model-gateway:v0.3.2"  # was lmsysorg/sglang-router
SGLANG_GATEWAY_ENTRYPOINT: Final = ("python3", "-m", "sglang_router.launch_router")

# sglang_router/router_args.py (0.3.2): --host/--port/--worker-urls/--decode plus the
# f"--{prefix}..." options with an empty prefix.
SGLANG_GATEWAY_PY_FLAGS: Final = frozenset(
    {
        "api-key",
        "assignment-mode",
        "backend",
        "balance-abs-threshold",
        "balance-rel-threshold",
        "bucket-adjust-interval-secs",
        "ca-cert-paths",
        "cache-threshold",
        "cb-failure-threshold",
        "cb-success-threshold",
        "cb-timeout-duration-secs",
        "cb-window-duration-secs",
        "chat-template",
        "client-cert-path",
        "client-key-path",
        "control-plane-api-keys",
        "control-plane-audit-enabled",
        "cors-allowed-origins",
        "decode",
        "decode-policy",
        "decode-selector",
        "disable-circuit-breaker",
        "disable-health-check",
        "disable-retries",
        "dp-aware",
        "enable-igw",
        "enable-trace",
        "eviction-interval-secs",
        "health-check-endpoint",
        "health-check-interval-secs",
        "health-check-timeout-secs",
        "health-failure-threshold",
        "health-success-threshold",
        "help",
        "history-backend",
        "host",
        "jwt-audience",
        "jwt-issuer",
        "jwt-jwks-uri",
        "jwt-role-mapping",
        "log-dir",
        "log-level",
        "max-concurrent-requests",
        "max-idle-secs",
        "max-payload-size",
        "max-tree-size",
        "mcp-config-path",
        "mini-lb",
        "model-path",
        "oracle-connect-descriptor",
        "oracle-password",
        "oracle-pool-max",
        "oracle-pool-min",
        "oracle-pool-timeout-secs",
        "oracle-tns-alias",
        "oracle-username",
        "oracle-wallet-path",
        "otlp-traces-endpoint",
        "pd-disaggregation",
        "policy",
        "port",
        "postgres-db-url",
        "postgres-pool-max",
        "prefill",
        "prefill-policy",
        "prefill-selector",
        "prometheus-duration-buckets",
        "prometheus-host",
        "prometheus-port",
        "queue-size",
        "queue-timeout-secs",
        "rate-limit-tokens-per-second",
        "reasoning-parser",
        "redis-pool-max",
        "redis-retention-days",
        "redis-url",
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
        "shutdown-grace-period-secs",
        "tls-cert-path",
        "tls-key-path",
        "tokenizer-cache-enable-l0",
        "tokenizer-cache-enable-l1",
        "tokenizer-cache-l0-max-entries",
        "tokenizer-cache-l1-max-memory",
        "tokenizer-path",
        "tool-call-parser",
        "worker-startup-check-interval",
        "worker-startup-timeout-secs",
        "worker-urls",
    }
)
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
SGLANG_GATEWAY_POLICIES: Final = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
SGLANG_GATEWAY_METRICS_PORT: Final = 29000  # --prometheus-port default; host default 0.0.0.0
# Prefill Pod annotation read by K8s discovery for the bootstrap port (hard-coded, no flag).
SGLANG_GATEWAY_BOOTSTRAP_PORT_ANNOTATION: Final = "sglang.ai/bootstrap-port"

# ------------------------------------------------------------------------------------------
# Per-router tables
# ------------------------------------------------------------------------------------------

ROUTER_FLAGS: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "llm-d-router": LLMD_EPP_FLAGS,  # router.extraArgs go to the EPP container
        "vllm-router": VLLM_ROUTER_FLAGS,
        "sglang-gateway": SGLANG_GATEWAY_FLAGS,
    }
)

# How each entrypoint parses its argv, for an admission rule matching user spellings.
#   abbreviations: unique prefixes of a long option are accepted (Python argparse default)
#   repeat:        "last-wins" or "error" when a single-valued option is given twice
#   equals_form:   --flag=value accepted besides --flag value
ROUTER_PARSER: Final[Mapping[str, Mapping[str, object]]] = MappingProxyType(
    {
        "llm-d-router": MappingProxyType(
            {"parser": "go-pflag", "abbreviations": False, "repeat": "last-wins", "equals_form": True}
        ),
        "vllm-router": MappingProxyType(
            # clap 4 (image binary): repeated scalar options are an error, so every option the
            # operator renders must be owned, not merely defaulted.
            {"parser": "rust-clap", "abbreviations": False, "repeat": "error", "equals_form": True}
        ),
        "sglang-gateway": MappingProxyType(
            {"parser": "python-argparse", "abbreviations": True, "repeat": "last-wins", "equals_form": True}
        ),
    }
)

# What the operator renders, by purpose. Values are the long option(s) (with dashes) on the
# router container, or None where the router has no option for it. See docs/research/routers.md
# for the argv of a worked example.
RENDERED_FLAGS: Final[Mapping[str, Mapping[str, tuple[str, ...] | None]]] = MappingProxyType(
    {
        "llm-d-router": MappingProxyType(
            {
                # The external listener is Envoy's (config), not an EPP option.
                "listen": None,
                "ext_proc": ("--grpc-port", "--secure-serving"),
                "health": ("--grpc-health-port",),
                "metrics": ("--metrics-port", "--metrics-endpoint-auth"),
                "discovery": ("--endpoint-selector", "--endpoint-target-ports", "--pool-namespace"),
                # P/D, policy and threshold are EndpointPickerConfig content.
                "config": ("--config-text",),
                "pd": None,
                "policy": None,
                "threshold": None,
                # The request timeout is the Envoy route timeout.
                "timeout": None,
                # Rendered only when router.replicas > 1.
                "ha": ("--ha-enable-leader-election",),
            }
        ),
        "vllm-router": MappingProxyType(
            {
                "listen": ("--host", "--port"),
                "metrics": ("--prometheus-host", "--prometheus-port"),
                "discovery": (
                    "--service-discovery",
                    "--service-discovery-namespace",
                    "--service-discovery-port",
                    "--prefill-selector",
                    "--decode-selector",
                ),
                # Static alternative (the only one that works with Mooncake, see the doc).
                "static_workers": ("--prefill", "--decode"),
                "pd": ("--vllm-pd-disaggregation", "--kv-connector"),
                "policy": ("--policy",),
                "timeout": ("--request-timeout-secs",),
                "threshold": None,
            }
        ),
        "sglang-gateway": MappingProxyType(
            {
                "listen": ("--host", "--port"),
                "metrics": ("--prometheus-host", "--prometheus-port"),
                "discovery": (
                    "--service-discovery",
                    "--service-discovery-namespace",
                    "--service-discovery-port",
                    "--prefill-selector",
                    "--decode-selector",
                ),
                "static_workers": ("--prefill", "--decode"),
                "pd": ("--pd-disaggregation",),
                "policy": ("--policy",),
                "timeout": ("--request-timeout-secs",),
                "threshold": None,
            }
        ),
    }
)

# Options refused in router.extraArgs (rule 18): the rendered ones, the ones that switch the
# discovery/config source away from the rendered one, and options that break the rendered
# wiring. Names without dashes, comparable to ROUTER_FLAGS.
OWNED_FLAGS: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "llm-d-router": frozenset(
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
        )
        | LLMD_EPP_REJECTED_FLAGS,
        "vllm-router": frozenset(
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
        ),
        "sglang-gateway": frozenset(
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
        ),
    }
)

# The routing sidecar's argv is wholly the operator's (it has no extraArgs field).
LLMD_SIDECAR_RENDERED_FLAGS: Final = (
    "--port",
    "--model-server-port",  # v0.10.0+; v0.9.x only knows --vllm-port
    "--kv-connector",
    "--mooncake-bootstrap-port",
    "--secure-proxy",
    "--data-parallel-size",
)

# Probes for the router container(s): (scheme, port, path or gRPC service).
ROUTER_PROBES: Final[Mapping[str, Mapping[str, tuple[str, object, str]]]] = MappingProxyType(
    {
        "llm-d-router": MappingProxyType(
            {
                "epp_liveness": ("grpc", LLMD_EPP_HEALTH_PORT, "liveness"),
                "epp_readiness": ("grpc", LLMD_EPP_HEALTH_PORT, "readiness"),
                "envoy_readiness": ("http", LLMD_ENVOY_READY_PORT, LLMD_ENVOY_READY_PATH),
            }
        ),
        "vllm-router": MappingProxyType(
            {"liveness": ("http", "listen", "/liveness"), "readiness": ("http", "listen", "/readiness")}
        ),
        "sglang-gateway": MappingProxyType(
            {"liveness": ("http", "listen", "/liveness"), "readiness": ("http", "listen", "/readiness")}
        ),
    }
)

# RBAC the router's ServiceAccount needs in the deployment's namespace, as
# (apiGroup, resource, verbs). Conditional rules are keyed separately.
ROUTER_RBAC: Final[Mapping[str, Mapping[str, tuple[tuple[str, str, tuple[str, ...]], ...]]]] = (
    MappingProxyType(
        {
            "llm-d-router": MappingProxyType(
                {
                    # Namespaced Pod informer (controller-runtime cache ByObject Pod{namespace}).
                    "always": (("", "pods", ("get", "list", "watch")),),
                    # --ha-enable-leader-election (router.replicas > 1).
                    "leader_election": (
                        (
                            "coordination.k8s.io",
                            "leases",
                            ("get", "list", "watch", "create", "update", "patch", "delete"),
                        ),
                        ("", "events", ("create", "patch")),
                    ),
                    # Only if --metrics-endpoint-auth stays true (cluster-scoped, ClusterRole).
                    "metrics_auth_cluster": (
                        ("authentication.k8s.io", "tokenreviews", ("create",)),
                        ("authorization.k8s.io", "subjectaccessreviews", ("create",)),
                    ),
                }
            ),
            "vllm-router": MappingProxyType(
                {
                    # kube-rs watcher (list + watch), client-side label match. None in static mode.
                    "discovery": (("", "pods", ("get", "list", "watch")),),
                }
            ),
            "sglang-gateway": MappingProxyType(
                {
                    "discovery": (("", "pods", ("get", "list", "watch")),),
                }
            ),
        }
    )
)
