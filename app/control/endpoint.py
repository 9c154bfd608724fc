"""The endpoint switch (docs/scale-to-zero.md#the-endpoint-switch): where a deployment's endpoint
Service sends its traffic, decided each pass and rendered as children.

Serving: the endpoint Service keeps its selector and traffic goes straight to the serving Pods.
Parked or waking: the Service selects no Pod (the serving selector kept in an annotation for the
activator) beside an EndpointSlice listing the activator's Ready Pods. The
activator's Pods live in the operator's namespace, which Metacontroller cannot relate to a
deployment in another one, so the operator hands the pass their addresses (`ActivatorAddresses`,
kept current by app/kube/activator_endpoints.py) as it hands it the clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app import vocab
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.control.status import parked
from app.model.serving import serving


@dataclass
class ActivatorAddresses:
    """The activator's Ready Pod addresses and port, as the operator last read them (empty: not
    installed or none Ready, and the endpoint stays on the deployment's own Pods)."""

    addresses: tuple[str, ...] = ()
    port: int = 8080
    read_at: float = field(default=0.0, compare=False)


# After the switch back to the Pods, the activator's slice stays one more pass this long beside the
# restored selector, so the endpoint never has no address while the EndpointSlice controller
# writes the serving Pods' slice (the activator forwards what reaches it straight to the Pods).
RELEASE_SECONDS = 10.0


def releasing(md: ModelDeployment, status: KubeObject, activator: ActivatorAddresses) -> bool:
    """The pass that finds a deployment routed to the activator serving again: selector back, the
    activator's slice kept (status.endpointRoute Releasing) until the next pass."""
    return (bool(activator.addresses) and not parked(md) and serving(status)
            and (md.status or {}).get("endpointRoute") == vocab.ENDPOINT_ROUTE_ACTIVATOR)


def to_activator(md: ModelDeployment, status: KubeObject, activator: ActivatorAddresses) -> bool:
    """The endpoint routes to the activator while the deployment is parked, and after that until it
    serves again (waking); never when no activator Pod is known."""
    if not activator.addresses:
        return False
    if parked(md):
        return True
    was = (md.status or {}).get("endpointRoute") == vocab.ENDPOINT_ROUTE_ACTIVATOR
    return was and not serving(status)


def endpoint_service_name(status: KubeObject) -> str | None:
    """The endpoint Service's name, from status.endpoint (http://<name>.<namespace>.svc:<port>)."""
    url = status.get("endpoint")
    if not isinstance(url, str) or "://" not in url:
        return None
    return url.split("://", 1)[1].split(".", 1)[0]


def parked_service(service: KubeObject) -> KubeObject:
    """The Service selecting no Pod (its selector plus a label no Pod carries), its serving selector
    kept in an annotation. Not selector-less: Kubernetes' EndpointSlice controller leaves the slices
    of a Service that lost its selector as they were (the old Pods listed); one that selects nothing
    gets its slice emptied, and only the activator's addresses remain."""
    out = json.loads(json.dumps(service))
    selector = dict(out["spec"].get("selector") or {})
    out["spec"]["selector"] = {**selector, vocab.LABEL_ENDPOINT_PARKED: "true"}
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[vocab.ANNOTATION_SERVING_SELECTOR] = json.dumps(selector, sort_keys=True, separators=(",", ":"))
    return out  # type: ignore[no-any-return]


def activator_slice(service: KubeObject, activator: ActivatorAddresses) -> KubeObject:
    """An EndpointSlice of the Service listing the activator's Pods on the activator's port, under the
    Service's serving port name (kube-proxy pairs them by name)."""
    meta = service["metadata"]
    port_name = (service["spec"].get("ports") or [{}])[0].get("name", vocab.PORT_NAME_HTTP)
    labels: dict[str, Any] = {**(meta.get("labels") or {}), vocab.LABEL_SERVICE_NAME: meta["name"],
                              vocab.LABEL_ENDPOINT_SLICE_MANAGED_BY: vocab.ENDPOINT_SLICE_MANAGER}
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"{meta['name']}-{vocab.ACTIVATOR_COMPONENT}", "namespace": meta["namespace"],
                     "labels": labels},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}} for address in activator.addresses],
        "ports": [{"name": port_name, "port": activator.port, "protocol": "TCP"}],
    }


def switch(md: ModelDeployment, children: list[KubeObject], status: KubeObject,
           activator: ActivatorAddresses) -> float | None:
    """Route the endpoint to the activator when `to_activator` says so: the endpoint Service made to
    select no Pod and the activator's EndpointSlice added to `children`; status.endpointRoute records it. On
    the way back (`releasing`) the Service has its selector and the slice stays one pass: the
    seconds until that pass are returned (None otherwise)."""
    name = endpoint_service_name(status)
    route_to_activator, release = to_activator(md, status, activator), releasing(md, status, activator)
    if name is None or not (route_to_activator or release):
        return None
    for index, child in enumerate(children):
        if child.get("kind") == "Service" and child["metadata"]["name"] == name:
            children.append(activator_slice(child, activator))
            if release:
                status["endpointRoute"] = vocab.ENDPOINT_ROUTE_RELEASING
                return RELEASE_SECONDS
            children[index] = parked_service(child)
            status["endpointRoute"] = vocab.ENDPOINT_ROUTE_ACTIVATOR
            return None
    return None
