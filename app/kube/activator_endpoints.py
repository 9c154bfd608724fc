"""The activator's Ready Pod addresses, read for the endpoint switch (docs/scale-to-zero.md#the-endpoint-switch):
a background task of the operator lists the activator Service's EndpointSlices in the operator's
namespace every few seconds and updates the `ActivatorAddresses` every sync pass reads."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lightkube.generic_resource import create_namespaced_resource

from app import vocab
from app.control.endpoint import ActivatorAddresses
from app.kube.client import Kube

log = logging.getLogger(__name__)

EndpointSliceRes = create_namespaced_resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")
READ_EVERY_SECONDS = 5.0


def ready_addresses(slices: list[dict[str, Any]]) -> tuple[tuple[str, ...], int | None]:
    """The Ready endpoints' addresses and the proxy port of the activator Service's slices."""
    addresses: set[str] = set()
    port = None
    for item in slices:
        for entry in item.get("ports") or []:
            if entry.get("name") == vocab.ACTIVATOR_PORT_NAME and isinstance(entry.get("port"), int):
                port = entry["port"]
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is not False:
                addresses.update(endpoint.get("addresses") or [])
    return tuple(sorted(addresses)), port


async def keep_current(kube: Kube, namespace: str, into: ActivatorAddresses) -> None:
    while True:
        try:
            found = kube.client.list(EndpointSliceRes, namespace=namespace,
                                     labels={vocab.LABEL_SERVICE_NAME: vocab.ACTIVATOR_SERVICE})
            slices = [dict(s.to_dict()) async for s in found]  # type: ignore[no-untyped-call]
            addresses, port = ready_addresses(slices)
            if addresses != into.addresses:
                log.info("activator addresses: %s", ", ".join(addresses) or "none")
            into.addresses = addresses
            if port is not None:
                into.port = port
            into.read_at = time.time()
        except Exception as exc:  # noqa: BLE001 - keep the last addresses; the next read may succeed
            log.warning("the activator's addresses were not read: %s", exc)
        await asyncio.sleep(READ_EVERY_SECONDS)
