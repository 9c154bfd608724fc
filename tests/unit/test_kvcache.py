"""KV cache pool attachment, per engine and role kind (docs/rendering.md#kv-cache-attachment)."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import vocab
from app.admission.validate import validate
from app.control.sync import SyncSettings
from app.engines import argv as engine_argv
from app.model.context import RenderOptions
from app.world import World
from tests.conftest import world_objects
from tests.helpers import condition, engine, env_of, parent, pods, running, sync, workload

MASTER = "shared-dram-master.gpustack-system.svc:50051"


def cached(engine_name: str, kind: str = "Server", *, other: str | None = None, **role_changes) -> dict:
    md = parent("qwen-cached")
    md["spec"]["engine"] = {"name": engine_name, "version": "0.29.0" if engine_name == "vLLM" else "0.5.18"}
    role = md["spec"]["roles"][0]
    role.update({"kind": kind, **role_changes})
    if other:
        md["spec"]["roles"].append({**copy.deepcopy(role), "name": other.lower(), "kind": other})
        role["name"] = kind.lower()
    return md


def first_pod(result, role: str | None = None):
    for pod in pods(result):
        if role is None or pod["metadata"]["labels"][vocab.LABEL_COMPONENT] == role:
            return pod
    raise AssertionError("no pod")


@pytest.mark.parametrize("kind,other,kv_role", [("Server", None, "kv_both"), ("Prefill", "Decode", "kv_both"),
                                                 ("Decode", "Prefill", "kv_consumer")])
def test_vllm_renders_the_store_connector_and_the_client_file(kind, other, kv_role):
    result = sync(cached("vLLM", kind, other=other))
    pod = first_pod(result, kind.lower())
    c = engine(pod)
    argv = c["command"]
    transfer = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert transfer == {"kv_connector": "MooncakeStoreConnector", "kv_role": kv_role}
    config = json.loads(pod["metadata"]["annotations"][vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG])
    assert config == {
        "master_server_address": MASTER, "metadata_server": "P2PHANDSHAKE", "protocol": "tcp", "device_name": "",
        "global_segment_size": 0, "mode": "standalone-store", "local_buffer_size": 134217728, "tenant_id": "team-a",
    }
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == vocab.KVCACHE_VOLUME)
    assert volume["downwardAPI"]["items"] == [{"path": "mooncake.json", "fieldRef": {
        "fieldPath": f"metadata.annotations['{vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG}']"}}]
    assert {"name": vocab.KVCACHE_VOLUME, "mountPath": "/etc/gpustack/kvcache", "readOnly": True} in c["volumeMounts"]
    env = env_of(c)
    assert env[vocab.ENV_MOONCAKE_CONFIG_PATH] == "/etc/gpustack/kvcache/mooncake.json"
    assert env[vocab.ENV_MC_TE_METRIC] == "1" and env[vocab.ENV_MC_STORE_CLIENT_METRIC_BANDWIDTH] == "1"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert not any(k.startswith("MOONCAKE_") and k != vocab.ENV_MOONCAKE_CONFIG_PATH for k in env)
    assert not any(v.get("configMap") for v in pod["spec"]["volumes"])


@pytest.mark.parametrize("kind,other", [("Server", None), ("Prefill", "Decode"), ("Decode", "Prefill")])
def test_sglang_renders_the_store_by_environment_only(kind, other):
    result = sync(cached("SGLang", kind, other=other))
    pod = first_pod(result, kind.lower())
    c = engine(pod)
    argv = c["command"]
    env = env_of(c)
    assert env == {
        vocab.ENV_MOONCAKE_MASTER: MASTER,
        vocab.ENV_MOONCAKE_TE_META_DATA_SERVER: "P2PHANDSHAKE",
        vocab.ENV_MOONCAKE_PROTOCOL: "tcp",
        vocab.ENV_MOONCAKE_DEVICE: "",
        vocab.ENV_MOONCAKE_GLOBAL_SEGMENT_SIZE: "0",
        vocab.ENV_MOONCAKE_LOCAL_HOSTNAME: {"fieldRef": {"fieldPath": "status.podIP"}},
        vocab.ENV_MOONCAKE_TENANT_ID: "team-a",
        vocab.ENV_MC_TE_METRIC: "1",
        vocab.ENV_MC_STORE_CLIENT_METRIC_BANDWIDTH: "1",
    }
    # Not behind a router SGLang serves every kind aggregated, on the hierarchical cache (a routed
    # decoder's store is the decode offload's: tests/unit/test_sglang_store.py).
    assert "--enable-hierarchical-cache" in argv
    assert "--disaggregation-decode-enable-offload-kvcache" not in argv
    assert argv[argv.index("--hicache-storage-backend") + 1] == "mooncake"
    assert "--hicache-storage-backend-extra-config" not in argv
    assert vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH not in env
    assert argv[argv.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG not in pod["metadata"]["annotations"]


@pytest.mark.parametrize("engine_name", ["vLLM", "SGLang"])
def test_without_a_cache_nothing_is_attached(engine_name):
    md = parent("qwen-chat")
    md["spec"]["engine"]["name"] = engine_name
    result = sync(md)
    c = engine(pods(result)[0])
    assert not any(k.startswith(("MOONCAKE", "MC_")) for k in env_of(c))
    assert "--kv-cache-dtype" not in c["command"] and "--kv-transfer-config" not in c["command"]
    assert condition(result, vocab.COND_DOMAIN_REGISTERED)["reason"] == vocab.REASON_NOT_APPLICABLE
    assert condition(result, vocab.COND_CACHE_ATTACHED)["reason"] == vocab.REASON_NOT_APPLICABLE
    assert "kvCache" not in result.status


def test_the_dtype_setting_off_renders_no_dtype():
    result = sync(cached("vLLM"), SyncSettings(options=RenderOptions(kv_cache_dtype_owned=False)))
    assert "--kv-cache-dtype" not in engine(pods(result)[0])["command"]


def test_user_value_of_a_defaulted_variable_wins():
    result = sync(cached("vLLM", env=[{"name": "MC_TE_METRIC", "value": "0"}]))
    c = engine(pods(result)[0])
    assert [e for e in c["env"] if e["name"] == "MC_TE_METRIC"] == [{"name": "MC_TE_METRIC", "value": "0"}]


def test_take_over_role_gets_no_cache_and_reports_unmanaged():
    result = sync(cached("vLLM", command=["python", "serve.py"]))
    pod = pods(result)[0]
    assert engine(pod)["command"] == ["python", "serve.py"]
    assert "env" not in engine(pod)
    assert vocab.ANNOTATION_KVCACHE_CLIENT_CONFIG not in pod["metadata"]["annotations"]
    assert result.status["roles"][0]["unmanaged"] is True
    cache = condition(result, vocab.COND_CACHE_ATTACHED)
    assert (cache["status"], cache["reason"]) == ("Unknown", vocab.REASON_UNMANAGED)


def test_status_echoes_binding_pool_and_domain():
    result = sync(cached("vLLM"))
    assert result.status["kvCache"] == {"binding": "team-a-dram", "pool": "shared-dram",
                                        "domain": {"name": "team-a", "blockSize": 64, "dtype": "bfloat16"}}
    registered = condition(result, vocab.COND_DOMAIN_REGISTERED)
    assert (registered["status"], registered["reason"]) == ("True", vocab.REASON_REGISTERED)


def _world_with(mutate):
    objects = copy.deepcopy(world_objects())
    for obj in objects:
        mutate(obj)
    return objects


@pytest.mark.parametrize("mutate,reason", [
    (lambda o: o["kind"] == "KVCachePoolBinding" and o.update(kind="Gone"), vocab.REASON_BINDING_NOT_FOUND),
    (lambda o: o["kind"] == "KVCachePoolBinding" and o["status"].update(phase="Provisioning"),
     vocab.REASON_BINDING_NOT_READY),
    (lambda o: o["kind"] == "KVCachePoolBinding" and o["metadata"].update(deletionTimestamp="2026-11-29T00:00:00Z"),
     vocab.REASON_BINDING_DELETING),
    (lambda o: o["kind"] == "KVCachePool" and o["status"].pop("clientEndpoint"), vocab.REASON_BINDING_NOT_READY),
])
def test_an_unusable_binding_holds_new_replicas_but_keeps_running_ones(mutate, reason):
    healthy = sync(cached("vLLM"))
    observed = [running(pods(healthy)[0], "uid-0")]
    group = observed[0]["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]
    result = sync(cached("vLLM"), children=observed, world=_world_with(mutate),
                  extra_related=[workload("team-a", group)])
    kept = pods(result)
    assert [p["metadata"]["name"] for p in kept] == [observed[0]["metadata"]["name"]]
    registered = condition(result, vocab.COND_DOMAIN_REGISTERED)
    assert (registered["status"], registered["reason"]) == ("False", reason)
    assert "held" in registered["message"]
    assert not any(type(i).__name__ == "DeleteWorkload" for i in result.intents)


def test_a_moved_pool_endpoint_changes_the_fingerprint_and_rolls_one_replica_at_a_time():
    md = cached("vLLM")
    first = sync(md)
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    groups = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    moved = _world_with(lambda o: o["kind"] == "KVCachePool" and o["status"].update(clientEndpoint="new-master:50051"))
    result = sync(md, children=observed, world=moved, extra_related=groups)
    names_before = {p["metadata"]["name"] for p in observed}
    names_after = {p["metadata"]["name"] for p in pods(result)}
    assert len(names_before - names_after) == 1  # exactly one replica turned over
    deleted = [i for i in result.intents if type(i).__name__ == "DeleteWorkload"]
    assert len(deleted) == 1


# --- Property: a user's env/extraArgs cannot reach the tenant, the master or the dtype -----------

OWNED_SPELLINGS = [
    "--kv-transfer-config", "--kv_transfer_config", "--kv-transfer-conf", "--kv-transfer-config.kv_role",
    "--kv-cache-dtype", "--kv_cache_dtype", "--kv-cache-dt", "--hicache-storage-backend",
    "--hicache-storage-backend-extra-config", "--hicache-storage-backend-e",
]
ENV_NAMES = [vocab.ENV_MOONCAKE_TENANT_ID, vocab.ENV_MOONCAKE_MASTER, vocab.ENV_MOONCAKE_CONFIG_PATH,
             vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH, vocab.ENV_MOONCAKE_PROTOCOL, "MC_TE_METRIC", "OTHER"]


@settings(max_examples=80, deadline=None)
@given(
    engine_name=st.sampled_from(["vLLM", "SGLang"]),
    args=st.lists(st.tuples(st.sampled_from(OWNED_SPELLINGS + ["--max-model-len", "--trust-remote-code"]),
                            st.sampled_from(["fp8", "evil-tenant", '{"tenant_id":"x"}', "=fp8", "=auto"])),
                  max_size=3),
    env=st.lists(st.tuples(st.sampled_from(ENV_NAMES), st.sampled_from(["evil-tenant", "evil:1", "/tmp/x.json"])),
                 max_size=3, unique_by=lambda e: e[0]),
)
def test_no_admitted_user_value_changes_tenant_master_or_dtype(engine_name, args, env):
    extra: list[str] = []
    for flag, value in args:
        extra += [flag + value] if value.startswith("=") else [flag, value]
    md = cached(engine_name, extraArgs=extra, env=[{"name": n, "value": v} for n, v in env])
    verdict = validate(md, None, World.of(world_objects()))
    if not verdict.allowed:
        return  # refused at admission: nothing renders
    c = engine(pods(sync(md))[0])
    effective = env_of(c)
    options = engine_argv.parse_argv(engine_name, c["command"][3:] if engine_name == "vLLM" else c["command"][3:])
    dtypes = [o.values[0] for o in options.of("--kv-cache-dtype") if o.values]
    assert dtypes[-1:] == ["bfloat16"]
    if engine_name == "vLLM":
        assert effective[vocab.ENV_MOONCAKE_CONFIG_PATH] == "/etc/gpustack/kvcache/mooncake.json"
        transfers = [o for o in options.of("--kv-transfer-config")]
        assert len(transfers) == 1
    else:
        assert effective[vocab.ENV_MOONCAKE_TENANT_ID] == "team-a"
        assert effective[vocab.ENV_MOONCAKE_MASTER] == MASTER
        assert vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH not in effective
        assert len(options.of("--hicache-storage-backend")) == 1
        assert not options.of("--hicache-storage-backend-extra-config")


@pytest.mark.parametrize("kind,other,kv_role", [("Server", None, "kv_both"), ("Prefill", "Decode", "kv_both"),
                                                 ("Decode", "Prefill", "kv_consumer")])
def test_vllm_store_connector_on_an_ascend_pool_is_vllm_ascends(kind, other, kv_role):
    md = cached("vLLM", kind, other=other, instanceType="gpustack-ascend-910b-linux-arm64",
                resources={"accelerator": 1})
    argv = engine(first_pod(sync(md), kind.lower()))["command"]
    transfer = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert transfer == {"kv_connector": "AscendStoreConnector", "kv_role": kv_role,
                        "kv_connector_extra_config": {"backend": "mooncake"}}


def test_sglang_on_an_ascend_pool_is_unchanged():
    md = cached("SGLang", instanceType="gpustack-ascend-910b-linux-arm64", resources={"accelerator": 1})
    argv = engine(first_pod(sync(md)))["command"]
    assert argv[argv.index("--hicache-storage-backend") + 1] == "mooncake"
