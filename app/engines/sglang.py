"""SGLang: the managed command line, the Mooncake store by environment, and the direct leg.

SGLang's Mooncake store reads, in order, an extra-config argument, a config-path file, then the
MOONCAKE_* environment. The operator sets neither of the first two: that is what selects the
environment loader, the only one that can carry the Pod IP (`MOONCAKE_LOCAL_HOSTNAME`).

`SGLANG` is SGLang's entry: its parser table, owned keys and rules (app/engines/entry.py).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final, Sequence

from app import vocab
from app.api.v1 import Role
from app.engines.common import (
    EngineRender,
    cache_rendered,
    dtype_rendered,
    model_arguments,
    tenant,
    transfer_leg_rendered,
    value_env,
)
from app.engines.entry import GRPC_WHY, HOST_FLAG, LISTEN_WHY, TLS_WHY, CommandShape, Engine
from app.engines.flags import load_flags
from app.model.context import DeploymentContext

DISAGGREGATION_MODE = {vocab.ROLE_KIND_PREFILL: "prefill", vocab.ROLE_KIND_DECODE: "decode"}


def store_env(ctx: DeploymentContext) -> list[dict[str, Any]]:
    attachment = ctx.attachment
    assert attachment is not None and attachment.endpoint is not None
    return [
        value_env(vocab.ENV_MOONCAKE_MASTER, attachment.endpoint),
        value_env(vocab.ENV_MOONCAKE_TE_META_DATA_SERVER, "P2PHANDSHAKE"),
        value_env(vocab.ENV_MOONCAKE_PROTOCOL, attachment.protocol),
        value_env(vocab.ENV_MOONCAKE_DEVICE, ""),
        value_env(vocab.ENV_MOONCAKE_GLOBAL_SEGMENT_SIZE, "0"),
        {"name": vocab.ENV_MOONCAKE_LOCAL_HOSTNAME, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        value_env(vocab.ENV_MOONCAKE_TENANT_ID, tenant(ctx)),
    ]


def transfer_backend(ctx: DeploymentContext) -> str:
    """`mooncake_tcp` forces TCP on a tcp leg; every other transport is Mooncake's own choice."""
    return "mooncake_tcp" if ctx.transfer_protocol == "tcp" else "mooncake"


def disaggregated_decoder(ctx: DeploymentContext, role: Role) -> bool:
    """The role runs as SGLang's decode server (`--disaggregation-mode decode`): a routed pair's Decode."""
    return transfer_leg_rendered(ctx, role) and role.kind == vocab.ROLE_KIND_DECODE


def store_arguments(ctx: DeploymentContext, role: Role) -> list[str]:
    """What makes SGLang 0.5.23 create the Mooncake store (docs/engines.md#sglang-and-the-store).

    A decode server disables its radix cache, so it cannot run the hierarchical cache; its store is
    the decode offload manager's, which exists only with --disaggregation-decode-enable-offload-kvcache.
    The cpu_tensor retraction backup keeps a second host pool from being built beside the offload's
    (SGLang refuses host_pool with the offload). Every other role (a Server, a prefiller, a Prefill
    or Decode role not behind a router, which SGLang serves aggregated) runs the hierarchical cache.
    """
    if disaggregated_decoder(ctx, role):
        return ["--disaggregation-decode-enable-offload-kvcache",
                "--disaggregation-decode-retraction-backup", "cpu_tensor",
                "--hicache-storage-backend", "mooncake"]
    return ["--enable-hierarchical-cache", "--hicache-storage-backend", "mooncake"]


def metrics_arguments(role: Role) -> list[str]:
    """SGLang serves its Prometheus `/metrics` only with `--enable-metrics` (vLLM always does); the
    operator's idleness reader, llm-d's endpoint picker and queue-length autoscalers read it, so
    every SGLang role renders it (docs/engines.md#sglang-metrics). The flag has no negative form,
    so a user's own copy in `extraArgs` is left as the one that stands."""
    return [] if vocab.SGLANG_METRICS_FLAG in role.extra_args else [vocab.SGLANG_METRICS_FLAG]


