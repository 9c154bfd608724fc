"""Prefill/decode pairs behind a router (docs/research/routers.md)."""

from __future__ import annotations

import json

import pytest
import yaml

from app import vocab
from app.control.sync import SyncSettings
from app.engines import argv as engine_argv
from app.engines import router_flags as rf
from app.engines.registry import router_for
from app.model.context import DEFAULT_ROUTER_RESOURCES, ContainerResources, RenderOptions
from app.settings import Settings
from tests.helpers import by_kind, condition, engine, env_of, parent, pods, services, sync

ROUTERS_BY_ENGINE = {"vLLM": ["llm-d-router", "vllm-router"], "SGLang": ["llm-d-router", "sglang-gateway"]}


def pair(engine_name: str, router: str, *, cache: bool = True, protocol: str | None = None) -> dict:
    md = parent("pd-pair")
    md["spec"]["engine"] = {"name": engine_name, "version": "0.29.0" if engine_name == "vLLM" else "0.5.18"}
    md["spec"]["router"] = {"name": router, "requestTimeoutSeconds": 300}
    if router == "llm-d-router":
        md["spec"]["router"]["disaggregationThresholdTokens"] = 512
    if not cache:
        md["spec"].pop("kvCache")
    if protocol:
        md["spec"]["kvTransfer"] = {"protocol": protocol}
    for role in md["spec"]["roles"]:
        role["extraArgs"] = ["--tp-size", "2"] if engine_name == "SGLang" else ["-tp", "2"]
    return md


def role_pod(result, kind: str):
    return next(p for p in pods(result) if p["metadata"]["labels"][vocab.LABEL_ROLE_KIND] == kind)


def _long_options(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0][2:] for a in args if a.startswith("--")]


CASES = [(e, r, c) for e, routers in ROUTERS_BY_ENGINE.items() for r in routers for c in (True, False)]


