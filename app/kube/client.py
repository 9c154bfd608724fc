"""The only module that talks to the API server (lightkube: kubeconfig, TLS and retries are its job).

Two users: the executor (Workload deletes, admission-check state, Events, the AdmissionCheck
object) and the webhooks (live reads of the cluster objects a decision depends on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, AsyncGenerator, cast

import httpx2
from lightkube import ALL_NS, AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType, on_error_retry

from app import vocab
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment
from app.control.intents import SetWorkloadActive
from app.world import World

log = logging.getLogger(__name__)

InstanceTypeRes = create_global_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_INSTANCE_TYPE, vocab.PLURAL_INSTANCE_TYPES)
KVCachePoolRes = create_global_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_KV_CACHE_POOL, vocab.PLURAL_KV_CACHE_POOLS)
KVCacheBackendRes = create_global_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_KV_CACHE_BACKEND,
                                           vocab.PLURAL_KV_CACHE_BACKENDS)
BindingRes = create_namespaced_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_KV_CACHE_POOL_BINDING,
                                        vocab.PLURAL_KV_CACHE_POOL_BINDINGS)
ArtifactRes = create_namespaced_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_MODEL_ARTIFACT,
                                         vocab.PLURAL_MODEL_ARTIFACTS)
WorkloadRes = create_namespaced_resource(vocab.KUEUE_GROUP, vocab.KUEUE_VERSION, vocab.KIND_WORKLOAD,
                                         vocab.PLURAL_WORKLOADS)
AdmissionCheckRes = create_global_resource(vocab.KUEUE_GROUP, vocab.KUEUE_VERSION, vocab.KIND_ADMISSION_CHECK,
                                           vocab.PLURAL_ADMISSION_CHECKS)
ModelDeploymentRes = create_namespaced_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_MODEL_DEPLOYMENT,
                                                vocab.PLURAL_MODEL_DEPLOYMENTS)
ScalerRes = create_namespaced_resource(vocab.GROUP, vocab.VERSION, vocab.KIND_MODEL_DEPLOYMENT_SCALER,
                                       vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS)


class ClusterUnreachable(Exception):
    """The API server could not be read: admission fails closed with this message."""


def load_config(kubeconfig: Path | None) -> KubeConfig | None:
    """In-cluster service account, else $KUBECONFIG / ~/.kube/config; None when neither exists."""
    try:
        if kubeconfig is not None:
            return KubeConfig.from_file(kubeconfig)
        return KubeConfig.from_env()
    except (ConfigError, FileNotFoundError, OSError) as exc:
        log.info("no Kubernetes API configuration found (%s): side effects are logged and skipped", exc)
        return None


def workload_active_body(intent: SetWorkloadActive) -> KubeObject:
    """The deadlock release's merge patch: `spec.active`, our annotation (null removes it), and the
    copy's uid and resourceVersion, which the API server holds the patch to."""
    metadata: KubeObject = {"annotations": {vocab.ANNOTATION_GANG_RELEASED_AT: intent.released_at or None}}
    if intent.uid:
        metadata["uid"] = intent.uid
    if intent.resource_version:
        metadata["resourceVersion"] = intent.resource_version
    return {"metadata": metadata, "spec": {"active": intent.active}}


def _plain(obj: Any) -> KubeObject:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


