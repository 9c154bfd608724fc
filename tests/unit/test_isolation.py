"""Rules 20 and 21, the render's tenant guard (docs/rendering.md#the-renders-tenant-guard), bounded
status read-backs, quantities."""

from __future__ import annotations

import time

import pytest

from app import quantity, vocab
from app.admission.validate import validate
from app.control.bounds import too_many_pods
from app.render import names
from app.render.tenant import owned_path_conflict, path_relation
from app.world import World
from tests.conftest import world_objects
from tests.helpers import parent, pods, sync

WORLD = World.of(world_objects())


def refusals(md, **kwargs):
    return validate(md, None, WORLD, **kwargs).refusals


# --- rule 20 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mount, relation", [
    ("/etc/gpustack/kvcache", "at"), ("/etc/gpustack/kvcache/", "at"), ("/etc/gpustack/./kvcache", "at"),
    ("/etc/gpustack", "over"), ("/etc", "over"), ("/", "over"),
    ("/etc/gpustack/kvcache/mooncake.json", "under"), ("/etc/gpustack/kvcache/x/../mooncake.json", "under"),
])
def test_path_relation(mount, relation):
    assert path_relation(mount, vocab.KVCACHE_CONFIG_DIR) == relation


@pytest.mark.parametrize("mount", ["/etc/gpustack/kvcache2", "/models", "/etc/gpustack-kvcache", "/dev/shmx"])
def test_paths_apart_do_not_conflict(mount):
    assert owned_path_conflict(mount, vocab.OPERATOR_OWNED_MOUNT_PATHS) is None


@pytest.mark.parametrize("mount", ["/etc/gpustack/kvcache/mooncake.json", "/etc/gpustack", "/dev/shm", "/dev"])
def test_rule_20_refuses_a_mount_at_over_or_under_an_owned_path(mount):
    md = parent("qwen-cached")
    md["spec"]["roles"][0]["additionalVolumes"] = [{"mountPath": mount, "subPath": "mooncake.json",
                                                    "configMap": {"name": "mine"}}]
    found = [r for r in refusals(md) if r.path.endswith("additionalVolumes[0].mountPath")]
    assert len(found) == 1 and "which the operator mounts" in found[0].problem
    assert "roles[].command" in found[0].remedy


def test_rule_20_spares_a_take_over_role_and_other_paths():
    md = parent("qwen-cached")
    md["spec"]["roles"][0]["additionalVolumes"] = [{"mountPath": "/models", "configMap": {"name": "mine"}}]
    assert not [r for r in refusals(md) if "mountPath" in r.path]
    md["spec"]["roles"][0]["additionalVolumes"] = [{"mountPath": "/dev/shm", "hostPath": {"path": "/dev/shm"}}]
    md["spec"]["roles"][0]["command"] = ["python3", "serve.py"]
    assert not [r for r in refusals(md) if "mountPath" in r.path]


# --- rule 21 -------------------------------------------------------------------------------------


def test_rule_21_refuses_more_pods_than_the_bound_naming_each_role():
    md = parent("qwen-chat")
    md["spec"]["roles"][0].update(replicas=1024, size=4)
    found = [r for r in refusals(md) if r.path == "spec.roles" and "Pods are declared" in r.problem]
    assert len(found) == 1
    assert "4096 Pods" in found[0].problem and "server 1024×4" in found[0].problem
    assert vocab.SETTING_MAX_PODS_PER_DEPLOYMENT in found[0].problem and "several deployments" in found[0].remedy
    assert not [r for r in refusals(md, max_pods=4096) if "Pods are declared" in r.problem]


def test_the_bound_counts_replicas_times_size():
    md = parent("qwen-chat")
    md["spec"]["roles"][0].update(replicas=512, size=4)
    from app.api.v1 import ModelDeployment

    parsed = ModelDeployment.model_validate(md)
    assert too_many_pods(parsed, 2048) is None
    assert too_many_pods(parsed, 2047) is not None


# --- the render's tenant guard -----------------------------------------------------------------


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}


def test_a_stored_vllm_role_cannot_replace_the_client_configuration():
    md = parent("qwen-cached")
    role = md["spec"]["roles"][0]
    role["env"] = [{"name": "MOONCAKE_CONFIG_PATH", "value": "/tmp/mine.json"},
                   {"name": "MOONCAKE_TENANT_ID", "value": "someone-else"}, {"name": "KEEP", "value": "1"}]
    role["additionalVolumes"] = [{"mountPath": "/etc/gpustack/kvcache/mooncake.json", "subPath": "mooncake.json",
                                  "configMap": {"name": "forged"}}, {"mountPath": "/models", "configMap": {"name": "m"}}]
    result = sync(md)
    pod = pods(result)[0]
    env = env_of(pod)
    assert env["MOONCAKE_CONFIG_PATH"] == vocab.KVCACHE_CONFIG_PATH
    assert "MOONCAKE_TENANT_ID" not in env and env["KEEP"] == "1"
    mounts = [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]]
    assert "/etc/gpustack/kvcache/mooncake.json" not in mounts and "/models" in mounts
    assert mounts.count(vocab.KVCACHE_CONFIG_DIR) == 1
    events = [i for i in result.intents if getattr(i, "reason", None) == vocab.EVENT_TENANT_KEY_IGNORED]
    assert len(events) == 1 and events[0].type == vocab.EVENT_TYPE_WARNING
    for key in ("MOONCAKE_CONFIG_PATH", "MOONCAKE_TENANT_ID", "additionalVolumes[0]"):
        assert key in events[0].message
    # The same stored object gives the same Event name: recorded once, not on every sync.
    assert [i.name for i in sync(md).intents if getattr(i, "reason", None) == vocab.EVENT_TENANT_KEY_IGNORED] \
        == [events[0].name]