@pytest.mark.parametrize("engine_name,router,cache", CASES)
def test_each_router_renders_a_complete_consistent_set(engine_name, router, cache):
    result = sync(pair(engine_name, router, cache=cache))
    kinds = {c["kind"] for c in result.children}
    assert {"Deployment", "Service", "ServiceAccount"} <= kinds
    (deployment,) = by_kind(result, "Deployment")
    assert deployment["metadata"]["name"] == "pd-demo-router"
    template = deployment["spec"]["template"]
    assert template["spec"]["serviceAccountName"] == "pd-demo-router"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    router_svc = next(s for s in services(result) if s["metadata"]["name"] == "pd-demo-router")
    assert router_svc["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert result.status["endpoint"] == "http://pd-demo-router.team-a.svc:8000"
    assert result.status["router"] == {"name": router, "desired": 1, "ready": 0,
                                       "endpoint": "http://pd-demo-router.team-a.svc:8000"}
    # Every rendered router flag is one that router's parser accepts (read from its source).
    containers = {c["name"]: c for c in template["spec"]["containers"]}
    main = containers["epp"] if router == "llm-d-router" else containers["router"]
    for option in _long_options(main["args"]):
        assert option in router_for(router).flags, (router, option)
    # Roles with a Role get a RoleBinding to the router's ServiceAccount, nothing cluster-wide.
    if "Role" in kinds:
        (binding,) = by_kind(result, "RoleBinding")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pd-demo-router", "namespace": "team-a"}]
        (role,) = by_kind(result, "Role")
        assert all(rule["resources"] in (["pods"], ["leases"], ["events"]) for rule in role["rules"])
    assert "ClusterRole" not in kinds


def test_llmd_config_document_carries_filters_scorers_and_the_threshold():
    result = sync(pair("vLLM", "llm-d-router"))
    (config_map,) = by_kind(result, "ConfigMap")
    document = yaml.safe_load(config_map["data"]["epp-config.yaml"])
    types = [p["type"] for p in document["plugins"]]
    assert types.count(rf.LLMD_PLUGIN_LABEL_FILTER) == 2
    assert rf.LLMD_PLUGIN_PREFIX_SCORER in types and rf.LLMD_PLUGIN_PD_HANDLER in types
    decider = next(p for p in document["plugins"] if p["type"] == rf.LLMD_PLUGIN_PD_DECIDER)
    assert decider["parameters"] == {"nonCachedTokens": 512}
    assert {p["name"] for p in document["schedulingProfiles"]} == {"prefill", "decode"}
    envoy = yaml.safe_load(config_map["data"]["envoy.yaml"])
    route = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert route["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["timeout"] == "300s"
    (deployment,) = by_kind(result, "Deployment")
    epp = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "epp")
    selector = next(a for a in epp["args"] if a.startswith("--endpoint-selector="))
    assert "modeldeployment.gpustack.ai/role-kind in (prefill,decode)" in selector
    assert "modeldeployment.gpustack.ai/member-index=0" in selector
    assert {e["name"] for e in epp["env"]} == {"NAMESPACE", "POD_NAME"}


def test_llmd_threshold_zero_always_disaggregates():
    md = pair("vLLM", "llm-d-router")
    md["spec"]["router"]["disaggregationThresholdTokens"] = 0
    document = yaml.safe_load(by_kind(sync(md), "ConfigMap")[0]["data"]["epp-config.yaml"])
    assert rf.LLMD_PLUGIN_PD_ALWAYS in [p["type"] for p in document["plugins"]]


def test_vllm_router_lists_every_instance_statically_behind_headless_services():
    result = sync(pair("vLLM", "vllm-router"))
    (deployment,) = by_kind(result, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--kv-connector") + 1] == "mooncake" and "--vllm-pd-disaggregation" in args
    prefills = [args[i + 1] for i, a in enumerate(args) if a == "--prefill"]
    assert prefills == ["http://pd-demo-prefill-r0.team-a.svc:8000", "http://pd-demo-prefill-r1.team-a.svc:8000"]
    assert args[args.index("--prefill") + 2] == "8998"
    headless = {s["metadata"]["name"] for s in services(result) if s["spec"].get("clusterIP") == "None"}
    assert headless == {"pd-demo-prefill-r0", "pd-demo-prefill-r1", "pd-demo-decode-r0", "pd-demo-decode-r1"}
    assert not by_kind(result, "Role")  # static workers: no discovery, no Pod access


def test_sglang_gateway_discovers_by_selectors_and_prefillers_carry_the_bootstrap_annotation():
    result = sync(pair("SGLang", "sglang-gateway"))
    args = by_kind(result, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--pd-disaggregation" in args and "--service-discovery" in args
    assert args[args.index("--service-discovery-namespace") + 1] == "team-a"
    i = args.index("--prefill-selector")
    assert "modeldeployment.gpustack.ai/role-kind=prefill" in args[i + 1:i + 5]
    assert args[args.index("--request-timeout-secs") + 1] == "300"
    assert role_pod(result, "prefill")["metadata"]["annotations"]["sglang.ai/bootstrap-port"] == "8998"


@pytest.mark.parametrize("protocol,backend", [(None, "mooncake_tcp"), ("TCP", "mooncake_tcp"), ("RDMA", "mooncake")])
def test_sglang_transfer_leg(protocol, backend):
    result = sync(pair("SGLang", "sglang-gateway", cache=False, protocol=protocol))
    prefill = engine(role_pod(result, "prefill"))["command"]
    decode = engine(role_pod(result, "decode"))["command"]
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert decode[decode.index("--disaggregation-mode") + 1] == "decode"
    assert prefill[prefill.index("--disaggregation-transfer-backend") + 1] == backend
    assert prefill[prefill.index("--disaggregation-bootstrap-port") + 1] == "8998"
    for argv in (prefill, decode):
        parsed = engine_argv.parse_argv("SGLang", argv[3:])
        assert not parsed.unknown and not parsed.ambiguous


TCP_LEG = {"mooncake_protocol": "tcp"}


@pytest.mark.parametrize("cache,kind,expected", [
    (False, "prefill", {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer",
                        "kv_connector_extra_config": TCP_LEG}),
    (False, "decode", {"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer",
                       "kv_connector_extra_config": TCP_LEG}),
    # Inside a MultiConnector the outer and direct-leg roles are the leg's; the prefiller's store is kv_both.
    (True, "prefill", {"kv_connector": "MultiConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {
        "connectors": [{"kv_connector": "MooncakeConnector", "kv_role": "kv_producer",
                        "kv_connector_extra_config": TCP_LEG},
                       {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}]}}),
    (True, "decode", {"kv_connector": "MultiConnector", "kv_role": "kv_consumer", "kv_connector_extra_config": {
        "connectors": [{"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer",
                        "kv_connector_extra_config": TCP_LEG},
                       {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_consumer"}]}}),
])
def test_vllm_transfer_leg_connectors(cache, kind, expected):
    result = sync(pair("vLLM", "llm-d-router", cache=cache))
    argv = engine(role_pod(result, kind))["command"]
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == expected
    parsed = engine_argv.parse_argv("vLLM", argv[3:])
    assert not parsed.unknown and not parsed.ambiguous


def _leg(result, kind: str) -> dict:
    argv = engine(role_pod(result, kind))["command"]
    document = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    if document["kv_connector"] == "MultiConnector":
        return document["kv_connector_extra_config"]["connectors"][0]
    return document


@pytest.mark.parametrize("protocol,written", [(None, "tcp"), ("Auto", "tcp"), ("TCP", "tcp"), ("RDMA", "rdma"),
                                              ("EFA", "efa"), ("CANN", "ascend"), ("ROCM", "hip")])
@pytest.mark.parametrize("cache", [False, True])
def test_vllm_direct_leg_is_told_the_effective_protocol(protocol, written, cache):
    result = sync(pair("vLLM", "llm-d-router", cache=cache, protocol=protocol))
    for kind in ("prefill", "decode"):
        assert _leg(result, kind)["kv_connector_extra_config"] == {"mooncake_protocol": written}


def ascend_pair(*, cache: bool, protocol: str | None = None) -> dict:
    md = pair("vLLM", "llm-d-router", cache=cache, protocol=protocol)
    for role in md["spec"]["roles"]:
        role["instanceType"] = "gpustack-ascend-910b-linux-arm64"
        role["resources"] = {"accelerator": 2}
    return md


@pytest.mark.parametrize("protocol", [None, "CANN"])
def test_vllm_on_an_ascend_pool_names_the_ascend_connectors(protocol):
    result = sync(ascend_pair(cache=True, protocol=protocol))
    for kind, leg_role, store_role in (("prefill", "kv_producer", "kv_both"), ("decode", "kv_consumer", "kv_consumer")):
        argv = engine(role_pod(result, kind))["command"]
        document = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        assert document == {"kv_connector": "MultiConnector", "kv_role": leg_role, "kv_connector_extra_config": {
            "connectors": [
                {"kv_connector": "MooncakeConnectorV1", "kv_role": leg_role,
                 "kv_connector_extra_config": {"mooncake_protocol": "ascend"}},
                {"kv_connector": "AscendStoreConnector", "kv_role": store_role,
                 "kv_connector_extra_config": {"backend": "mooncake"}}]}}
        assert vocab.ENV_MC_FORCE_TCP not in env_of(engine(role_pod(result, kind)))


def test_vllm_leg_alone_on_an_ascend_pool():
    result = sync(ascend_pair(cache=False))
    assert _leg(result, "prefill") == {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer",
                                       "kv_connector_extra_config": {"mooncake_protocol": "ascend"}}


@pytest.mark.parametrize("protocol,force_tcp", [(None, True), ("RDMA", False), ("EFA", False)])
def test_vllm_tcp_leg_defaults_force_tcp(protocol, force_tcp):
    result = sync(pair("vLLM", "llm-d-router", cache=False, protocol=protocol))
    env = env_of(engine(role_pod(result, "decode")))
    assert (env.get(vocab.ENV_MC_FORCE_TCP) == "1") is force_tcp
    assert env[vocab.ENV_VLLM_MOONCAKE_BOOTSTRAP_PORT] == "8998"


def test_kv_events_on_routed_vllm_producers_only():
    result = sync(pair("vLLM", "llm-d-router"))
    prefill = engine(role_pod(result, "prefill"))
    document = json.loads(prefill["command"][prefill["command"].index("--kv-events-config") + 1])
    assert document == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557",
                        "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000, "hwm": 100000,
                        "max_queue_size": 100000, "topic": "kv@"}
    assert {5557, 5558} <= {p["containerPort"] for p in prefill["ports"]}
    assert "--kv-events-config" not in engine(role_pod(result, "decode"))["command"]
    roles = {r["name"]: r for r in result.status["roles"]}
    assert roles["prefill"]["kvEventsEndpoints"] == ["tcp://pd-demo-prefill:5557", "tcp://pd-demo-prefill:5558"]
    publishing = condition(result, vocab.COND_KV_EVENTS_PUBLISHING)
    assert (publishing["status"], publishing["reason"]) == ("True", vocab.REASON_PUBLISHING)


def test_routed_sglang_reports_the_publisher_disabled():
    publishing = condition(sync(pair("SGLang", "sglang-gateway")), vocab.COND_KV_EVENTS_PUBLISHING)
    assert (publishing["status"], publishing["reason"]) == ("False", vocab.REASON_PUBLISHER_DISABLED)


def test_take_over_producer_reports_role_unmanaged():
    md = pair("vLLM", "llm-d-router")
    md["spec"]["roles"][0]["command"] = ["vllm", "serve", "m"]
    publishing = condition(sync(md), vocab.COND_KV_EVENTS_PUBLISHING)
    assert (publishing["status"], publishing["reason"]) == ("Unknown", vocab.REASON_ROLE_UNMANAGED)


def test_routed_vllm_decoder_runs_the_routing_proxy_in_front_of_the_engine():
    result = sync(pair("vLLM", "llm-d-router"))
    pod = role_pod(result, "decode")
    (proxy,) = pod["spec"]["initContainers"]
    assert proxy["restartPolicy"] == "Always"
    assert proxy["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for option in _long_options(proxy["args"]):
        assert option in rf.LLMD_SIDECAR_FLAGS
    assert "--model-server-port=8200" in proxy["args"] and "--kv-connector=mooncake" in proxy["args"]
    c = engine(pod)
    assert c["command"][c["command"].index("--port") + 1] == "8200"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        # All three follow the external listener: the proxy, through it to the engine.
        assert c[probe]["httpGet"] == {"path": "/v1/models", "port": 8000}, probe
    decode_svc = next(s for s in services(result) if s["metadata"]["name"] == "pd-demo-decode")
    assert decode_svc["spec"]["ports"][0]["targetPort"] == 8000
    assert "initContainers" not in role_pod(result, "prefill")["spec"]


def test_removing_the_router_prunes_its_objects():
    md = pair("vLLM", "llm-d-router")
    md["spec"].pop("router")
    result = sync(md)
    assert not {"Deployment", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"} & {c["kind"] for c in result.children}
    assert "initContainers" not in role_pod(result, "decode")["spec"]
    assert condition(result, vocab.COND_ROUTER_READY)["reason"] == vocab.REASON_NOT_APPLICABLE


def test_router_readiness_follows_the_observed_deployment():
    md = pair("vLLM", "llm-d-router")
    deployment = by_kind(sync(md), "Deployment")[0]
    deployment = {**deployment, "status": {"readyReplicas": 1}}
    result = sync(md, children=[deployment])
    ready = condition(result, vocab.COND_ROUTER_READY)
    assert (ready["status"], ready["reason"]) == ("True", vocab.REASON_ROUTER_READY)
    assert result.status["roleSummary"] == "1R0P0D"


@pytest.mark.parametrize("engine_name,router,port", [("vLLM", "vllm-router", rf.VLLM_ROUTER_METRICS_PORT),
                                                     ("SGLang", "sglang-gateway", rf.SGLANG_GATEWAY_METRICS_PORT)])
def test_rust_router_serves_metrics_on_its_own_port(engine_name, router, port):
    (deployment,) = by_kind(sync(pair(engine_name, router)), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][container["args"].index("--prometheus-port") + 1] == str(port)
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container["ports"]


# --- resources of the router containers (docs/operations.md#settings-environment-of-the-service) ---

DEFAULT_ROUTER_KUBE = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
SMALL = ContainerResources(cpu_request="100m", memory_request="128Mi", cpu_limit="1", memory_limit="256Mi")
SMALL_KUBE = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}


def _router_containers(result) -> list[dict]:
    (deployment,) = by_kind(result, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_the_default_router_resources_are_the_documented_ones():
    assert DEFAULT_ROUTER_RESOURCES.as_kube() == DEFAULT_ROUTER_KUBE


@pytest.mark.parametrize("engine_name,router,cache", CASES)
def test_every_router_container_has_requests_and_limits(engine_name, router, cache):
    """No router container runs BestEffort (a namespace with a ResourceQuota would refuse it)."""
    containers = _router_containers(sync(pair(engine_name, router, cache=cache)))
    assert {c["name"] for c in containers} == ({"envoy", "epp"} if router == "llm-d-router" else {"router"})
    for container in containers:
        assert container["resources"] == DEFAULT_ROUTER_KUBE, container["name"]


@pytest.mark.parametrize("router", ["llm-d-router", "vllm-router"])
def test_a_server_only_router_has_them_too(router):
    md = parent("qwen-chat")
    md["spec"]["router"] = {"name": router}
    for container in _router_containers(sync(md)):
        assert container["resources"] == DEFAULT_ROUTER_KUBE


def test_router_resources_follow_the_operator_setting():
    settings = SyncSettings(options=RenderOptions(router_resources=SMALL))
    for container in _router_containers(sync(pair("vLLM", "llm-d-router"), settings)):
        assert container["resources"] == SMALL_KUBE


def test_routing_sidecar_resources_follow_their_own_setting():
    default = role_pod(sync(pair("vLLM", "llm-d-router")), "decode")["spec"]["initContainers"][0]
    assert default["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                                    "limits": {"cpu": "2", "memory": "1Gi"}}
    settings = SyncSettings(options=RenderOptions(routing_sidecar_resources=SMALL))
    result = sync(pair("vLLM", "llm-d-router"), settings)
    (proxy,) = role_pod(result, "decode")["spec"]["initContainers"]
    assert proxy["resources"] == SMALL_KUBE
    for container in _router_containers(result):
        assert container["resources"] == DEFAULT_ROUTER_KUBE  # the router's own setting is apart


def test_the_resource_settings_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(vocab.SETTING_ROUTER_CPU_REQUEST, "250m")
    monkeypatch.setenv(vocab.SETTING_ROUTER_MEMORY_LIMIT, "4Gi")
    monkeypatch.setenv("MODELDEPLOYMENT_ROUTING_SIDECAR_CPU_LIMIT", "3")
    options = Settings().render_options()
    assert options.router_resources == ContainerResources(cpu_request="250m", memory_request="512Mi",
                                                          cpu_limit="2", memory_limit="4Gi")
    assert options.routing_sidecar_resources.cpu_limit == "3"


@pytest.mark.parametrize("name,value,problem", [
    (vocab.SETTING_ROUTER_CPU_LIMIT, "two", "is not a Kubernetes quantity"),
    (vocab.SETTING_ROUTING_SIDECAR_MEMORY_REQUEST, "0", "is not above zero"),
    (vocab.SETTING_ROUTER_CPU_REQUEST, "4", "is above GPUSTACK_MODEL_DEPLOYMENT_ROUTER_CPU_LIMIT"),
    (vocab.SETTING_ROUTING_SIDECAR_MEMORY_REQUEST, "2Gi",
     "is above GPUSTACK_MODEL_DEPLOYMENT_ROUTING_SIDECAR_MEMORY_LIMIT"),
])
def test_a_bad_resource_setting_fails_at_start_naming_the_variable(monkeypatch, name, value, problem):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as err:
        Settings()
    assert name in str(err.value) and problem in str(err.value)