class Kube:
    """A thin async facade over lightkube for exactly the calls the operator makes."""

    def __init__(self, config: KubeConfig, *, timeout: float) -> None:
        # lightkube 1.x speaks httpx2 (pydantic's httpx line): its Timeout and errors, not httpx's.
        self.client = AsyncClient(config, timeout=httpx2.Timeout(timeout), field_manager=vocab.EVENT_SOURCE_COMPONENT)
        self.timeout = timeout

    async def close(self) -> None:
        await self.client.close()

    # --- reads for admission -----------------------------------------------------------------

    async def _get(self, res: Any, name: str, namespace: str | None = None) -> KubeObject | None:
        try:
            return _plain(await self.client.get(res, name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise ClusterUnreachable(f"the API server refused to read {res.__name__} {name!r}: {exc.status.message}") from exc

    async def _list(self, res: Any, kind: str) -> list[KubeObject]:
        try:
            # List items may come without apiVersion/kind; the World files objects by kind.
            return [{"apiVersion": vocab.API_VERSION, "kind": kind, **_plain(obj)} async for obj in self.client.list(res)]
        except ApiError as exc:
            raise ClusterUnreachable(f"the API server refused to list {res.__name__}: {exc.status.message}") from exc

    async def world_for(self, md: ModelDeployment, *, instance_types_only: bool = False) -> World:
        """Every object one deployment's admission reads, fetched live (no cache decides admission);
        with `instance_types_only`, only its roles' InstanceTypes (what the mutating webhook reads)."""
        return World.of(await self.world_objects(md, instance_types_only=instance_types_only))

    async def world_objects(self, md: ModelDeployment, *, instance_types_only: bool = False) -> list[KubeObject]:
        """The objects of `world_for`, as read.

        One round trip: the Binding names its pool and the pool its backend, so pools and backends
        (cluster-scoped and few) are listed beside the Binding rather than fetched after it."""
        namespace = md.metadata.namespace
        try:
            async with asyncio.timeout(self.timeout):
                reads: list[Any] = [self._get(InstanceTypeRes, name)
                                    for name in sorted({r.instance_type for r in md.spec.roles})]
                if not instance_types_only and md.spec.model.artifact_ref is not None:
                    reads.append(self._get(ArtifactRes, md.spec.model.artifact_ref.name, namespace))
                lists: list[Any] = []
                if not instance_types_only and md.spec.kv_cache is not None and md.spec.kv_cache.pool_ref.name:
                    reads.append(self._get(BindingRes, md.spec.kv_cache.pool_ref.name, namespace))
                    lists = [self._list(KVCachePoolRes, vocab.KIND_KV_CACHE_POOL),
                             self._list(KVCacheBackendRes, vocab.KIND_KV_CACHE_BACKEND)]
                results = await asyncio.gather(*reads, *lists)
        except (httpx2.HTTPError, OSError, TimeoutError) as exc:
            raise ClusterUnreachable(f"the API server could not be reached: {exc or type(exc).__name__}") from exc
        objects: list[KubeObject] = [o for o in results[:len(reads)] if o]
        for listed in results[len(reads):]:
            objects.extend(listed)
        return objects

    async def deployment_view(self, namespace: str, name: str) -> tuple[KubeObject | None, list[KubeObject],
                                                                         list[KubeObject], list[KubeObject]]:
        """One deployment as `modeldeployment status|plan` reads it: the object (None when absent),
        its Pods, the namespace's Workloads and the objects its render reads."""
        try:
            async with asyncio.timeout(self.timeout):
                md = await self._get(ModelDeploymentRes, name, namespace)
                if md is None:
                    return None, [], [], []
                selector: dict[str, Any] = {vocab.LABEL_INSTANCE: name}
                pods = [{"apiVersion": vocab.CORE_API_VERSION, "kind": vocab.KIND_POD, **_plain(p)}
                        async for p in self.client.list(Pod, namespace=namespace, labels=selector)]
                workloads = [{"apiVersion": vocab.KUEUE_API_VERSION, "kind": vocab.KIND_WORKLOAD, **_plain(w)}
                             async for w in self.client.list(WorkloadRes, namespace=namespace)]
            world = await self.world_objects(ModelDeployment.model_validate(md))
        except (httpx2.HTTPError, OSError, TimeoutError) as exc:
            raise ClusterUnreachable(f"the API server could not be reached: {exc or type(exc).__name__}") from exc
        except ApiError as exc:
            raise ClusterUnreachable(f"the API server refused a read: {exc.status.message}") from exc
        return md, pods, workloads, world

    async def scaler_world(self, namespace: str, deployment: str) -> tuple[KubeObject | None, list[KubeObject]]:
        """What a scaler's admission reads, live: its deployment (None when absent) and the namespace's scalers."""
        try:
            async with asyncio.timeout(self.timeout):
                found, listed = await asyncio.gather(
                    self._get(ModelDeploymentRes, deployment, namespace),
                    self._list_in(ScalerRes, vocab.KIND_MODEL_DEPLOYMENT_SCALER, namespace))
        except (httpx2.HTTPError, OSError, TimeoutError) as exc:
            raise ClusterUnreachable(f"the API server could not be reached: {exc or type(exc).__name__}") from exc
        return found, listed

    async def stored_scaler(self, namespace: str, name: str) -> KubeObject | None:
        """A scaler as stored (a /scale write's review carries only the Scale, not the scaler)."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self._get(ScalerRes, name, namespace)
        except (httpx2.HTTPError, OSError, TimeoutError) as exc:
            raise ClusterUnreachable(f"the API server could not be reached: {exc or type(exc).__name__}") from exc

    async def _list_in(self, res: Any, kind: str, namespace: str) -> list[KubeObject]:
        try:
            return [{"apiVersion": vocab.API_VERSION, "kind": kind, **_plain(obj)}
                    async for obj in self.client.list(res, namespace=namespace)]
        except ApiError as exc:
            raise ClusterUnreachable(f"the API server refused to list {res.__name__}: {exc.status.message}") from exc

    # --- side effects ------------------------------------------------------------------------

    async def model_deployment(self, namespace: str, name: str) -> KubeObject | None:
        """The live parent (None when it does not exist): the executor's check before any side effect."""
        try:
            return _plain(await self.client.get(ModelDeploymentRes, name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def scaler(self, namespace: str, name: str) -> KubeObject | None:
        """The live scaler (None when it does not exist): the executor's check before its write."""
        try:
            return _plain(await self.client.get(ScalerRes, name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def apply_role_replicas(self, namespace: str, name: str, uid: str,
                                  replicas: tuple[tuple[str, int], ...]) -> str | None:
        """Server-side apply of the roles' `replicas` as the scaler's field manager, forced: the scaler owns
        those fields (docs/autoscaling.md#the-write). The uid ties the write to the deployment the scaler
        observed. None when written; the API server's message when it refused (a webhook, the schema,
        another object now holding the name), which the scaler reports."""
        body = {"apiVersion": vocab.API_VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT,
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"roles": [{"name": role, "replicas": count} for role, count in replicas]}}
        try:
            await self.client.patch(ModelDeploymentRes, name, body, namespace=namespace, patch_type=PatchType.APPLY,
                                    field_manager=vocab.SCALER_FIELD_MANAGER, force=True)
        except ApiError as exc:
            if exc.status.code in (400, 403, 404, 409, 422):
                return str(exc.status.message or exc)
            raise
        return None

    async def set_scaler_units(self, namespace: str, name: str, uid: str, current: int, units: int) -> str | None:
        """A scaler's own spec.replicas from `current` to `units` (park or wake), a JSON patch whose tests
        tie it to the scaler's uid and the value the pass saw. None when written; the API server's
        message when refused (a failed test: someone else scaled it since), which the next pass reads."""
        body = [{"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": "/spec/replicas", "value": current},
                {"op": "replace", "path": "/spec/replicas", "value": units}]
        try:
            await self.client.patch(ScalerRes, name, body, namespace=namespace, patch_type=PatchType.JSON,
                                    field_manager=vocab.SCALER_FIELD_MANAGER)
        except ApiError as exc:
            if exc.status.code in (400, 403, 404, 409, 422):
                return str(exc.status.message or exc)
            raise
        return None

    async def workload(self, namespace: str, name: str) -> KubeObject | None:
        try:
            return _plain(await self.client.get(WorkloadRes, name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def watch_workloads(self, resume_from: str | None = None) -> AsyncGenerator[tuple[str, KubeObject], None]:
        """Every Workload change, cluster-wide, as (event type, object): after the version `resume_from`,
        or from every Workload as it is when None. A dropped stream resumes from its last
        resourceVersion; after a 410 it starts again with every Workload as it is."""
        # lightkube's watch is an async generator (typed as an iterable): closing it closes the stream.
        changes = cast(AsyncGenerator[tuple[str, Any], None], self.client.watch(
            WorkloadRes, namespace=ALL_NS, resource_version=resume_from, on_error=on_error_retry))
        async with contextlib.aclosing(changes):  # the HTTP stream closes with this generator
            async for kind, obj in changes:
                yield kind, _plain(obj)

    async def pod(self, namespace: str, name: str) -> KubeObject | None:
        """The stored Pod (None when it does not exist)."""
        try:
            return _plain(await self.client.get(Pod, name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def pod_exists(self, namespace: str, name: str) -> bool:
        """Whether the Pod is still stored (being deleted counts: it has not stopped yet)."""
        return await self.pod(namespace, name) is not None

    async def delete_workload(self, namespace: str, name: str, uid: str) -> bool:
        """Deletes the Workload only while it is the object with `uid` (a DeleteOptions precondition).

        True when deleted or already gone; False when the name now holds another object (409), which
        is left alone. lightkube's delete() sends no body, so the request is built with its own
        request builder and the DeleteOptions body added.
        """
        generic = self.client._client
        request = generic.prepare_request("delete", res=WorkloadRes, name=name, namespace=namespace)
        request.data = {"apiVersion": vocab.CORE_API_VERSION, "kind": vocab.KIND_DELETE_OPTIONS,
                        "preconditions": {"uid": uid}}
        try:
            # lightkube leaves its generic client's `send` unannotated (it returns httpx2's Response).
            sent = await generic.send(generic.build_adapter_request(request))  # type: ignore[no-untyped-call]
            generic.handle_response("delete", sent, request)
        except ApiError as exc:
            if exc.status.code == 404:
                return True
            if exc.status.code == 409:
                return False
            raise
        return True

    async def create_event(self, body: KubeObject) -> None:
        """Creates the Event once; a second create of the same occurrence is a no-op."""
        try:
            # lightkube's create() takes `namespace=` for any namespaced resource, but its overloads
            # declare it only for subresources (and from_dict is annotated as returning DictMixin).
            await self.client.create(Event.from_dict(body),  # type: ignore[call-overload]
                                     namespace=body["metadata"]["namespace"])
        except ApiError as exc:
            if exc.status.code != 409:
                raise

    async def apply_workload_check(self, namespace: str, name: str, body: KubeObject) -> None:
        """Server-side apply of our admission-check entry on workloads/status, as its controller."""
        await self.client.patch(WorkloadRes.Status, name, body, namespace=namespace, patch_type=PatchType.APPLY,
                                field_manager=vocab.ADMISSION_CHECK_CONTROLLER, force=True)

    async def set_workload_active(self, intent: SetWorkloadActive) -> bool:
        """A merge patch of the Workload (the deadlock release: `spec.active` and our annotation) whose
        body carries the copy's uid and resourceVersion as preconditions. False when they no longer
        hold (the Workload moved or is another object) or it is gone: the next pass decides again."""
        namespace, name = intent.namespace, intent.workload
        try:
            await self.client.patch(WorkloadRes, name, workload_active_body(intent), namespace=namespace,
                                    patch_type=PatchType.MERGE)
        except ApiError as exc:
            if exc.status.code in (404, 409, 422):
                log.info("Workload %s/%s not patched: %s", namespace, name, exc.status.message)
                return False
            raise
        return True

    async def model_deployments(self) -> list[KubeObject]:
        """Every ModelDeployment, cluster-wide: what the deadlock release reads their holding records from."""
        return [_plain(obj) async for obj in self.client.list(ModelDeploymentRes, namespace=ALL_NS)]

    async def admission_check(self) -> KubeObject | None:
        return await self._get(AdmissionCheckRes, vocab.ADMISSION_CHECK_NAME)

    async def apply_admission_check(self, spec_body: KubeObject, status_body: KubeObject | None) -> None:
        """Keeps our AdmissionCheck present and Active (or the ClusterQueues using it go inactive)."""
        await self.client.patch(AdmissionCheckRes, vocab.ADMISSION_CHECK_NAME, spec_body, patch_type=PatchType.APPLY,
                                field_manager=vocab.ADMISSION_CHECK_CONTROLLER, force=True)
        if status_body is not None:
            await self.client.patch(AdmissionCheckRes.Status, vocab.ADMISSION_CHECK_NAME, status_body,
                                    patch_type=PatchType.APPLY, field_manager=vocab.ADMISSION_CHECK_CONTROLLER,
                                    force=True)
