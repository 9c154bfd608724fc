"""Every value a hook reads, malformed, in every hook: a 4xx naming the field, never a 500.

Walked field by field (tests/api/test_fuzz.py throws random values; this one covers each quantity
and each number a rule or the render reads, by name):

- in the parent (sync, finalize and customize): a quantity that is not one, a number of the wrong
  type or out of bounds, an integer beyond int64. The parent is checked before anything is planned
  (app/api/strict.py: 400 naming `$.parent.spec...`; the model: 422 naming `spec...`).
- in the related objects (sync and finalize), as docs/architecture.md#flow-of-one-sync has it: an
  integer no API server could store is a malformed request (400 naming `$.related...`); an object
  that does not match its kind is read as absent, and what needs it says why: an InstanceType's
  field fails the render (429 + a RenderFailed Event naming the type and the field), a
  KVCachePoolBinding's holds new replicas with the DomainRegistered condition naming it (200).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from app import vocab
from tests.conftest import world_objects
from tests.helpers import parent, request

A10G = "gpustack-nvidia-a10g-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"
BINDING = "team-a-dram"
HOOKS = ("sync", "finalize", "customize")


def post(client, hook: str, body: dict[str, Any]):
    return client.post(f"/hooks/{hook}", content=json.dumps(body).encode(), headers={"content-type": "application/json"})


def body_for(hook: str, md: dict[str, Any], world: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if hook == "customize":
        return {"controller": {}, "parent": md}
    return request(md, world=world, finalizing=hook == "finalize")


def set_path(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {}) if isinstance(key, str) else obj[key]
    obj[path[-1]] = value


def role(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda md: md["spec"]["roles"][0].update(fields)


# (id, the parent's edit, the field the answer must name)
PARENT: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("accelerator-word", role(resources={"accelerator": "two"}), "spec.roles[0].resources.accelerator"),
    ("accelerator-empty", role(resources={"accelerator": ""}), "spec.roles[0].resources.accelerator"),
    ("accelerator-version", role(resources={"accelerator": "12.9.x"}), "spec.roles[0].resources.accelerator"),
    ("accelerator-huge", role(resources={"accelerator": "1e999999"}), "spec.roles[0].resources.accelerator"),
    ("accelerator-int128", role(resources={"accelerator": 2**70}), "spec.roles[0].resources.accelerator"),
    ("accelerator-fraction", role(resources={"accelerator": 1.5}), "spec.roles[0].resources.accelerator"),
    ("accelerator-list", role(resources={"accelerator": [2]}), "spec.roles[0].resources.accelerator"),
    ("interface-word", role(resources={"accelerator": 2, "interface": "abc"}), "spec.roles[0].resources.interface"),
    ("sliced-percentage-word", role(resources={"accelerator": 1, "acceleratorSlicedMemoryPercentage": "half"}),
     "spec.roles[0].resources.acceleratorSlicedMemoryPercentage"),
    ("sliced-percentage-int128", role(resources={"accelerator": 1, "acceleratorSlicedCoresPercentage": 2**70}),
     "spec.roles[0].resources.acceleratorSlicedCoresPercentage"),
    ("replicas-word", role(replicas="many"), "spec.roles[0].replicas"),
    ("replicas-int128", role(replicas=2**70), "spec.roles[0].replicas"),
    ("replicas-negative", role(replicas=-1), "spec.roles[0].replicas"),
    ("size-zero", role(size=0), "spec.roles[0].size"),
    ("size-float", role(size=1.5), "spec.roles[0].size"),
    ("port-word", role(ports=[{"port": "http"}]), "spec.roles[0].ports[0].port"),
    ("port-int128", role(ports=[{"port": 2**70}]), "spec.roles[0].ports[0].port"),
    ("grace-word", role(terminationGracePeriodSeconds="long"), "spec.roles[0].terminationGracePeriodSeconds"),
    ("router-replicas-word", lambda md: md["spec"].update(router={"name": "llm-d-router", "replicas": "many"}),
     "spec.router.replicas"),
    ("router-replicas-int128", lambda md: md["spec"].update(router={"name": "llm-d-router", "replicas": 2**70}),
     "spec.router.replicas"),
    ("router-timeout-int128", lambda md: md["spec"].update(router={"name": "llm-d-router",
                                                                   "requestTimeoutSeconds": 2**70}),
     "spec.router.requestTimeoutSeconds"),
    ("router-threshold-int128", lambda md: md["spec"].update(router={"name": "llm-d-router",
                                                                     "disaggregationThresholdTokens": 2**70}),
     "spec.router.disaggregationThresholdTokens"),
    ("router-threshold-word", lambda md: md["spec"].update(router={"name": "llm-d-router",
                                                                   "disaggregationThresholdTokens": "few"}),
     "spec.router.disaggregationThresholdTokens"),
    ("version-float", lambda md: md["spec"]["engine"].update(version=0.33), "spec.engine.version"),
]


@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("edit,field", [(e, f) for _, e, f in PARENT], ids=[i for i, *_ in PARENT])
def test_a_malformed_parent_value_is_a_4xx_naming_it(client, hook, edit, field) -> None:
    md = parent("qwen-chat")
    edit(md)
    response = post(client, hook, body_for(hook, md))
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert field in error, error


# Quantities the CRD's pattern admits but the render cannot use (the webhook refuses them; a parent
# stored past it fails its render, naming the field). Customize reads neither, so answers them.
UNUSABLE: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("interface-negative", role(resources={"accelerator": 2, "interface": "-1"}), "roles[server].resources: interface"),
    ("interface-fraction", role(resources={"accelerator": 2, "interface": "500m"}), "roles[server].resources: interface"),
    ("accelerator-negative", role(resources={"accelerator": "-2"}), "roles[server].resources: accelerator"),
    ("accelerator-fraction-string", role(resources={"accelerator": "1.5"}), "roles[server].resources: accelerator"),
]


@pytest.mark.parametrize("hook", ["sync", "finalize"])
@pytest.mark.parametrize("edit,field", [(e, f) for _, e, f in UNUSABLE], ids=[i for i, *_ in UNUSABLE])
def test_a_quantity_the_render_cannot_use_fails_the_render_naming_it(client, hook, edit, field) -> None:
    md = parent("qwen-chat")
    edit(md)
    response = post(client, hook, body_for(hook, md))
    if hook == "finalize":
        assert_torn_down(response)
        return
    assert response.status_code == 429, (response.status_code, response.text[:300])
    assert field in response.json()["error"] and "whole number" in response.json()["error"]


def assert_torn_down(response: Any) -> None:
    """A deleted deployment needs no render: finalize tears down what it cannot render by ordinal
    (docs/metacontroller.md#finalize), so a broken value never keeps the deployment from going."""
    assert response.status_code == 200, (response.status_code, response.text[:300])
    answer = response.json()
    assert answer["finalized"] is True and not [c for c in answer["children"] if c["kind"] == "Pod"]


# (id, the object, the path in it, the value, the parent, the field the answer must name, its status)
RELATED: list[tuple[str, str, tuple[Any, ...], Any, str, str, int]] = [
    ("unit-cpu-word", A10G, ("spec", "unitResources", "cpu"), "eight", "qwen-chat", "spec.unitResources.cpu", 429),
    ("unit-cpu-huge", A10G, ("spec", "unitResources", "cpu"), "1e999999", "qwen-chat", "spec.unitResources.cpu", 429),
    ("unit-ram-word", A10G, ("spec", "unitResources", "ram"), "lots", "qwen-chat", "spec.unitResources.ram", 429),
    ("local-storage-word", A10G, ("spec", "localStorage"), "big", "qwen-chat", "spec.localStorage", 429),
    ("capacity-word", A10G, ("status", "accelerator", "capacity"), "many", "qwen-chat",
     "status.accelerator.capacity", 429),
    ("capacity-int128", A10G, ("status", "accelerator", "capacity"), 2**70, "qwen-chat",
     "status.accelerator.capacity", 400),
    ("once-max-word", A10G, ("status", "accelerator", "onceMaxRequest"), "eight", "qwen-chat",
     "status.accelerator.onceMaxRequest", 429),
    ("logical-count-word", A10G, ("status", "detail", "slicedDetail", "logical", "count"), "four", "qwen-chat",
     "status.detail.slicedDetail.logical.count", 429),
    ("entrance-number", A10G, ("status", "entrance"), 7, "qwen-chat", "status.entrance", 429),
    ("runtime-versions-string", A10G, ("status", "detail", "runtimeVersions"), "12.9", "qwen-chat",
     "status.detail.runtimeVersions", 429),
    ("card-memory-word", H20, ("status", "detail", "memory"), "lots", "partitioned", "status.detail.memory", 429),
    ("profile-memory-word", H20, ("status", "detail", "slicedDetail", "physical", "profiles", 0, "memoryMib"), "x",
     "partitioned", "status.detail.slicedDetail.physical.profiles", 429),
    ("profile-memory-negative", H20, ("status", "detail", "slicedDetail", "physical", "profiles", 0, "memoryMib"), -1,
     "partitioned", "status.detail.slicedDetail.physical.profiles", 429),
    ("physical-count-word", H20, ("status", "detail", "slicedDetail", "physical", "count"), "seven", "partitioned",
     "status.detail.slicedDetail.physical.count", 429),
    ("block-size-int128", BINDING, ("spec", "domain", "blockSize"), 2**70, "qwen-cached", "spec.domain.blockSize", 400),
    ("block-size-word", BINDING, ("spec", "domain", "blockSize"), "big", "qwen-cached", "spec.domain.blockSize", 200),
]


def deployment(name: str) -> dict[str, Any]:
    if name == "partitioned":
        md = parent("qwen-chat")
        md["spec"]["roles"][0].update(instanceType=H20, extraArgs=[],
                                      resources={"accelerator": 1, "acceleratorPartitionedProfile": "1g.12gb"})
        return md
    return parent(name)


def test_the_unbroken_related_cases_render() -> None:
    """Each related case's deployment renders against the intact world (so the failure is the value's)."""
    from tests.helpers import sync

    for name in {case[4] for case in RELATED}:
        assert sync(deployment(name)).children


@pytest.mark.parametrize("hook", ["sync", "finalize"])
@pytest.mark.parametrize("name,path,value,md_name,field,status", [c[1:] for c in RELATED], ids=[c[0] for c in RELATED])
def test_a_malformed_related_value_is_named_and_never_a_500(client, hook, name, path, value, md_name, field,
                                                            status) -> None:
    world = copy.deepcopy(world_objects())
    target = next(o for o in world if o["metadata"]["name"] == name)
    set_path(target, path, value)
    response = post(client, hook, body_for(hook, deployment(md_name), world))
    if hook == "finalize" and status == 429:
        assert_torn_down(response)
        return
    assert response.status_code == status, (response.status_code, response.text[:400])
    answer = response.json()
    if status == 200:
        # Read as absent: the cache condition holds new replicas and names the object and field.
        cache = next(c for c in answer["status"]["conditions"] if c["type"] == vocab.COND_DOMAIN_REGISTERED)
        assert cache["status"] == "False" and name in cache["message"] and field in cache["message"], cache
        return
    error = answer["error"]
    assert field in error, error
    if status == 429:
        assert name in error and response.headers["Retry-After"], error