def test_a_stored_sglang_tenant_id_never_wins():
    md = parent("qwen-cached")
    md["spec"]["engine"] = {"name": "SGLang", "version": "0.5.18"}
    md["spec"]["roles"][0]["env"] = [{"name": "MOONCAKE_TENANT_ID", "value": "someone-else"}]
    result = sync(md)
    env = [e for e in pods(result)[0]["spec"]["containers"][0]["env"] if e["name"] == "MOONCAKE_TENANT_ID"]
    assert len(env) == 1 and env[0]["value"] != "someone-else"
    assert any(getattr(i, "reason", None) == vocab.EVENT_TENANT_KEY_IGNORED for i in result.intents)


def test_without_a_cache_the_user_variables_are_left_alone():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["env"] = [{"name": "MOONCAKE_TENANT_ID", "value": "mine"}]
    result = sync(md)
    assert env_of(pods(result)[0])["MOONCAKE_TENANT_ID"] == "mine"
    assert not any(getattr(i, "reason", None) == vocab.EVENT_TENANT_KEY_IGNORED for i in result.intents)


# --- values read back from status --------------------------------------------------------------


def test_status_desired_is_bounded_by_the_schema():
    md = parent("qwen-chat")
    md["status"] = {"roles": [{"name": "server", "desired": 10**7}]}
    started = time.perf_counter()
    result = sync(md)
    assert time.perf_counter() - started < 5
    assert len(result.intents) <= vocab.MAX_ROLE_REPLICAS * names.SLOTS + 10  # a delete per slot


# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e999999", "1e999999999999", 2**70, "9" * 30, "8Ei"])
def test_unrepresentable_quantities_are_named(value):
    problem = quantity.unrepresentable(value)
    assert problem is not None and "larger than a Kubernetes quantity can hold" in problem


@pytest.mark.parametrize("value", ["4", "500m", "16Gi", 8, "abc", "1e3", "7Ei"])
def test_ordinary_and_unparseable_quantities_are_not_judged_here(value):
    assert quantity.unrepresentable(value) is None


def test_an_instance_type_whose_unit_resources_do_not_parse_is_malformed_not_a_crash():
    import copy

    world = copy.deepcopy(world_objects())
    a10g = next(o for o in world if o["metadata"]["name"] == "gpustack-nvidia-a10g-linux-amd64")
    a10g["spec"]["unitResources"]["ram"] = "sixteen gigs"
    parsed = World.of(world)
    assert "gpustack-nvidia-a10g-linux-amd64" not in parsed.instance_types
    assert "spec.unitResources.ram" in parsed.absence(vocab.KIND_INSTANCE_TYPE, "gpustack-nvidia-a10g-linux-amd64")


@pytest.mark.parametrize("engine, args, flag", [
    ("vLLM", ["--kv_transfer_config", '{"kv_connector":"Mine"}', "--max-model-len", "4096"], "--kv-transfer-config"),
    ("vLLM", ["--kv-transfer-config={}", "--max-model-len", "4096"], "--kv-transfer-config"),
    ("SGLang", ["--hicache-storage-backend-extra", '{"tenant_id":"other"}', "--max-running-requests", "8"],
     "--hicache-storage-backend-extra-config"),
])
def test_a_stored_argument_replacing_the_client_configuration_never_wins(engine, args, flag):
    md = parent("qwen-cached")
    if engine == "SGLang":
        md["spec"]["engine"] = {"name": "SGLang", "version": "0.5.18"}
    md["spec"]["roles"][0]["extraArgs"] = args
    result = sync(md)
    command = pods(result)[0]["spec"]["containers"][0]["command"]
    assert "Mine" not in " ".join(command) and "other" not in " ".join(command)
    assert command[-2:] == args[-2:]  # the user's other arguments stay, last
    if engine == "vLLM":
        assert sum(1 for token in command if token.startswith("--kv") and "transfer" in token) == 1
    (event,) = [i for i in result.intents if getattr(i, "reason", None) == vocab.EVENT_TENANT_KEY_IGNORED]
    assert "extraArgs[0]" in event.message
