"""What the activator reads and writes in the cluster (docs/scale-to-zero.md#the-activator): the
endpoint Service a request names, the scaler that wakes its deployment (one annotation written, no
other field), the deployment's status, its serving Pods and, for a 503's reason, its Workloads.
Every read is bounded: a deployment being woken is read by one reader (app/activator/proxy.py),
and a Host's target is remembered for a few seconds."""

from __future__ import annotations

import json
import time
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod, Service
from lightkube.types import PatchType

from app import durations, vocab
from app.activator.proxy import DeploymentState
from app.activator.targets import Target, fail_reason, is_ipv4, ready_addresses, wait_reason
from app.model.serving import serving

ModelDeploymentRes = create_namespaced_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_MODEL_DEPLOYMENT,
                                                vocab.PLURAL_MODEL_DEPLOYMENTS)
ScalerRes = create_namespaced_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_MODEL_DEPLOYMENT_SCALER,
                                       vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS)
WorkloadRes = create_namespaced_resource(vocab.KUEUE_GROUP, vocab.KUEUE_VERSION, vocab.KIND_WORKLOAD,
                                         vocab.PLURAL_WORKLOADS)
LocalQueueRes = create_namespaced_resource(vocab.KUEUE_GROUP, vocab.KUEUE_VERSION, "LocalQueue", "localqueues")

TARGET_CACHE_SECONDS = 5.0


def _plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return out


def target_of(service: dict[str, Any], scalers: list[dict[str, Any]], default_timeout: float) -> Target | None:
    """The Target a deployment's endpoint Service names (None for a Service that is not one)."""
    meta = service.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(vocab.LABEL_NAME) != vocab.APP_NAME or not labels.get(vocab.LABEL_INSTANCE):
        return None
    deployment = labels[vocab.LABEL_INSTANCE]
    spec = service.get("spec") or {}
    ports = spec.get("ports") or [{}]
    port = ports[0].get("targetPort") or ports[0].get("port") or 8000
    raw = (meta.get("annotations") or {}).get(vocab.ANNOTATION_SERVING_SELECTOR)
    selector = json.loads(raw) if raw else dict(spec.get("selector") or {})
    governing = next((s for s in scalers if ((s.get("spec") or {}).get("deploymentRef") or {}).get("name")
                      == deployment and (s.get("spec") or {}).get("scaleToZero")), None)
    timeout = default_timeout
    if governing is not None:
        timeout = float(durations.seconds(governing["spec"]["scaleToZero"].get("wakeTimeout",
                                                                             vocab.DEFAULT_WAKE_TIMEOUT)) or timeout)
    return Target(namespace=meta.get("namespace", ""), deployment=deployment,
                  scaler=(governing or {}).get("metadata", {}).get("name"), wake_timeout=timeout,
                  port=port if isinstance(port, int) else str(port), selector=selector)


class KubeCluster:
    """The activator's API client (its ServiceAccount's RBAC: docs/scale-to-zero.md#the-activator)."""

    def __init__(self, client: AsyncClient | None = None) -> None:
        self.client = client or AsyncClient(field_manager=f"{vocab.APP_NAME}-{vocab.ACTIVATOR_COMPONENT}")
        self.cache: dict[tuple[str, str | None], tuple[float, Target | None]] = {}
        self.default_timeout = float(durations.seconds(vocab.DEFAULT_WAKE_TIMEOUT) or 900)

    async def target(self, service: str, namespace: str | None) -> Target | None:
        key = (service, namespace)
        cached = self.cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < TARGET_CACHE_SECONDS:
            return cached[1]
        found = await self._resolve(service, namespace)
        self.cache[key] = (time.monotonic(), found)
        return found

    async def _resolve(self, service: str, namespace: str | None) -> Target | None:
        if is_ipv4(service):
            return await self._by_cluster_ip(service)
        if namespace is None:
            # A bare name: the one Service of that name the operator labels, in any namespace.
            matches = [_plain(s) async for s in self.client.list(
                Service, namespace="*", fields={"metadata.name": service},
                labels={vocab.LABEL_NAME: vocab.APP_NAME})]
            if len(matches) != 1:
                return None
            found = matches[0]
        else:
            try:
                found = _plain(await self.client.get(Service, service, namespace=namespace))
            except ApiError as exc:
                if exc.status.code == 404:
                    return None
                raise
        ns = found["metadata"]["namespace"]
        scalers = [_plain(s) async for s in self.client.list(ScalerRes, namespace=ns)]
        return target_of(found, scalers, self.default_timeout)

    async def _by_cluster_ip(self, address: str) -> Target | None:
        """A client that dialled the endpoint Service's ClusterIP: the operator's Service holding it."""
        found = [_plain(s) async for s in self.client.list(Service, namespace="*",
                                                             labels={vocab.LABEL_NAME: vocab.APP_NAME})]
        match = next((s for s in found if (s.get("spec") or {}).get("clusterIP") == address), None)
        if match is None:
            return None
        ns = match["metadata"]["namespace"]
        scalers = [_plain(s) async for s in self.client.list(ScalerRes, namespace=ns)]
        return target_of(match, scalers, self.default_timeout)

    async def request_wake(self, target: Target, when: str) -> None:
        """The activator's one write: the scaler's wake-requested annotation (docs/scale-to-zero.md#waking)."""
        if target.scaler is None:
            return
        body = {"metadata": {"annotations": {vocab.ANNOTATION_WAKE_REQUESTED: when}}}
        await self.client.patch(ScalerRes, target.scaler, body, namespace=target.namespace,
                                patch_type=PatchType.MERGE)

    async def state(self, target: Target) -> DeploymentState:
        md = _plain(await self.client.get(ModelDeploymentRes, target.deployment, namespace=target.namespace))
        parked_since = await self._parked_since(target)
        if serving(md.get("status")):
            selector: dict[str, Any] = dict(target.selector)
            pods = [_plain(p) async for p in self.client.list(Pod, namespace=target.namespace, labels=selector)]
            return DeploymentState(True, tuple(ready_addresses(pods, target.port)), parked_since=parked_since)
        workloads, pods = await self._workloads(target)
        return DeploymentState(False, failed=fail_reason(workloads, pods), parked_since=parked_since)

    async def _parked_since(self, target: Target) -> str | None:
        if target.scaler is None:
            return None
        scaler = _plain(await self.client.get(ScalerRes, target.scaler, namespace=target.namespace))
        value = (scaler.get("status") or {}).get("parkedSince")
        return value if isinstance(value, str) else None

    async def _workloads(self, target: Target) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pods = [_plain(p) async for p in self.client.list(
            Pod, namespace=target.namespace,
            labels={vocab.LABEL_NAME: vocab.APP_NAME, vocab.LABEL_INSTANCE: target.deployment})]
        groups = sorted({str(group) for p in pods
                         if (group := (p["metadata"].get("labels") or {}).get(vocab.LABEL_KUEUE_POD_GROUP_NAME))})
        workloads = []
        for name in groups:
            try:
                workloads.append(_plain(await self.client.get(WorkloadRes, name, namespace=target.namespace)))
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
        return workloads, pods

    async def wait_reason(self, target: Target) -> str:
        workloads, _ = await self._workloads(target)
        queues: dict[str, str] = {}
        for name in {str((w.get("spec") or {}).get("queueName") or "") for w in workloads} - {""}:
            try:
                lq = _plain(await self.client.get(LocalQueueRes, name, namespace=target.namespace))
                queues[name] = str((lq.get("spec") or {}).get("clusterQueue") or "")
            except ApiError:
                continue
        return wait_reason(workloads, queues)