def render(ctx: DeploymentContext, role: Role, *, listen_port: int | None) -> EngineRender:
    out = EngineRender()
    load, model_args = model_arguments(ctx, out)
    # SGLang binds 127.0.0.1 by default: always render the wildcard host.
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", load, "--host", "0.0.0.0"]
    if listen_port is not None:
        argv += ["--port", str(listen_port)]
    argv += model_args
    argv += metrics_arguments(role)
    if cache_rendered(ctx, role):
        argv += store_arguments(ctx, role)
        out.env.extend(store_env(ctx))
        out.defaulted_env[vocab.ENV_MC_TE_METRIC] = "1"
        out.defaulted_env[vocab.ENV_MC_STORE_CLIENT_METRIC_BANDWIDTH] = "1"
    if transfer_leg_rendered(ctx, role):
        argv += ["--disaggregation-mode", DISAGGREGATION_MODE[role.kind],
                 "--disaggregation-transfer-backend", transfer_backend(ctx)]
        if role.kind == vocab.ROLE_KIND_PREFILL:
            argv += ["--disaggregation-bootstrap-port", str(vocab.PREFILL_BOOTSTRAP_PORT)]
            out.ports.append(("bootstrap", vocab.PREFILL_BOOTSTRAP_PORT))
    dtype = dtype_rendered(ctx, role)
    if dtype:
        argv += ["--kv-cache-dtype", dtype]
    out.argv = argv + list(role.extra_args)
    return out


def serve_args(args: Sequence[str]) -> list[str]:
    """`sglang serve` drops an exact `--model-type X` before the server parser sees the line."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--model-type":
            i += 2
            continue
        if args[i].startswith("--model-type="):
            i += 1
            continue
        out.append(args[i])
        i += 1
    return out


SGLANG: Final = Engine(
    name=vocab.ENGINE_SGLANG,
    flags=load_flags("sglang-0.5.23.json", engine=vocab.ENGINE_SGLANG, underscores_to_dashes=False,
                     dotted_members=False),
    render=render,
    owned_flags=frozenset(
        {
            "--hicache-storage-backend",
            "--hicache-storage-backend-extra-config",
            "--disaggregation-mode",
            "--disaggregation-transfer-backend",
            "--disaggregation-bootstrap-port",
        }
    ),
    owned_env=frozenset(
        {
            vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH,
            vocab.ENV_MOONCAKE_MASTER,
            vocab.ENV_MOONCAKE_TE_META_DATA_SERVER,
            vocab.ENV_MOONCAKE_PROTOCOL,
            vocab.ENV_MOONCAKE_DEVICE,
            vocab.ENV_MOONCAKE_GLOBAL_SEGMENT_SIZE,
            vocab.ENV_MOONCAKE_LOCAL_HOSTNAME,
            vocab.ENV_MOONCAKE_TENANT_ID,
            *vocab.REPLICA_ENV,
        }
    ),
    # SGLang reads its config path before the MOONCAKE_* environment.
    tenant_env=frozenset({vocab.ENV_MOONCAKE_TENANT_ID, vocab.ENV_MOONCAKE_CONFIG_PATH,
                          vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH}),
    tenant_flags=frozenset({"--hicache-storage-backend-extra-config"}),
    # SGLang 0.5.23 reads its API key from `--api-key` only.
    api_key_env=frozenset(),
    degree_flags=MappingProxyType(
        {
            "--tp-size": "tensor",
            "--pp-size": "pipeline",
            "--dp-size": "data",
            "--ep-size": "expert",
            "--attn-dp-size": "attention_data",
            "--dcp-size": "decode_context",
            "--nnodes": "nnodes",
        }
    ),
    kv_cache_dtypes=frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"}),
    command=CommandShape(
        program="sglang",
        modules=MappingProxyType({"sglang.launch_server": None, "sglang.cli.main": "serve"}),
        serve_args=serve_args,
    ),
    tensor_flag="--tp-size",
    contract_flags=MappingProxyType({HOST_FLAG: LISTEN_WHY, "--ssl-keyfile": TLS_WHY, "--ssl-certfile": TLS_WHY,
                                     "--grpc-mode": GRPC_WHY}),
)
