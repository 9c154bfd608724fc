"""Engine Pod hardening (docs/engines.md#pod-security): no service-account token, no privilege
escalation, the runtime's default seccomp profile, unless the role runs privileged; router Pods
keep a token only when their router reads the API."""

from __future__ import annotations

from typing import Any

import pytest

from app import vocab
from app.api.v1 import Role
from app.render.pod import engine_security_context
from tests.helpers import by_kind, engine, parent, pods, sync

RESTRICTED = {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}
EXAMPLES = ["qwen-chat", "qwen-cached", "pd-pair", "deepseek-multinode", "ascend-sglang"]


def _role(**fields: Any) -> Role:
    return Role.model_validate({"name": "server", "replicas": 1, "instanceType": "gpustack-nvidia-a10g-linux-amd64",
                                "resources": {"accelerator": 1}, **fields})


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def test_unprivileged_engine_container_is_restricted():
    assert engine_security_context(_role()) == RESTRICTED


def test_privileged_false_is_kept_beside_the_restriction():
    assert engine_security_context(_role(privileged=False)) == {"privileged": False, **RESTRICTED}


def test_privileged_role_gets_privileged_alone():
    """The API server refuses allowPrivilegeEscalation: false beside privileged: true."""
    assert engine_security_context(_role(privileged=True)) == {"privileged": True}


def test_the_context_is_a_fresh_copy_each_time():
    first = engine_security_context(_role())
    first["seccompProfile"]["type"] = "Unconfined"
    assert engine_security_context(_role()) == RESTRICTED


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_engine_pod_of_every_example_is_hardened(name):
    result = sync(parent(name))
    assert pods(result)
    for pod in pods(result):
        assert pod["spec"]["automountServiceAccountToken"] is False, pod["metadata"]["name"]
        for container in _all_containers(pod):
            assert container["securityContext"] == RESTRICTED, (pod["metadata"]["name"], container["name"])


def test_the_routing_proxy_sidecar_is_hardened_too():
    decoders = [p for p in pods(sync(parent("pd-pair")))
                if p["metadata"]["labels"][vocab.LABEL_ROLE_KIND] == "decode"]
    (proxy,) = decoders[0]["spec"]["initContainers"]
    assert proxy["name"] == vocab.CONTAINER_ROUTING_PROXY
    assert proxy["securityContext"] == RESTRICTED


def test_a_privileged_role_keeps_no_token_and_runs_privileged():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["privileged"] = True
    for pod in pods(sync(md)):
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert engine(pod)["securityContext"] == {"privileged": True}


def test_a_take_over_role_is_hardened_like_a_managed_one():
    md = parent("qwen-chat")
    md["spec"]["roles"][0]["command"] = ["vllm", "serve", "Qwen/Qwen2.5-14B-Instruct", "--port", "8000"]
    pod = pods(sync(md))[0]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert engine(pod)["securityContext"] == RESTRICTED


def test_what_the_engines_need_is_still_rendered():
    """Shared memory stays a memory-backed emptyDir at /dev/shm, and a routed pair on RDMA still
    asks the device plugin for its fabric devices (neither depends on the security context)."""
    md = parent("pd-pair")
    md["spec"]["kvTransfer"] = {"protocol": "RDMA"}
    for role in md["spec"]["roles"]:
        role["resources"]["interface"] = 2
    for pod in pods(sync(md)):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes[vocab.SHM_VOLUME]["emptyDir"]["medium"] == "Memory"
        assert {"name": vocab.SHM_VOLUME, "mountPath": vocab.SHM_PATH} in engine(pod)["volumeMounts"]
        assert engine(pod)["resources"]["limits"][vocab.RESOURCE_RDMA_DEDICATED] == "2"
        assert "hostIPC" not in pod["spec"] and "hostNetwork" not in pod["spec"]


def test_every_member_of_a_multi_host_instance_is_hardened():
    members = pods(sync(parent("deepseek-multinode")))
    assert len(members) == 2
    for pod in members:
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert engine(pod)["securityContext"] == RESTRICTED


ROUTER_TOKEN = [
    # (engine, router, Prefill/Decode pair, the router Pod mounts a token)
    ("vLLM", "llm-d-router", True, True),     # the EPP watches Pods
    ("vLLM", "llm-d-router", False, True),
    ("vLLM", "vllm-router", True, False),     # static prefill/decode list: no API reads
    ("vLLM", "vllm-router", False, True),     # Kubernetes discovery
    ("SGLang", "sglang-gateway", True, True),
    ("SGLang", "sglang-gateway", False, True),
]


@pytest.mark.parametrize("engine_name,router,paired,token", ROUTER_TOKEN)
def test_router_pods_mount_a_token_only_when_they_read_the_api(engine_name, router, paired, token):
    md = parent("pd-pair" if paired else "qwen-chat")
    md["spec"]["engine"] = {"name": engine_name, "version": "0.33.0" if engine_name == "vLLM" else "0.5.23"}
    md["spec"]["router"] = {"name": router}
    for role in md["spec"]["roles"]:
        role["extraArgs"] = ["--tp-size", "2"] if engine_name == "SGLang" else ["-tp", "2"]
    result = sync(md)
    (deployment,) = by_kind(result, "Deployment")
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is token
    assert bool(by_kind(result, "Role")) is token
    for pod in pods(result):
        assert pod["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("engine_name,router,paired,token", ROUTER_TOKEN)
def test_every_router_container_is_hardened(engine_name, router, paired, token):
    """Router containers get what engine containers get, every capability dropped (ports above 1023,
    no devices), and a non-root user on the distroless images (envoy, the EPP)."""
    md = parent("pd-pair" if paired else "qwen-chat")
    md["spec"]["engine"] = {"name": engine_name, "version": "0.33.0" if engine_name == "vLLM" else "0.5.23"}
    md["spec"]["router"] = {"name": router}
    for role in md["spec"]["roles"]:
        role["extraArgs"] = ["--tp-size", "2"] if engine_name == "SGLang" else ["-tp", "2"]
    (deployment,) = by_kind(sync(md), "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert containers
    for container in containers:
        context = container["securityContext"]
        assert {k: context[k] for k in RESTRICTED} == RESTRICTED, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        if container["name"] in ("envoy", "epp"):
            assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532
        for port in container.get("ports", []):
            assert port["containerPort"] > 1023, (container["name"], port)
