"""The idleness reader (docs/scale-to-zero.md#idle-after): a background task of the operator that
scrapes the serving leaders of every deployment a parking scaler governs, and writes what it learns
as the scaler's last-request annotation, at most every 30 s per deployment (app/control/idleness.py
decides; this module only reads and writes). A scrape is bounded: one round every
IDLENESS_WRITE_INTERVAL_SECONDS, a few scrapes at a time, two seconds each."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any

import httpx2
from lightkube import ALL_NS
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from app import vocab
from app.control import idleness
from app.kube.client import Kube, ScalerRes

log = logging.getLogger(__name__)

SCRAPES_IN_FLIGHT = 8
SCRAPE_TIMEOUT_SECONDS = 2.0


def _plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return out


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def leader_address(pod: dict[str, Any]) -> str | None:
    """host:port of a Ready leader's serving port (its first container port), None otherwise."""
    status = pod.get("status") or {}
    ready = any(c.get("type") == vocab.POD_COND_READY and c.get("status") == "True"
                for c in status.get("conditions") or [] if isinstance(c, dict))
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    ports = containers[0].get("ports") or [{}]
    port = ports[0].get("containerPort")
    if not ready or not status.get("podIP") or not port:
        return None
    return f"{status['podIP']}:{port}"


class IdlenessReader:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.http = httpx2.AsyncClient(timeout=SCRAPE_TIMEOUT_SECONDS)
        self.seen: dict[str, idleness.Counts | None] = {}  # leader address -> last counts
        self.written: dict[str, float] = {}  # namespace/scaler -> when last written

    async def run(self) -> None:
        while True:
            try:
                await self.round(time.time())
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("idleness round failed: %s", exc)
            await asyncio.sleep(vocab.IDLENESS_WRITE_INTERVAL_SECONDS)

    async def round(self, now: float) -> None:
        client = self.kube.client
        scalers = [_plain(s) async for s in client.list(ScalerRes, namespace=ALL_NS)]
        for scaler in scalers:
            spec, meta = scaler.get("spec") or {}, scaler.get("metadata") or {}
            if not spec.get("scaleToZero") or not spec.get("replicas"):
                continue
            key = f"{meta['namespace']}/{meta['name']}"
            if not idleness.write_due(self.written.get(key), now):
                continue
            if await self._active(meta["namespace"], spec):
                await client.patch(ScalerRes, meta["name"],
                                   {"metadata": {"annotations": {vocab.ANNOTATION_LAST_REQUEST: _stamp(now)}}},
                                   namespace=meta["namespace"], patch_type=PatchType.MERGE)
                self.written[key] = now

    async def _active(self, namespace: str, spec: dict[str, Any]) -> bool:
        roles = {r.get("name") for r in spec.get("roles") or []}
        pods = [_plain(p) async for p in self.kube.client.list(Pod, namespace=namespace, labels={
            vocab.LABEL_NAME: vocab.APP_NAME, vocab.LABEL_INSTANCE: (spec.get("deploymentRef") or {}).get("name", ""),
            vocab.LABEL_MEMBER_INDEX: "0"})]
        addresses = [a for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(vocab.LABEL_COMPONENT)
                     in roles and (a := leader_address(p))]
        limit = asyncio.Semaphore(SCRAPES_IN_FLIGHT)
        results = await asyncio.gather(*(self._scrape(address, limit) for address in addresses))
        return any(results)

    async def _scrape(self, address: str, limit: asyncio.Semaphore) -> bool:
        async with limit:
            try:
                response = await self.http.get(f"http://{address}/metrics")
                now = idleness.counts(response.text) if response.status_code == 200 else None
            except httpx2.HTTPError:
                now = None
        previous = self.seen.get(address)
        self.seen[address] = now
        return idleness.active(previous, now)
