"""Generate the CRDs from the pydantic models, like controller-gen does from Go types.

pydantic emits JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema: no `$ref`, no
`null` branches, no titles, and its own `x-kubernetes-*` extras. The committed YAML under
`manifests/crds/` is this module's output; a test fails when they drift.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app import vocab
from app.api import cluster, scaler, v1
from app.api.objects import KubeObject
from app.api.schema import structural


def _preserving(schema: dict[str, Any]) -> dict[str, Any]:
    """A supporting resource keeps fields we do not model (its owners' controllers write them)."""
    return {**schema, "x-kubernetes-preserve-unknown-fields": True}


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    scope: str,
    description: str,
    spec_schema: dict[str, Any],
    status_schema: dict[str, Any],
    printer_columns: list[dict[str, Any]] | None = None,
    spec_required: bool = True,
    scale: dict[str, str] | None = None,
) -> KubeObject:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "APIVersion of this representation of the object."},
        "kind": {"type": "string", "description": "Kind of the object."},
        "metadata": {"type": "object"},
        "spec": spec_schema,
        "status": status_schema,
    }
    root: dict[str, Any] = {"type": "object", "description": description, "properties": properties}
    if spec_required:
        root["required"] = ["spec"]
    version: dict[str, Any] = {
        "name": vocab.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
        "subresources": {"status": {}, **({"scale": scale} if scale else {})},
    }
    if printer_columns:
        version["additionalPrinterColumns"] = printer_columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{vocab.GROUP}"},
        "spec": {
            "group": vocab.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": [vocab.CATEGORY],
            },
            "scope": scope,
            "versions": [version],
        },
    }


def _age() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def model_deployment_crd() -> KubeObject:
    spec = structural(v1.ModelDeploymentSpec)
    spec["description"] = "Desired state: the model, the engine and 1-10 inference roles."
    status = structural(v1.ModelDeploymentStatus)
    status["description"] = "Observed state, rebuilt on every sync."
    return _crd(
        kind=vocab.KIND_MODEL_DEPLOYMENT,
        plural=vocab.PLURAL_MODEL_DEPLOYMENTS,
        short_names=["md"],
        scope="Namespaced",
        description="ModelDeployment serves one model with 1-10 inference roles (Server, Prefill, Decode), "
        "each with replicas (independent instances) of size Pods.",
        spec_schema=spec,
        status_schema=status,
        printer_columns=[
            {"name": "Engine", "type": "string", "jsonPath": ".spec.engine.name"},
            {"name": "Roles", "type": "string", "jsonPath": ".status.roleSummary"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint", "priority": 0},
            _age(),
        ],
    )


def model_deployment_scaler_crd() -> KubeObject:
    """The scaler's CRD: its `scale` subresource is what HPA, KEDA and `kubectl scale` drive."""
    spec = structural(scaler.ModelDeploymentScalerSpec)
    spec["description"] = "The deployment, its roles with their ratios, and the units (replicas) to run."
    status = structural(scaler.ModelDeploymentScalerStatus)
    status["description"] = "Observed state of the governed roles, rebuilt on every sync."
    return _crd(
        kind=vocab.KIND_MODEL_DEPLOYMENT_SCALER,
        plural=vocab.PLURAL_MODEL_DEPLOYMENT_SCALERS,
        short_names=[vocab.SHORT_NAME_MODEL_DEPLOYMENT_SCALER],
        scope="Namespaced",
        description="ModelDeploymentScaler scales roles of one ModelDeployment together at fixed ratios through a "
        "scale subresource (HPA, KEDA, kubectl scale): each unit is ratio replicas of every listed role.",
        spec_schema=spec,
        status_schema=status,
        printer_columns=[
            {"name": "Deployment", "type": "string", "jsonPath": ".spec.deploymentRef.name"},
            {"name": "Roles", "type": "string", "jsonPath": ".status.roleRatios"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Declared", "type": "integer", "jsonPath": ".status.replicas", "priority": 1},
            {"name": "Last Request", "type": "date", "jsonPath": ".status.lastRequestTime", "priority": 1},
            _age(),
        ],
        scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
               "labelSelectorPath": ".status.selector"},
    )


def _supporting(model: type[BaseModel], field: str) -> dict[str, Any]:
    # Every caller's `spec`/`status` field is annotated with a model class; pydantic types an
    # annotation as `type[Any] | None`.
    schema = structural(model.model_fields[field].annotation)  # type: ignore[arg-type]
    return _preserving(schema)


def supporting_crds() -> list[KubeObject]:
    # (model, kind, plural, short names, scope, description, printer columns)
    rows: list[tuple[type[BaseModel], str, str, list[str], str, str, list[dict[str, Any]]]] = [
        (cluster.InstanceType, vocab.KIND_INSTANCE_TYPE, vocab.PLURAL_INSTANCE_TYPES, ["instype"], "Cluster",
         "InstanceType: a pool of identical nodes and its Kueue entrance (read by ModelDeployment).",
         [{"name": "Entrance", "type": "string", "jsonPath": ".status.entrance"},
          {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]),
        (cluster.KVCachePool, vocab.KIND_KV_CACHE_POOL, vocab.PLURAL_KV_CACHE_POOLS, ["kvcp"], "Cluster",
         "KVCachePool: a Mooncake store pool and its published client endpoint.",
         [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
          {"name": "Endpoint", "type": "string", "jsonPath": ".status.clientEndpoint"}]),
        (cluster.KVCachePoolBinding, vocab.KIND_KV_CACHE_POOL_BINDING, vocab.PLURAL_KV_CACHE_POOL_BINDINGS,
         ["kvcpb"], "Namespaced",
         "KVCachePoolBinding grants a namespace a KVCachePool in one reuse domain.",
         [{"name": "Pool", "type": "string", "jsonPath": ".spec.poolRef.name"},
          {"name": "Domain", "type": "string", "jsonPath": ".spec.domain.name"},
          {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]),
        (cluster.KVCacheBackend, vocab.KIND_KV_CACHE_BACKEND, vocab.PLURAL_KV_CACHE_BACKENDS, ["kvcb"], "Cluster",
         "KVCacheBackend: the member groups of a pool and their transport protocols.", []),
        (cluster.ModelArtifact, vocab.KIND_MODEL_ARTIFACT, vocab.PLURAL_MODEL_ARTIFACTS, ["mart"], "Namespaced",
         "ModelArtifact: model weights from a hub or a volume, resolved to a revision.", []),
    ]
    crds = []
    for model, kind, plural, short, scope, description, columns in rows:
        spec = _supporting(model, "spec")
        status = _supporting(model, "status") if "status" in model.model_fields else {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}
        crds.append(_crd(kind=kind, plural=plural, short_names=short, scope=scope, description=description,
                         spec_schema=spec, status_schema=status, printer_columns=columns + [_age()],
                         spec_required=kind == vocab.KIND_KV_CACHE_POOL_BINDING))
    return crds


def all_crds() -> dict[str, KubeObject]:
    """File name -> CRD, in a stable order."""
    crds = [model_deployment_crd(), model_deployment_scaler_crd(), *supporting_crds()]
    return {f"{crd['metadata']['name']}.yaml": crd for crd in crds}
