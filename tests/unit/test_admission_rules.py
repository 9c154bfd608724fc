"""Admission: a table of bad deployments, one or more per rule of docs/admission.md#the-rules, each refused at its field path.

Every case runs the same path as the API server: the mutating webhook's patch is applied, then the
validating rules run, against the example world (plus a few cache backends and types the examples
do not have).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from app.admission.mutate import accelerator_defaults, apply_patch
from app.admission.model import Refusal, Verdict
from app.admission.validate import validate
from app.world import World, load_yaml_objects

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
A10G = "gpustack-nvidia-a10g-linux-amd64"
A10G_B = "gpustack-nvidia-a10g-b-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"
CPU = "gpustack-cpu-linux-amd64"
ASCEND = "gpustack-ascend-910b-linux-arm64"
UNOBSERVED = "gpustack-unobserved-linux-amd64"
MALFORMED = "gpustack-malformed-linux-amd64"
DELETED_AT = "2026-11-29T12:00:00Z"


def _backend(name: str, protocol: str, members: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A backend, a Ready pool on it and a Ready binding in team-a, all named after `name`."""
    return [
        {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCacheBackend", "metadata": {"name": name},
         "spec": {"transport": {"protocol": protocol}, "members": members or [{"name": "g"}]}},
        {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePool", "metadata": {"name": f"{name}-pool"},
         "spec": {"backends": [{"name": name}]},
         "status": {"phase": "Ready", "clientEndpoint": f"{name}-master:50051"}},
        {"apiVersion": "worker.gpustack.ai/v1", "kind": "KVCachePoolBinding",
         "metadata": {"name": f"team-a-{name}", "namespace": "team-a"},
         "spec": {"poolRef": {"name": f"{name}-pool"}, "domain": {"name": "team-a", "blockSize": 64, "dtype": "fp8"}},
         "status": {"phase": "Ready"}},
    ]


def _extra_world() -> list[dict[str, Any]]:
    a10g = next(o for o in load_yaml_objects(EXAMPLES / "world") if o["metadata"]["name"] == A10G)
    twin = copy.deepcopy(a10g)
    twin["metadata"]["name"] = A10G_B
    unobserved = copy.deepcopy(a10g)
    unobserved["metadata"]["name"] = UNOBSERVED
    unobserved["status"]["detail"] = {}
    malformed = copy.deepcopy(a10g)
    malformed["metadata"]["name"] = MALFORMED
    malformed["spec"]["acceleratable"] = "perhaps"
    broken = _backend("broken", "TCP")
    broken[0]["spec"]["transport"]["protocol"] = "Carrier-Pigeon"
    return [
        twin,
        unobserved,
        malformed,
        *broken,
        *_backend("mixed", "TCP", [{"name": "a"}, {"name": "b", "transport": {"protocol": "RDMA"}}]),
        *_backend("rdma", "RDMA"),
        *_backend("efa", "EFA"),
    ]


WORLD = World.of([*load_yaml_objects(EXAMPLES / "world"), *_extra_world()])


def run(obj: dict[str, Any], old: dict[str, Any] | None = None, *, world: World | None = WORLD,
        owned: bool = True) -> Verdict:
    """Mutate (as the API server would), then validate."""
    if world is not None:
        obj = apply_patch(obj, accelerator_defaults(obj, world))
    return validate(obj, old, world, kv_cache_dtype_owned=owned)


def server(**role: Any) -> dict[str, Any]:
    """One vLLM Server role on A10G."""
    body = {"name": "server", "replicas": 2, "instanceType": A10G, "resources": {"accelerator": 1}}
    body.update(role)
    return {
        "apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment",
        "metadata": {"name": "qwen", "namespace": "team-a"},
        "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "engine": {"name": "vLLM", "version": "0.29.0"},
                 "roles": [body]},
    }


def sglang(**role: Any) -> dict[str, Any]:
    obj = server(**role)
    obj["spec"]["engine"] = {"name": "SGLang", "version": "0.5.18"}
    return obj


def cached(obj: dict[str, Any], binding: str = "team-a-dram") -> dict[str, Any]:
    obj["spec"]["kvCache"] = {"poolRef": {"name": binding}}
    return obj


