"""Properties over generated valid deployments: deterministic, schema-valid, DNS-safe, null-free."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import vocab
from app.admission.validate import validate
from app.render import names
from app.world import World
from tests.conftest import world_objects
from tests.helpers import pods, running, sync, workload

K8S_VERSION = "1.33.0"
WORLD = World.of(world_objects())
TYPES = {
    "gpustack-nvidia-a10g-linux-amd64": 8,
    "gpustack-nvidia-h20-linux-amd64": 8,
    "gpustack-ascend-910b-linux-arm64": 8,
    "gpustack-cpu-linux-amd64": 0,
}
role_names = st.from_regex(r"^[a-z][a-z0-9]{0,6}$", fullmatch=True)


@st.composite
def roles(draw) -> list[dict[str, Any]]:
    shape = draw(st.sampled_from(["server", "servers", "pd"]))
    kinds = {"server": ["Server"], "servers": ["Server", "Server"], "pd": ["Prefill", "Decode"]}[shape]
    chosen = draw(st.lists(role_names, min_size=len(kinds), max_size=len(kinds), unique=True))
    out = []
    for name, kind in zip(chosen, kinds):
        instance_type = draw(st.sampled_from(sorted(TYPES)))
        role: dict[str, Any] = {"name": name, "kind": kind, "replicas": draw(st.integers(1, 5)),
                                "size": draw(st.sampled_from([1, 1, 2, 3])), "instanceType": instance_type}
        if TYPES[instance_type]:
            role["resources"] = {"accelerator": draw(st.integers(1, 4))}
        else:
            role["image"] = "registry.local/cpu-engine:1"
        if draw(st.booleans()):
            role["env"] = [{"name": "HF_HUB_OFFLINE", "value": draw(st.sampled_from(["0", "1", ""]))}]
        if draw(st.booleans()):
            role["ports"] = [{"port": draw(st.sampled_from([8000, 8080, 9000]))}]
        if draw(st.booleans()):
            role["topology"] = {"requiredLevel": "topology.gpustack.ai/rack"}
        out.append(role)
    return out


@st.composite
def deployments(draw) -> dict[str, Any]:
    engine = draw(st.sampled_from(["vLLM", "SGLang"]))
    spec: dict[str, Any] = {
        "model": {"name": "org/model"},
        "engine": {"name": engine, "version": "0.29.0" if engine == "vLLM" else "0.5.18"},
        "roles": draw(roles()),
    }
    if draw(st.booleans()):
        spec["kvCache"] = {"poolRef": {"name": "team-a-dram"}}
    if draw(st.booleans()):
        routers = ["llm-d-router", "vllm-router" if engine == "vLLM" else "sglang-gateway"]
        spec["router"] = {"name": draw(st.sampled_from(routers)), "replicas": draw(st.integers(1, 2))}
    name = draw(st.from_regex(r"^[a-z][a-z0-9]{0,10}$", fullmatch=True))
    return {"apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT,
            "metadata": {"name": name, "namespace": "team-a", "uid": "u", "generation": 1}, "spec": spec}


def _nulls(value: Any, path: str = "$") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


def admitted(md: dict[str, Any]) -> bool:
    return validate(copy.deepcopy(md), None, WORLD).allowed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(md=deployments())
def test_children_are_deterministic_valid_and_dns_safe(md):
    if not admitted(md):
        return
    first = sync(md)
    second = sync(copy.deepcopy(md))
    assert orjson.dumps(first.children, option=orjson.OPT_SORT_KEYS) == \
        orjson.dumps(second.children, option=orjson.OPT_SORT_KEYS)
    assert first.status == second.status
    assert not _nulls(first.children) and not _nulls(first.status)
    for child in first.children:
        kubernetes_validate.validate(child, K8S_VERSION, strict=True)
        name = child["metadata"]["name"]
        if child["kind"] in ("Pod", "Service"):
            assert len(name) <= names.LABEL_MAX and names.DNS1123_LABEL.match(name), name
        if child["kind"] == "Service":
            assert names.DNS1035_LABEL.match(name), name
        if child["kind"] == "Pod" and "hostname" in child["spec"]:
            assert names.DNS1123_LABEL.match(child["spec"]["hostname"])
            assert names.DNS1123_LABEL.match(child["spec"]["subdomain"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(md=deployments(), delta=st.integers(-3, 3), which=st.integers(0, 1))
def test_a_replicas_change_leaves_surviving_pods_identical(md, delta, which):
    if not admitted(md):
        return
    first = sync(md)
    observed = [running(p, f"uid-{i}") for i, p in enumerate(pods(first))]
    groups = {p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME] for p in observed}
    related = [workload("team-a", g) for g in groups]
    changed = copy.deepcopy(md)
    role = changed["spec"]["roles"][which % len(changed["spec"]["roles"])]
    role["replicas"] = max(1, min(1024, role["replicas"] + delta))
    if not admitted(changed):
        return
    second = sync(changed, children=observed, extra_related=related)
    after = {p["metadata"]["name"]: p for p in pods(second)}
    for pod in pods(first):
        labels = pod["metadata"]["labels"]
        same_role = labels[vocab.LABEL_COMPONENT] == role["name"]
        if same_role and int(labels[vocab.LABEL_POD_ORDINAL]) >= role["replicas"]:
            assert pod["metadata"]["name"] not in after
            continue
        assert orjson.dumps(after[pod["metadata"]["name"]], option=orjson.OPT_SORT_KEYS) == \
            orjson.dumps(pod, option=orjson.OPT_SORT_KEYS)
