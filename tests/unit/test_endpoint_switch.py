"""The endpoint switch (docs/scale-to-zero.md#the-endpoint-switch): while a deployment is parked or
waking its endpoint Service selects no Pod and an EndpointSlice lists the activator's Pods; once it
serves, the Service selects the serving Pods again and the slice goes."""

from __future__ import annotations

import json
from typing import Any

from app import vocab
from app.control import endpoint
from app.control.sync import SyncSettings
from app.model.serving import serving
from tests.helpers import by_kind, parent, running, sync

ACTIVATOR = endpoint.ActivatorAddresses(addresses=("10.9.0.1", "10.9.0.2"), port=8080)
SETTINGS = SyncSettings(activator=ACTIVATOR)


def parked(name: str = "qwen-chat") -> dict[str, Any]:
    md = parent(name)
    for role in md["spec"]["roles"]:
        role["replicas"] = 0
    return md


def endpoint_service(result: Any, name: str) -> dict[str, Any]:
    return next(s for s in by_kind(result, "Service") if s["metadata"]["name"] == name)


def test_a_parked_deployments_endpoint_routes_to_the_activator() -> None:
    result = sync(parked(), SETTINGS)
    assert result.status["endpointRoute"] == vocab.ENDPOINT_ROUTE_ACTIVATOR
    name = endpoint.endpoint_service_name(result.status)
    assert name is not None
    service = endpoint_service(result, name)
    assert service["spec"]["selector"][vocab.LABEL_ENDPOINT_PARKED] == "true"  # selects no Pod
    kept = json.loads(service["metadata"]["annotations"][vocab.ANNOTATION_SERVING_SELECTOR])
    assert kept[vocab.LABEL_INSTANCE] == "qwen-chat"
    (slice_,) = by_kind(result, "EndpointSlice")
    assert slice_["metadata"]["labels"][vocab.LABEL_SERVICE_NAME] == name
    assert slice_["metadata"]["labels"][vocab.LABEL_ENDPOINT_SLICE_MANAGED_BY] == vocab.ENDPOINT_SLICE_MANAGER
    assert [e["addresses"] for e in slice_["endpoints"]] == [["10.9.0.1"], ["10.9.0.2"]]
    assert slice_["ports"] == [{"name": service["spec"]["ports"][0]["name"], "port": 8080, "protocol": "TCP"}]


def test_a_serving_deployment_routes_to_its_own_pods() -> None:
    result = sync(parent(), SETTINGS)
    assert "endpointRoute" not in result.status
    assert by_kind(result, "EndpointSlice") == []
    assert all(vocab.LABEL_ENDPOINT_PARKED not in s["spec"]["selector"] for s in by_kind(result, "Service"))


def test_a_woken_deployment_stays_on_the_activator_until_it_serves() -> None:
    md = parent()
    md["status"] = {"endpointRoute": vocab.ENDPOINT_ROUTE_ACTIVATOR}
    waking = sync(md, SETTINGS)
    assert waking.status["endpointRoute"] == vocab.ENDPOINT_ROUTE_ACTIVATOR and by_kind(waking, "EndpointSlice")
    observed = [running(p, f"uid-{i}") for i, p in enumerate(by_kind(waking, "Pod"))]
    served = sync(md, SETTINGS, children=observed)
    assert serving(served.status)
    # The way back: the selector returns and the activator's slice stays one more pass, so the
    # endpoint always has an address while the EndpointSlice controller lists the Pods.
    assert served.status["endpointRoute"] == vocab.ENDPOINT_ROUTE_RELEASING and by_kind(served, "EndpointSlice")
    assert all(vocab.LABEL_ENDPOINT_PARKED not in s["spec"]["selector"] for s in by_kind(served, "Service"))
    assert served.resync_after is not None and served.resync_after <= endpoint.RELEASE_SECONDS
    md["status"] = {"endpointRoute": vocab.ENDPOINT_ROUTE_RELEASING}
    after = sync(md, SETTINGS, children=observed)
    assert "endpointRoute" not in after.status and by_kind(after, "EndpointSlice") == []


def test_without_a_known_activator_the_endpoint_stays_on_the_pods() -> None:
    result = sync(parked(), SyncSettings())
    assert "endpointRoute" not in result.status and by_kind(result, "EndpointSlice") == []


def test_a_pair_serves_only_when_both_roles_and_the_router_do() -> None:
    roles = [{"kind": "Prefill", "ready": 1}, {"kind": "Decode", "ready": 0}]
    assert not serving({"roles": roles})
    roles[1]["ready"] = 2
    assert serving({"roles": roles}) and not serving({"roles": roles, "router": {"ready": 0}})


def test_the_activator_addresses_are_read_from_ready_endpoints() -> None:
    from app.kube.activator_endpoints import ready_addresses

    slices = [{"ports": [{"name": "proxy", "port": 8080}, {"name": "metrics", "port": 9090}],
               "endpoints": [{"addresses": ["10.9.0.2"], "conditions": {"ready": True}},
                             {"addresses": ["10.9.0.3"], "conditions": {"ready": False}},
                             {"addresses": ["10.9.0.1"]}]}]
    assert ready_addresses(slices) == (("10.9.0.1", "10.9.0.2"), 8080)