def pair(engine: str = "vLLM", *, router: str | None = "llm-d-router", prefill: dict[str, Any] | None = None,
         decode: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = server()
    obj["metadata"]["name"] = "pd"
    obj["spec"]["engine"] = {"name": engine, "version": "1.0"}
    obj["spec"]["roles"] = [
        {"name": "prefill", "kind": "Prefill", "instanceType": H20, "resources": {"accelerator": 2}, **(prefill or {})},
        {"name": "decode", "kind": "Decode", "instanceType": H20, "resources": {"accelerator": 2}, **(decode or {})},
    ]
    if router:
        obj["spec"]["router"] = {"name": router}
    return obj


def with_(obj: dict[str, Any], edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    edit(obj)
    return obj


def spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]


def role0(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["roles"][0]


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["deletionTimestamp"] = DELETED_AT
    return obj


@dataclass
class Case:
    id: str
    obj: dict[str, Any]
    path: str
    says: str = ""
    old: dict[str, Any] | None = None
    owned: bool = True
    says_also: list[str] = field(default_factory=list)


def eleven_roles() -> dict[str, Any]:
    obj = server()
    obj["spec"]["roles"] = [{"name": f"r{i}", "instanceType": A10G} for i in range(11)]
    return obj


CASES: list[Case] = [
    # 1 -----------------------------------------------------------------------------------------
    Case("1-eleven-roles", eleven_roles(), "spec.roles", "11 roles"),
    # 2 -----------------------------------------------------------------------------------------
    Case("2-long-names", server(name="r" * 50, replicas=12), "spec.roles[0]", "characters",
         says_also=["qwen-" + "r" * 50 + "-r11-", "shorter"]),
    Case("2-long-names-more-replicas", server(name="r" * 50, replicas=13), "spec.roles[0]", "characters",
         old=server(name="r" * 50, replicas=12)),
    Case("2-long-names-size", server(name="r" * 52, size=2, replicas=100, resources={"accelerator": 1}),
         "spec.roles[0]", "at most 63", says_also=["at most 10 replicas"]),
    # 3 -----------------------------------------------------------------------------------------
    Case("3-model", with_(server(), lambda o: spec(o)["model"].update(name="other")), "spec.model.name",
         "created rather than edited", old=server()),
    Case("3-artifact", with_(server(), lambda o: spec(o)["model"].update(artifactRef={"name": "w"})),
         "spec.model.artifactRef", "frozen", old=server()),
    Case("3-engine", with_(server(), lambda o: spec(o).update(engine={"name": "SGLang", "version": "1"})),
         "spec.engine.name", "frozen", old=server()),
    Case("3-kvcache-removed", server(), "spec.kvCache", "frozen", old=cached(server())),
    Case("3-kvcache-added", cached(server()), "spec.kvCache", "frozen", old=server()),
    Case("3-kvcache-binding", cached(server(), "team-a-rdma"), "spec.kvCache.poolRef.name", "frozen",
         old=cached(server())),
    Case("3-router-name", with_(pair(), lambda o: spec(o)["router"].update(name="vllm-router")),
         "spec.router.name", "frozen in place", old=pair()),
    Case("3-role-added", with_(server(), lambda o: spec(o)["roles"].append({"name": "more", "instanceType": A10G})),
         "spec.roles", "adds 'more'", old=server()),
    Case("3-role-renamed", server(name="renamed"), "spec.roles", "rename", old=server()),
    Case("3-kind", with_(pair(), lambda o: spec(o)["roles"][1].update(kind="Prefill")), "spec.roles[1].kind",
         "frozen", old=pair()),
    Case("3-size", server(size=2), "spec.roles[0].size", "frozen", old=server()),
    Case("3-instance-type", server(instanceType=H20), "spec.roles[0].instanceType", "frozen", old=server()),
    Case("3-accelerator", server(resources={"accelerator": 2}), "spec.roles[0].resources.accelerator", "frozen",
         old=server()),
    Case("3-interface", server(resources={"accelerator": 1, "interface": 0}), "spec.roles[0].resources.interface",
         "frozen", old=server()),
    Case("3-command", server(command=["vllm", "serve", "y"]), "spec.roles[0].command", "frozen",
         old=server(command=["vllm", "serve", "x"])),
    Case("3-command-nulled-by-merge-patch", server(), "spec.roles[0].command", "--type=json",
         old=server(command=["vllm", "serve", "x"]), says_also=["merge", "no value"]),
    Case("3-size-nulled", with_(server(), lambda o: role0(o).pop("size", None)), "spec.roles[0].size",
         "--type=json", old=server(size=2)),
    # 4 -----------------------------------------------------------------------------------------
    Case("4-type-missing", server(instanceType="no-such-type"), "spec.roles[0].instanceType", "does not exist"),
    Case("4-slice-not-offered", server(instanceType=H20, resources={"acceleratorSlicedMemoryPercentage": 50}),
         "spec.roles[0].resources.acceleratorSlicedMemoryPercentage", "offers no logical slices",
         says_also=["partitions 1g.12gb, 3g.48gb"]),
    Case("4-partition-not-offered", server(resources={"acceleratorPartitionedProfile": "1g.12gb"}),
         "spec.roles[0].resources.acceleratorPartitionedProfile", "offers no partitions"),
    Case("4-profile-not-in-inventory", server(instanceType=H20, resources={"acceleratorPartitionedProfile": "7g.96gb"}),
         "spec.roles[0].resources.acceleratorPartitionedProfile", "not in the inventory",
         says_also=["1g.12gb, 3g.48gb"]),
    Case("4-capacity", server(resources={"accelerator": 40}), "spec.roles[0].resources.accelerator",
         "capacity", says_also=["32 cards"]),
    Case("4-capacity-instance", server(instanceType=H20, size=3, resources={"accelerator": 8}),
         "spec.roles[0].resources.accelerator", "24 cards", says_also=["16 cards"]),
    Case("4-partition-and-slice", server(instanceType=H20, resources={"acceleratorPartitionedProfile": "1g.12gb",
                                                                      "acceleratorSlicedCoresPercentage": 10}),
         "spec.roles[0].resources.acceleratorPartitionedProfile", "cannot be combined"),
    Case("4-slice-needs-one-card", server(resources={"accelerator": 2, "acceleratorSlicedMemoryPercentage": 50}),
         "spec.roles[0].resources.accelerator", "share of one card"),
    Case("4-cpu-type-cards", server(instanceType=CPU, resources={"accelerator": 1}),
         "spec.roles[0].resources.accelerator", "not acceleratable"),
    Case("4-slice-unobserved", server(instanceType=UNOBSERVED, resources={"acceleratorSlicedMemoryPercentage": 50}),
         "spec.roles[0].resources.acceleratorSlicedMemoryPercentage", "has not observed its hardware yet",
         says_also=["status.detail is empty", "retry once the type's status converges"]),
    Case("4-partition-unobserved", server(instanceType=UNOBSERVED, resources={"acceleratorPartitionedProfile": "1g"}),
         "spec.roles[0].resources.acceleratorPartitionedProfile", "whether it offers a partition is not known"),
    Case("4-type-malformed", server(instanceType=MALFORMED), "spec.roles[0].instanceType", "is malformed",
         says_also=["spec.acceleratable"]),
    Case("4-fractional-cards", server(resources={"accelerator": "1500m"}), "spec.roles[0].resources.accelerator",
         "whole number"),
    # 5 -----------------------------------------------------------------------------------------
    Case("5-negative", server(resources={"accelerator": 1, "interface": -1}), "spec.roles[0].resources.interface",
         "negative"),
    Case("5-fractional", server(resources={"accelerator": 1, "interface": "1.5"}),
         "spec.roles[0].resources.interface", "whole number"),
    Case("5-no-leg", cached(server(resources={"accelerator": 1, "interface": 1})),
         "spec.roles[0].resources.interface", "no managed RDMA or EFA"),
    Case("5-no-leg-no-cache", server(resources={"accelerator": 1, "interface": 2}),
         "spec.roles[0].resources.interface", "no managed RDMA or EFA"),
    Case("5-mixed-backend", cached(server(resources={"accelerator": 1, "interface": 1}), "team-a-mixed"),
         "spec.roles[0].resources.interface", "mixes"),
    Case("5-rdma-and-efa", with_(cached(pair(prefill={"resources": {"accelerator": 2, "interface": 1}}),
                                        "team-a-efa"), lambda o: spec(o).update(kvTransfer={"protocol": "RDMA"})),
         "spec.roles[0].resources.interface", "both an RDMA and an EFA"),
    Case("5-take-over-has-no-leg", with_(pair(prefill={"resources": {"accelerator": 2, "interface": 1},
                                                       "command": ["vllm", "serve", "m"]}),
                                         lambda o: spec(o).update(kvTransfer={"protocol": "RDMA"})),
         "spec.roles[0].resources.interface", "no managed RDMA or EFA"),
    # 6 -----------------------------------------------------------------------------------------
    Case("6-explicit-zero-shared",
         with_(server(), lambda o: spec(o)["roles"].append({"name": "aux", "instanceType": A10G,
                                                             "resources": {"accelerator": 0}})),
         "spec.roles[1].resources.accelerator", "explicit 0"),
    # 7 -----------------------------------------------------------------------------------------
    Case("7-sliced-pair", pair(prefill={"instanceType": A10G, "resources": {"acceleratorSlicedMemoryPercentage": 50}},
                               decode={"instanceType": A10G_B, "resources": {"acceleratorSlicedCoresPercentage": 50}}),
         "spec.roles[1].resources", "logical slice", says_also=["nvidia-a10g"]),
    # 8 -----------------------------------------------------------------------------------------
    Case("8-too-long", with_(server(name="r" * 54, replicas=1), lambda o: o["metadata"].update(name="qwen-chat")),
         "spec.roles[0].name", "64 characters"),
    Case("8-dot", with_(server(), lambda o: o["metadata"].update(name="qwen.chat")), "metadata.name",
         "no dot", says_also=["'qwen-chat'"]),
    Case("8-digit-first", with_(server(), lambda o: o["metadata"].update(name="7b")), "metadata.name",
         "DNS-1035"),
    Case("8-capital", with_(server(), lambda o: o["metadata"].update(name="Qwen_Chat")), "metadata.name",
         "DNS-1035", says_also=["'qwen-chat'"]),
    # 9 -----------------------------------------------------------------------------------------
    Case("9-instance-service",
         with_(server(name="x", size=2, replicas=1),
               lambda o: spec(o)["roles"].append({"name": "x-r0", "instanceType": A10G})),
         "spec.roles[1].name", "qwen-x-r0", says_also=["replica 0 of role 'x'"]),
    Case("9-router-service", with_(pair(), lambda o: spec(o)["roles"][0].update(name="router")),
         "spec.roles[0].name", "pd-router"),
    # 10 ----------------------------------------------------------------------------------------
    Case("10-hostname", server(topology={"requiredLevel": "kubernetes.io/hostname"}),
         "spec.roles[0].topology.requiredLevel", "implicit"),
    Case("10-not-a-key", server(topology={"requiredLevel": "rack a"}), "spec.roles[0].topology.requiredLevel",
         "not a Kubernetes label key"),
    Case("10-bad-prefix", server(topology={"requiredLevel": "Topology_X/rack"}),
         "spec.roles[0].topology.requiredLevel", "prefix"),
    # 11 ----------------------------------------------------------------------------------------
    Case("11-server-beside-prefill", with_(pair(router=None), lambda o: spec(o)["roles"][1].update(kind="Server")),
         "spec.roles[1].kind", "Server role cannot sit beside"),
    Case("11-two-prefills",
         with_(pair(router=None), lambda o: spec(o)["roles"].append(
             {"name": "prefill2", "kind": "Prefill", "instanceType": H20, "resources": {"accelerator": 2}})),
         "spec.roles[2].kind", "second Prefill"),
    # 12: owned arguments, every spelling -------------------------------------------------------
    Case("12-underscores", server(extraArgs=["--max-model-len", "4096", "--kv_transfer_config", "{}"]),
         "spec.roles[0].extraArgs[2]", "--kv_transfer_config is --kv-transfer-config, which the operator owns on vLLM",
         says_also=["roles[].command"]),
    Case("12-prefix", server(extraArgs=["--kv-transfer-conf", "{}"]), "spec.roles[0].extraArgs[0]",
         "--kv-transfer-conf is --kv-transfer-config"),
    Case("12-equals", server(extraArgs=['--kv-transfer-config={"kv_connector":"X"}']), "spec.roles[0].extraArgs[0]",
         "--kv-transfer-config, which the operator owns on vLLM"),
    Case("12-dotted", server(extraArgs=["-tp", "1", "--kv-transfer-config.kv_role", "kv_both"]),
         "spec.roles[0].extraArgs[2]", "--kv-transfer-config.kv_role is --kv-transfer-config"),
    Case("12-dotted-underscored", server(extraArgs=["--kv_transfer_config.kv_role=kv_both"]),
         "spec.roles[0].extraArgs[0]", "is --kv-transfer-config"),
    Case("12-events", server(extraArgs=["--kv-events-config", "{}"]), "spec.roles[0].extraArgs[0]",
         "--kv-events-config, which the operator owns on vLLM"),
    Case("12-variable", server(extraArgs=["$(FLAG)", "{}"], env=[{"name": "FLAG", "value": "--kv-transfer-config"}]),
         "spec.roles[0].extraArgs[0]", "--kv-transfer-config"),
    Case("12-sglang-prefix", sglang(extraArgs=["--disaggregation-mo", "prefill"]), "spec.roles[0].extraArgs[0]",
         "--disaggregation-mo is --disaggregation-mode, which the operator owns on SGLang"),
    Case("12-sglang-equals", sglang(extraArgs=["--hicache-storage-backend=file"]), "spec.roles[0].extraArgs[0]",
         "--hicache-storage-backend, which the operator owns on SGLang"),
    Case("12-sglang-extra-config-prefix", sglang(extraArgs=["--hicache-storage-backend-e", "{}"]),
         "spec.roles[0].extraArgs[0]", "is --hicache-storage-backend-extra-config"),
    Case("12-sglang-bootstrap-prefix", sglang(extraArgs=["--disaggregation-bootstrap=9000"]),
         "spec.roles[0].extraArgs[0]", "is --disaggregation-bootstrap-port"),
    Case("12-sglang-transfer-prefix", sglang(extraArgs=["--disaggregation-transfer", "nixl"]),
         "spec.roles[0].extraArgs[0]", "is --disaggregation-transfer-backend"),
    Case("12-sglang-ambiguous-owned", sglang(extraArgs=["--hicache-storage-b", "file"]),
         "spec.roles[0].extraArgs[0]", "ambiguous"),
    # 12: owned environment ---------------------------------------------------------------------
    Case("12-env-vllm", server(env=[{"name": "A", "value": "1"}, {"name": "MOONCAKE_CONFIG_PATH", "value": "/x"}]),
         "spec.roles[0].env[1].name", "MOONCAKE_CONFIG_PATH is owned by the operator on vLLM",
         says_also=["roles[].command"]),
    Case("12-env-vllm-bootstrap", server(env=[{"name": "VLLM_MOONCAKE_BOOTSTRAP_PORT", "value": "1"}]),
         "spec.roles[0].env[0].name", "on vLLM"),
    Case("12-env-sglang-tenant", sglang(env=[{"name": "MOONCAKE_TENANT_ID", "value": "other"}]),
         "spec.roles[0].env[0].name", "MOONCAKE_TENANT_ID is owned by the operator on SGLang"),
    Case("12-env-sglang-tenant-take-over",
         sglang(command=["python3", "-m", "sglang.launch_server"], env=[{"name": "MOONCAKE_TENANT_ID", "value": "x"}]),
         "spec.roles[0].env[0].name", "reuse domain"),
    Case("12-env-sglang-master", sglang(env=[{"name": "MOONCAKE_MASTER", "value": "x:1"}]),
         "spec.roles[0].env[0].name", "on SGLang"),
    Case("12-env-sglang-config-path", sglang(env=[{"name": "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", "value": "x"}]),
         "spec.roles[0].env[0].name", "on SGLang"),
    Case("12-env-replica-at-size-1", server(env=[{"name": "GPUSTACK_REPLICA_SIZE", "value": "1"}]),
         "spec.roles[0].env[0].name", "every size"),
    Case("12-env-replica-take-over", server(command=["sh", "-c", "x"], env=[{"name": "GPUSTACK_MEMBER_INDEX",
                                                                            "value": "0"}]),
         "spec.roles[0].env[0].name", "GPUSTACK_MEMBER_INDEX"),
    # 13 ----------------------------------------------------------------------------------------
    Case("13-dtype", cached(server(extraArgs=["--kv-cache-dtype", "fp8"])), "spec.roles[0].extraArgs[0]",
         "bfloat16", says_also=["another dtype", "roles[].command", "team-a-dram"]),
    Case("13-dtype-spelling", cached(server(extraArgs=["--kv_cache_dtype=fp8"])), "spec.roles[0].extraArgs[0]",
         "--kv_cache_dtype is --kv-cache-dtype"),
    Case("13-dtype-sglang-prefix", cached(sglang(extraArgs=["--kv-cache-dt", "bf16"])),
         "spec.roles[0].extraArgs[0]", "--kv-cache-dt is --kv-cache-dtype, which the operator owns on SGLang"),
    Case("13-stored-flag-next-update", cached(server(replicas=3, extraArgs=["--kv-cache-dtype", "fp8"])),
         "spec.roles[0].extraArgs[0]", "stored deployment carries it",
         old=cached(server(extraArgs=["--kv-cache-dtype", "fp8"]))),
    Case("13-added-while-deleting", deleting(cached(server(extraArgs=["--kv-cache-dtype", "fp8"]))),
         "spec.roles[0].extraArgs[0]", "--kv-cache-dtype", old=cached(server())),
    # 14 ----------------------------------------------------------------------------------------
    Case("14-port-differs", server(ports=[{"port": 9000}], extraArgs=["--port", "9001"]),
         "spec.roles[0].extraArgs[0]", "declares 9000", says_also=["9001", "spec.roles[0].ports[0].port"]),
    Case("14-port-differs-take-over", server(ports=[{"port": 9000}], command=["vllm", "serve", "m", "--port=9001"]),
         "spec.roles[0].command[3]", "declares 9000"),
    Case("14-port-unreadable", server(extraArgs=["--port", "http"]), "spec.roles[0].extraArgs[0]", "integer"),
    Case("14-kv-events-port-passed", with_(server(extraArgs=["--port", "5557"]),
                                           lambda o: spec(o).update(router={"name": "llm-d-router"})),
         "spec.roles[0].extraArgs[0]", "reserved"),
    Case("14-kv-events-port-declared", with_(server(ports=[{"port": 5558}]),
                                             lambda o: spec(o).update(router={"name": "vllm-router"})),
         "spec.roles[0].ports[0].port", "KV-event replay"),
    Case("14-bootstrap-port", pair(prefill={"ports": [{"port": 8998}]}), "spec.roles[0].ports[0].port",
         "bootstrap"),
    Case("14-bootstrap-port-cached-pair", cached(pair(router=None, prefill={"extraArgs": ["--port", "8998"]})),
         "spec.roles[0].extraArgs[0]", "bootstrap"),
    Case("14-proxied-decoder-port", pair(decode={"extraArgs": ["--port", "8000"]}), "spec.roles[1].extraArgs[0]",
         "routing proxy owns the external port 8000"),
    Case("14-proxied-decoder-declared", pair(decode={"ports": [{"port": 9000}], "extraArgs": ["--port=9000"]}),
         "spec.roles[1].extraArgs[0]", "routing proxy"),
    Case("14-proxied-decoder-internal-port", pair(decode={"ports": [{"port": 8200}]}), "spec.roles[1].ports[0].port",
         "behind the routing proxy"),
    # 15 ----------------------------------------------------------------------------------------
    Case("15-missing-value", server(extraArgs=["--enforce-eager", "-tp"]), "spec.roles[0].extraArgs[1]",
         "no value"),
    Case("15-not-integer", server(extraArgs=["--tensor_parallel_size=two"]), "spec.roles[0].extraArgs[0]",
         "whole number"),
    Case("15-zero", sglang(extraArgs=["--tp", "0"]), "spec.roles[0].extraArgs[0]", "at least 1"),
    Case("15-env", server(env=[{"name": "VLLM_DP_SIZE", "value": "many"}]), "spec.roles[0].env[0].value",
         "whole number"),
    Case("15-width", server(extraArgs=["-tp", "2", "-pp", "2"]), "spec.roles[0].extraArgs", "width of 4",
         says_also=["1 card(s)"]),
    Case("15-width-take-over", server(resources={"accelerator": 2},
                                      command=["python3", "-m", "vllm.entrypoints.openai.api_server", "-tp", "4"]),
         "spec.roles[0].command", "width of 4"),
    Case("15-width-sglang-dp", sglang(resources={"accelerator": 4}, extraArgs=["--tp", "2", "--dp", "4"]),
         "spec.roles[0].extraArgs", "width of 8"),
    # 16 ----------------------------------------------------------------------------------------
    Case("16-blank-pool-ref", cached(server(), " "), "spec.kvCache.poolRef.name", "empty"),
    Case("16-empty-pool-ref", cached(server(), ""), "spec.kvCache.poolRef.name", ""),
    Case("16-new-binding-mixed", cached(server(), "team-a-mixed"), "spec.kvCache.poolRef.name",
         "different protocols", says_also=["rdma, tcp"]),
    # 17 ----------------------------------------------------------------------------------------
    Case("17-no-version", with_(server(), lambda o: spec(o)["engine"].pop("version")), "spec.engine.version",
         "'server'"),
    Case("17-one-role-without-image",
         with_(pair(router=None, prefill={"image": "mine"}), lambda o: spec(o)["engine"].pop("version")),
         "spec.engine.version", "'decode'"),
    # 18 ----------------------------------------------------------------------------------------
    Case("18-vllm-router-on-sglang", with_(pair("SGLang"), lambda o: spec(o)["router"].update(name="vllm-router")),
         "spec.router.name", "vLLM engines only"),
    Case("18-gateway-on-vllm", with_(pair(), lambda o: spec(o)["router"].update(name="sglang-gateway")),
         "spec.router.name", "SGLang engines only"),
    Case("18-threshold", with_(pair(), lambda o: spec(o)["router"].update(name="vllm-router",
                                                                          disaggregationThresholdTokens=10)),
         "spec.router.disaggregationThresholdTokens", "llm-d-router only"),
    Case("18-llmd-owned", with_(pair(), lambda o: spec(o)["router"].update(extraArgs=["--v=2", "--grpc-port=9"])),
         "spec.router.extraArgs[1]", "--grpc-port"),
    Case("18-vllm-router-owned", with_(pair(), lambda o: spec(o)["router"].update(name="vllm-router",
                                                                                  extraArgs=["--policy", "random"])),
         "spec.router.extraArgs[0]", "--policy"),
    Case("18-gateway-prefix", with_(pair("SGLang"), lambda o: spec(o)["router"].update(
        name="sglang-gateway", extraArgs=["--prefill-sel=x"])), "spec.router.extraArgs[0]",
         "--prefill-sel is --prefill-selector"),
    # 19 ----------------------------------------------------------------------------------------
    Case("19-declared-port", pair(decode={"ports": [{"port": 8100}]}), "spec.roles[1].ports[0].port",
         "prefill 8000 (spec.roles[0]), decode 8100 (spec.roles[1])", says_also=["dials one target port",
                                                                               "serve every routed role on one port"]),
    Case("19-own-port", pair(prefill={"ports": [{"port": 9000}]}), "spec.roles[1].ports", "prefill 9000",
         says_also=["decode 8000"]),
    Case("19-own-port-flag", pair("SGLang", prefill={"extraArgs": ["--port", "9000"]},
                                  decode={"extraArgs": ["--port", "9100"]}), "spec.roles[1].extraArgs",
         "prefill 9000 (spec.roles[0]), decode 9100 (spec.roles[1])"),
    # the transport of an Ascend pool (docs/rendering.md#kv-cache-attachment) ------------------
    Case("ascend-rdma", with_(pair(prefill={"instanceType": ASCEND}, decode={"instanceType": ASCEND}),
                              lambda o: spec(o).update(kvTransfer={"protocol": "RDMA"})),
         "spec.kvTransfer.protocol", "RDMA is not a transport of an Ascend pool", says_also=["CANN or Auto"]),
    Case("ascend-tcp-one-role", with_(pair(decode={"instanceType": ASCEND}),
                                      lambda o: spec(o).update(kvTransfer={"protocol": "TCP"})),
         "spec.kvTransfer.protocol", f"decode ({ASCEND})"),
    # additionalVolumes ------------------------------------------------------------------------
    Case("subpath-dotdot", server(additionalVolumes=[{"mountPath": "/data", "subPath": "a/../../b",
                                                      "configMap": {"name": "c"}}]),
         "spec.roles[0].additionalVolumes[0].subPath", "'..'"),
    Case("subpath-absolute", server(additionalVolumes=[{"mountPath": "/data", "subPath": "/etc",
                                                        "secret": {"name": "s"}}]),
         "spec.roles[0].additionalVolumes[0].subPath", "absolute"),
    Case("volume-two-sources", server(additionalVolumes=[{"mountPath": "/data", "secret": {"name": "s"},
                                                          "configMap": {"name": "c"}}]),
         "spec.roles[0].additionalVolumes[0]", "2 sources"),
    # 22: a prefill/decode pair parks and wakes as a pair (docs/scale-to-zero.md#zero-replicas) ----
    Case("22-prefill-parked-alone", pair(prefill={"replicas": 0}), "spec.roles[0].replicas",
         "declares 0 replicas while its pair 'decode'", says_also=["both roles' replicas to 0"]),
    Case("22-decode-parked-alone", pair(decode={"replicas": 0}, prefill={"replicas": 2}), "spec.roles[1].replicas",
         "parks and wakes as a pair"),
    # shape the API server's list-map keys enforce (offline runs included) -----------------------
    Case("duplicate-role", with_(server(), lambda o: spec(o)["roles"].append(copy.deepcopy(role0(o)))),
         "spec.roles[1].name", "already used"),
]


def _find(verdict: Verdict, path: str) -> list[Refusal]:
    return [r for r in verdict.refusals if r.path == path]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_refused_at_its_field_path(case: Case) -> None:
    verdict = run(case.obj, case.old, owned=case.owned)
    hits = _find(verdict, case.path)
    assert hits, f"no refusal at {case.path}; got:\n" + "\n".join(map(str, verdict.refusals))
    text = "\n".join(str(r) for r in hits)
    for fragment in [case.says, *case.says_also]:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    for refusal in hits:
        assert refusal.problem and refusal.remedy
        assert str(refusal).startswith(f"{case.path}: ") and " — " in str(refusal)


def test_every_rule_has_a_case() -> None:
    numbered = {c.id.split("-")[0] for c in CASES}
    assert {str(n) for n in range(1, 19)} <= numbered


# --- accepted variants: the rules' edges --------------------------------------------------------

ACCEPTED: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("sglang-config-path-is-a-plain-variable-on-vllm",
     server(env=[{"name": "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", "value": "/x"}]), None),
    ("tenant-is-a-plain-variable-on-vllm", server(env=[{"name": "MOONCAKE_TENANT_ID", "value": "x"}]), None),
    ("vllm-config-path-is-a-plain-variable-on-sglang", sglang(env=[{"name": "MOONCAKE_CONFIG_PATH", "value": "/x"}]),
     None),
    ("sglang-owned-flag-is-plain-on-vllm-prefix-aside", server(extraArgs=["--enable-prefix-caching"]), None),
    ("take-over-keeps-cache-env", sglang(command=["python3", "-m", "sglang.launch_server", "--model-path", "m"],
                                         env=[{"name": "MOONCAKE_MASTER", "value": "m:1"}]), None),
    ("extra-args-inert-beside-command", server(command=["sh", "-c", "exec vllm serve m"],
                                               extraArgs=["--kv-transfer-config", "{}"]), None),
    ("dtype-without-kv-cache", server(extraArgs=["--kv-cache-dtype", "fp8"]), None),
    ("dtype-on-take-over", cached(server(command=["vllm", "serve", "m", "--kv-cache-dtype", "fp8"])), None),
    ("dtype-stored-and-deleting", deleting(cached(server(extraArgs=["--kv-cache-dtype", "fp8"]))),
     cached(server(extraArgs=["--kv-cache-dtype", "fp8"]))),
    ("dtype-stored-and-deleting-with-an-edit", deleting(cached(server(replicas=1, extraArgs=["--kv-cache-dtype",
                                                                                           "fp8"]))),
     cached(server(extraArgs=["--kv-cache-dtype", "fp8"]))),
    ("explicit-zero-on-unshared-type", server(resources={"accelerator": 0}), None),
    ("port-agrees", server(ports=[{"port": 9000}], extraArgs=["--port=9000"]), None),
    ("proxied-decoder-own-engine-port", pair(prefill={"ports": [{"port": 9000}]},
                                             decode={"ports": [{"port": 9000}], "extraArgs": ["--port", "9100"]}),
     None),
    ("sglang-decoder-port-agrees", pair("SGLang", prefill={"ports": [{"port": 9000}]},
                                        decode={"ports": [{"port": 9000}], "extraArgs": ["--port", "9000"]}), None),
    ("routed-ports-agree-by-flag", pair("SGLang", prefill={"extraArgs": ["--port", "9000"]},
                                        decode={"ports": [{"port": 9000}]}), None),
    ("unrouted-pair-ports-differ", pair(router=None, decode={"ports": [{"port": 8100}]}), None),
    ("ascend-cann", with_(pair(prefill={"instanceType": ASCEND}, decode={"instanceType": ASCEND}),
                          lambda o: spec(o).update(kvTransfer={"protocol": "CANN"})), None),
    ("ascend-auto", with_(pair(prefill={"instanceType": ASCEND}, decode={"instanceType": ASCEND}),
                          lambda o: spec(o).update(kvTransfer={"protocol": "Auto"})), None),
    ("ascend-sglang-tcp", with_(pair("SGLang", prefill={"instanceType": ASCEND}, decode={"instanceType": ASCEND}),
                                lambda o: spec(o).update(kvTransfer={"protocol": "TCP"})), None),
    ("whole-cards-on-unobserved-type", server(instanceType=UNOBSERVED, resources={"accelerator": 1}), None),
    ("stored-long-names-image-edit", server(name="r" * 50, replicas=12, image="mine:2"),
     server(name="r" * 50, replicas=12, image="mine:1")),
    ("own-port-without-ports", server(extraArgs=["--port", "9100"]), None),
    ("kv-events-port-without-router", server(ports=[{"port": 5557}]), None),
    ("kv-events-port-on-sglang-router", with_(sglang(ports=[{"port": 5557}]),
                                              lambda o: spec(o).update(router={"name": "sglang-gateway"})), None),
    ("width-fits", server(resources={"accelerator": 4}, extraArgs=["-tp", "2", "-pp", "2"]), None),
    ("width-on-cpu", server(instanceType=CPU, resources={}, extraArgs=["-tp", "2"]), None),
    ("interface-on-rdma-leg", with_(pair(prefill={"resources": {"accelerator": 2, "interface": 1}},
                                         decode={"resources": {"accelerator": 2, "interface": 2}}),
                                    lambda o: spec(o).update(kvTransfer={"protocol": "RDMA"})), None),
    ("interface-on-efa-cache", cached(server(resources={"accelerator": 1, "interface": 1}), "team-a-efa"), None),
    ("binding-dtype-on-take-over-only", cached(sglang(command=["sh", "-c", "x"]), "team-a-rdma"), None),
    ("interface-zero", server(resources={"accelerator": 1, "interface": 0}), None),
    ("sliced-pair-on-different-groups",
     pair(prefill={"instanceType": A10G, "resources": {"acceleratorSlicedMemoryPercentage": 50}}), None),
    ("slice-on-a10g", server(resources={"acceleratorSlicedMemoryPercentage": 25}), None),
    ("partition-on-h20", server(instanceType=H20, resources={"acceleratorPartitionedProfile": "3g.48gb"}), None),
    ("topology-zone", server(topology={"requiredLevel": "topology.kubernetes.io/zone"}), None),
    ("topology-empty", server(topology={"requiredLevel": ""}), None),
    ("two-servers", with_(server(), lambda o: spec(o)["roles"].append({"name": "b", "instanceType": H20})), None),
    ("gateway-prefix-not-owned", with_(pair("SGLang"), lambda o: spec(o)["router"].update(
        name="sglang-gateway", extraArgs=["--log-level", "debug"])), None),
    ("vllm-router-no-abbreviations", with_(pair(), lambda o: spec(o)["router"].update(
        name="vllm-router", extraArgs=["--poli", "x"])), None),
    ("version-empty-all-images", with_(server(image="mine"), lambda o: spec(o)["engine"].pop("version")), None),
    ("replicas-edit", server(replicas=5), server()),
    ("server-parked", server(replicas=0), server()),
    ("pair-parked", pair(prefill={"replicas": 0}, decode={"replicas": 0}), pair()),
    ("router-added", with_(pair(), lambda o: spec(o).pop("router")), pair()),
    ("router-removed", pair(), with_(pair(), lambda o: spec(o).pop("router"))),
    ("stored-role-keeps-its-name", with_(server(), lambda o: o["metadata"].update(name="qwen.chat")),
     with_(server(), lambda o: o["metadata"].update(name="qwen.chat"))),
    ("mutated-default-matches-stored", server(resources={}), server()),
    ("accelerator-as-string", server(resources={"accelerator": "1"}), server()),
]


@pytest.mark.parametrize("obj,old", [(o, old) for _, o, old in ACCEPTED], ids=[i for i, _, _ in ACCEPTED])
def test_accepted(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    verdict = run(obj, old)
    assert verdict.allowed, "\n".join(map(str, verdict.refusals))


def test_all_refusals_are_reported_at_once() -> None:
    obj = pair(prefill={"extraArgs": ["--kv_transfer_config", "{}", "--port", "8998"],
                        "env": [{"name": "GPUSTACK_REPLICA_SIZE", "value": "1"}],
                        "topology": {"requiredLevel": "kubernetes.io/hostname"}},
               decode={"instanceType": "missing"})
    obj["spec"]["engine"].pop("version")
    verdict = run(obj)
    paths = {r.path for r in verdict.refusals}
    assert {"spec.roles[0].extraArgs[0]", "spec.roles[0].extraArgs[2]", "spec.roles[0].env[0].name",
            "spec.roles[0].topology.requiredLevel", "spec.roles[1].instanceType", "spec.engine.version"} <= paths


def test_setting_off_neither_renders_nor_refuses_the_dtype() -> None:
    assert run(cached(server(extraArgs=["--kv-cache-dtype", "fp8"])), owned=False).allowed
    assert run(cached(sglang(), "team-a-rdma"), owned=False).allowed


def test_api_key_is_accepted_with_a_warning() -> None:
    verdict = run(server(extraArgs=["--api-key", "k"], env=[{"name": "VLLM_API_KEY", "value": "k"}]))
    assert verdict.allowed
    text = "\n".join(map(str, verdict.warnings))
    assert "spec.roles[0].extraArgs[0]: --api-key" in text and "spec.roles[0].env[0].name: VLLM_API_KEY" in text
    assert "401" in text and "gateway" in text


def test_inert_extra_args_are_named_in_a_warning() -> None:
    verdict = run(server(command=["sh", "-c", "vllm serve m"], extraArgs=["--kv-transfer-config", "{}"]))
    assert verdict.allowed
    assert any(w.path == "spec.roles[0].extraArgs" and "inert" in w.message for w in verdict.warnings)


def test_missing_binding_is_admitted_with_a_warning() -> None:
    verdict = run(cached(server(), "no-such-binding"))
    assert verdict.allowed
    assert any("does not exist" in w.message for w in verdict.warnings)


def test_old_binding_on_a_mixed_backend_stays_editable() -> None:
    verdict = run(cached(server(replicas=4), "team-a-mixed"), cached(server(), "team-a-mixed"))
    assert verdict.allowed, verdict.refusals
    assert any("repair the pool" in w.message for w in verdict.warnings)


def test_rules_reading_an_instance_type_decline_while_deleting() -> None:
    obj = deleting(server(instanceType="gone", resources={"accelerator": 64}))
    old = server(instanceType="gone", resources={"accelerator": 64})
    verdict = validate(obj, old, WORLD)
    assert verdict.allowed, verdict.refusals


def test_an_unchanged_spec_never_blocks_teardown() -> None:
    # A stored object that a later rule would refuse: its finalizer-clearing update still passes.
    stored = server(extraArgs=["--kv-events-config", "{}"], env=[{"name": "GPUSTACK_REPLICA_SIZE", "value": "1"}])
    assert not run(stored, stored).allowed
    update = deleting(stored)
    update["metadata"]["finalizers"] = []
    assert run(update, stored).allowed


def test_a_new_role_name_is_checked_even_when_the_deployment_existed() -> None:
    # The exemption of rule 8 is per role: a role the stored object did not have is checked (its
    # Service name fails for the deployment's own name, so that is the field named).
    obj = with_(server(), lambda o: o["metadata"].update(name="qwen.chat"))
    old = with_(obj, lambda o: spec(o)["roles"].__setitem__(0, {**role0(o), "name": "other"}))
    verdict = run(obj, old)
    assert _find(verdict, "metadata.name")
    assert not _find(run(obj, obj), "metadata.name")


def test_warnings_fit_the_api_server_limit() -> None:
    verdict = run(cached(server(extraArgs=["--api-key", "k"], command=None), "team-a-mixed"),
                  cached(server(), "team-a-mixed"))
    assert all(len(str(w)) <= 256 for w in verdict.warnings)


def test_an_unobserved_type_is_never_said_to_offer_no_slices() -> None:
    verdict = run(server(instanceType=UNOBSERVED, resources={"acceleratorSlicedMemoryPercentage": 50}))
    assert not any("offers no" in str(r) for r in verdict.refusals), verdict.refusals


def test_a_malformed_backend_is_named_malformed_and_why() -> None:
    verdict = run(cached(server(), "team-a-broken"))
    assert verdict.allowed, verdict.refusals
    text = "\n".join(map(str, verdict.warnings))
    assert "KVCacheBackend 'broken'" in text and "malformed" in text and "Carrier-Pigeon" not in text
    assert "spec.transport.protocol" in text and "does not exist" not in text


def test_a_malformed_backend_holds_replicas_with_the_reason() -> None:
    from app.api.v1 import ModelDeployment
    from app.model.context import resolve_attachment

    md = ModelDeployment.model_validate(cached(server(), "team-a-broken"))
    attachment = resolve_attachment(md, WORLD)
    assert attachment is not None and not attachment.usable
    assert "malformed (spec.transport.protocol" in attachment.hold_message


IDLE: list[tuple[str, dict[str, Any], str | None]] = [
    ("two-cards-no-degree", server(resources={"accelerator": 2}), "declared width is 1 card(s) per Pod, below the 2"),
    ("four-cards-tp-2", server(resources={"accelerator": 4}, extraArgs=["-tp", "2"]), "width is 2 card(s) per Pod, below the 4"),
    ("sglang-two-cards", sglang(resources={"accelerator": 2}), "--tp-size 2"),
    ("take-over-readable", server(resources={"accelerator": 2}, command=["vllm", "serve", "m"]), "below the 2"),
    ("fits", server(resources={"accelerator": 2}, extraArgs=["-tp", "2"]), None),
    ("dp-fills", server(resources={"accelerator": 4}, extraArgs=["-tp", "2", "-dp", "2"]), None),
    ("one-card", server(), None),
    ("shell-unreadable", server(resources={"accelerator": 2}, command=["sh", "-c", "vllm serve m"]), None),
    ("cpu-type", server(instanceType=CPU, resources={}), None),
    ("slice", server(resources={"acceleratorSlicedMemoryPercentage": 50}), None),
]


@pytest.mark.parametrize("obj,says", [(o, w) for _, o, w in IDLE], ids=[i for i, _, _ in IDLE])
def test_idle_cards_warning_names_both_numbers(obj: dict[str, Any], says: str | None) -> None:
    verdict = run(obj)
    assert verdict.allowed, verdict.refusals
    idle = [w for w in verdict.warnings if "idle" in w.message]
    if says is None:
        assert not idle, idle
    else:
        assert len(idle) == 1 and says in str(idle[0]), idle
        assert str(idle[0]).startswith("spec.roles[0].")
