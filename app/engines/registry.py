"""The engines the operator runs, in one place: each one's parser table and the keys it owns.

One `Engine` per `vocab.ENGINES` name holds

- `flags`: the option table of its server parser (app/engines/flags.py), read from the data file
  of one release (`version`); `scripts/extract-engine-flags.sh` regenerates the file;
- `owned_flags`, `owned_env`: the operator-owned keys (docs/rendering.md#owned-keys; refused in a user's argv/env in
  every spelling the engine reads; `--kv-cache-dtype` is owned on top while the setting says so);
- `api_key_env`: the env variables the engine reads its API key from (a warning, docs/admission.md#the-rules);
- `degree_flags`: the canonical flags of its parallel degrees, to the `argv.Degrees` field each sets;
- `kv_cache_dtypes`: the `--kv-cache-dtype` spellings (docs/cluster-objects.md#kvcachepoolbinding).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Mapping

from app import vocab
from app.engines.flags import EngineFlags, load_flags

KV_CACHE_DTYPE_FLAG: Final = "--kv-cache-dtype"
API_KEY_FLAG: Final = "--api-key"


@dataclass(frozen=True)
class Engine:
    """One engine: its parser table and what the operator owns and reads on its command line."""

    name: str
    flags: EngineFlags
    owned_flags: frozenset[str]
    owned_env: frozenset[str]
    api_key_env: frozenset[str]
    degree_flags: Mapping[str, str]
    kv_cache_dtypes: frozenset[str]

    @property
    def version(self) -> str:
        """The release the option table comes from: the version admission reads lines as."""
        return self.flags.version


VLLM: Final = Engine(
    name=vocab.ENGINE_VLLM,
    flags=load_flags("vllm-0.33.0.json", engine=vocab.ENGINE_VLLM, underscores_to_dashes=True, dotted_members=True),
    owned_flags=frozenset({"--kv-transfer-config", "--kv-events-config"}),
    owned_env=frozenset(
        {vocab.ENV_MOONCAKE_CONFIG_PATH, vocab.ENV_VLLM_MOONCAKE_BOOTSTRAP_PORT, *vocab.REPLICA_ENV}
    ),
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
)

SGLANG: Final = Engine(
    name=vocab.ENGINE_SGLANG,
    flags=load_flags("sglang-0.5.23.json", engine=vocab.ENGINE_SGLANG, underscores_to_dashes=False,
                     dotted_members=False),
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
)

ENGINES: Final[Mapping[str, Engine]] = MappingProxyType({e.name: e for e in (VLLM, SGLANG)})


def engine_for(name: str) -> Engine:
    """The engine called `name` (a `vocab.ENGINES` name); KeyError names an unknown engine."""
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; expected one of {list(ENGINES)}") from None


def flags_for(name: str) -> EngineFlags:
    """The option table of engine `name`; KeyError names an unknown engine."""
    return engine_for(name).flags
