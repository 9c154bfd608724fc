"""vLLM: the managed command line, the Mooncake client file, KV events and the direct leg, and
vLLM's entry (`VLLM`: its parser table, owned keys and rules; app/engines/entry.py)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final

from app import vocab
from app.api.v1 import Role
from app.engines.common import (
    LEG_KV_ROLE,
    STORE_KV_ROLE,
    EngineRender,
    cache_rendered,
    compact_json,
    dtype_rendered,
    model_arguments,
    on_ascend,
    tenant,
    transfer_leg_rendered,
    value_env,
)
from app.engines.entry import GRPC_WHY, HOST_FLAG, LISTEN_WHY, TLS_WHY, CommandShape, Engine
from app.engines.flags import load_flags
from app.model.context import DeploymentContext

STORE_CONNECTOR = "MooncakeStoreConnector"
DIRECT_CONNECTOR = "MooncakeConnector"
# On an Ascend pool only the connector names change (docs/rendering.md#kv-cache-attachment):
# vllm-ascend's registered names.
ASCEND_STORE_CONNECTOR = "AscendStoreConnector"
ASCEND_STORE_BACKEND = "mooncake"
ASCEND_DIRECT_CONNECTOR = "MooncakeConnectorV1"
MULTI_CONNECTOR = "MultiConnector"
LOCAL_BUFFER_SIZE = 134217728


def client_config(ctx: DeploymentContext) -> dict[str, Any]:
    """The MooncakeStoreConnector client JSON (read from MOONCAKE_CONFIG_PATH)."""
    attachment = ctx.attachment
    assert attachment is not None and attachment.endpoint is not None
    return {
        "master_server_address": attachment.endpoint,
        "metadata_server": "P2PHANDSHAKE",
        "protocol": attachment.protocol,
        "device_name": "",
        "global_segment_size": 0,
        "mode": "standalone-store",
        "local_buffer_size": LOCAL_BUFFER_SIZE,
        "tenant_id": tenant(ctx),
    }


def kv_events_config() -> dict[str, Any]:
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{vocab.KV_EVENTS_PORT}",
        "replay_endpoint": f"tcp://*:{vocab.KV_EVENTS_REPLAY_PORT}",
        "buffer_steps": 10000,
        "hwm": 100000,
        "max_queue_size": 100000,
        "topic": "kv@",
    }


def direct_connector(ctx: DeploymentContext, role: Role) -> dict[str, Any]:
    """The direct P/D leg, told its effective transport (else it runs on the engine's default one)."""
    name = ASCEND_DIRECT_CONNECTOR if on_ascend(ctx, role) else DIRECT_CONNECTOR
    return {"kv_connector": name, "kv_role": LEG_KV_ROLE[role.kind],
            "kv_connector_extra_config": {"mooncake_protocol": VLLM.leg_protocol(ctx, role)}}


def store_connector(ctx: DeploymentContext, role: Role) -> dict[str, Any]:
    """The Mooncake store connector; vllm-ascend's on an Ascend pool, which names its store backend."""
    if on_ascend(ctx, role):
        return {"kv_connector": ASCEND_STORE_CONNECTOR, "kv_role": STORE_KV_ROLE[role.kind],
                "kv_connector_extra_config": {"backend": ASCEND_STORE_BACKEND}}
    return {"kv_connector": STORE_CONNECTOR, "kv_role": STORE_KV_ROLE[role.kind]}


def kv_transfer_config(ctx: DeploymentContext, role: Role) -> dict[str, Any] | None:
    """Store connector for a cache, direct connector for a routed pair, both through MultiConnector.

    Inside a MultiConnector the outer role is the direct leg's (kv_producer/kv_consumer); the store
    connector keeps its own (kv_both on a prefiller)."""
    connectors = []
    if transfer_leg_rendered(ctx, role):
        connectors.append(direct_connector(ctx, role))
    if cache_rendered(ctx, role):
        connectors.append(store_connector(ctx, role))
    if not connectors:
        return None
    if len(connectors) == 1:
        return connectors[0]
    return {"kv_connector": MULTI_CONNECTOR, "kv_role": LEG_KV_ROLE[role.kind],
            "kv_connector_extra_config": {"connectors": connectors}}


def render(ctx: DeploymentContext, role: Role, *, listen_port: int | None) -> EngineRender:
    """A managed vLLM role. `listen_port` None means the user's own --port stays in charge."""
    out = EngineRender()
    load, model_args = model_arguments(ctx, out)
    argv = ["vllm", "serve", load, "--host", "0.0.0.0"]
    if listen_port is not None:
        argv += ["--port", str(listen_port)]
    argv += model_args
    transfer = kv_transfer_config(ctx, role)
    if transfer is not None:
        argv += ["--kv-transfer-config", compact_json(transfer)]
    if VLLM.kv_events_rendered(ctx, role):
        argv += ["--kv-events-config", compact_json(kv_events_config())]
        out.ports += [("kv-events", vocab.KV_EVENTS_PORT), ("kv-replay", vocab.KV_EVENTS_REPLAY_PORT)]
    dtype = dtype_rendered(ctx, role)
    if dtype:
        argv += ["--kv-cache-dtype", dtype]
    if cache_rendered(ctx, role):
        out.annotations[vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG] = compact_json(client_config(ctx))
        out.volumes.append({
            "name": vocab.KVCACHE_VOLUME,
            "downwardAPI": {"items": [{
                "path": vocab.KVCACHE_CONFIG_FILE,
                "fieldRef": {"fieldPath": f"metadata.annotations['{vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG}']"},
            }]},
        })
        out.mounts.append({"name": vocab.KVCACHE_VOLUME, "mountPath": vocab.KVCACHE_CONFIG_DIR, "readOnly": True})
        out.env.append(value_env(vocab.ENV_MOONCAKE_CONFIG_PATH, vocab.KVCACHE_CONFIG_PATH))
        out.defaulted_env[vocab.ENV_MC_TE_METRIC] = "1"
        out.defaulted_env[vocab.ENV_MC_STORE_CLIENT_METRIC_BANDWIDTH] = "1"
    if transfer_leg_rendered(ctx, role):
        out.env.append(value_env(vocab.ENV_VLLM_MOONCAKE_BOOTSTRAP_PORT, str(vocab.PREFILL_BOOTSTRAP_PORT)))
        out.defaulted_env.setdefault(vocab.ENV_MC_TE_METRIC, "1")
        if VLLM.leg_protocol(ctx, role) == "tcp":
            out.defaulted_env[vocab.ENV_MC_FORCE_TCP] = "1"
        if role.kind == vocab.ROLE_KIND_PREFILL:
            out.ports.append(("bootstrap", vocab.PREFILL_BOOTSTRAP_PORT))
    out.argv = argv + list(role.extra_args)
    return out


VLLM: Final = Engine(
    name=vocab.ENGINE_VLLM,
    flags=load_flags("vllm-0.33.0.json", engine=vocab.ENGINE_VLLM, underscores_to_dashes=True, dotted_members=True),
    render=render,
    owned_flags=frozenset({"--kv-transfer-config", "--kv-events-config"}),
    owned_env=frozenset(
        {vocab.ENV_MOONCAKE_CONFIG_PATH, vocab.ENV_VLLM_MOONCAKE_BOOTSTRAP_PORT, *vocab.REPLICA_ENV}
    ),
    # The store client reads its tenant from the file MOONCAKE_CONFIG_PATH names.
    tenant_env=frozenset({vocab.ENV_MOONCAKE_CONFIG_PATH, vocab.ENV_MOONCAKE_TENANT_ID}),
    tenant_flags=frozenset({"--kv-transfer-config"}),
    api_key_env=frozenset({vocab.ENV_VLLM_API_KEY}),
    degree_flags=MappingProxyType(
        {
            "--tensor-parallel-size": "tensor",
            "--pipeline-parallel-size": "pipeline",
            "--data-parallel-size": "data",
            "--data-parallel-size-local": "data_local",
            "--decode-context-parallel-size": "decode_context",
            "--prefill-context-parallel-size": "prefill_context",
            "--nnodes": "nnodes",
        }
    ),
    kv_cache_dtypes=frozenset({"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    command=CommandShape(
        program="vllm",
        modules=MappingProxyType({"vllm.entrypoints.openai.api_server": None, "vllm.entrypoints.cli.main": "serve"}),
    ),
    tensor_flag="-tp",
    data_parallel_env=vocab.ENV_VLLM_DP_SIZE,
    publishes_kv_events=True,
    ascend_leg=True,
    proxied_decoder=True,
    contract_flags=MappingProxyType({
        HOST_FLAG: LISTEN_WHY,
        "--uds": "it serves on a Unix socket instead of TCP; " + LISTEN_WHY,
        "--ssl-keyfile": TLS_WHY,
        "--ssl-certfile": TLS_WHY,
        "--grpc": GRPC_WHY,
    }),
)
