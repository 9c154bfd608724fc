"""OpenAPI descriptions of the Metacontroller hook bodies (protocol v2).

The hook handlers read raw bytes through one door (app/api/hooks.py `parse_sync`: one fast
decode, the shape check, the parent's model), so FastAPI cannot infer their bodies; these models
only document them in /openapi.json. Example: examples/hooks/sync-request.json.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment, ModelDeploymentStatus

KEYED = ("Objects keyed `<Kind>.<apiVersion>` (e.g. `Pod.v1`), then `<namespace>/<name>` "
         "(`<name>` for cluster-scoped objects).")


class SyncRequest(BaseModel):
    """Metacontroller's sync or finalize request for one ModelDeployment."""

    model_config = ConfigDict(title="SyncRequest")
    controller: KubeObject = Field(default_factory=dict, description="The CompositeController object.")
    parent: ModelDeployment = Field(description="The ModelDeployment, as stored (status included).")
    children: dict[str, dict[str, KubeObject]] = Field(
        default_factory=dict, description=f"The observed children. {KEYED}")
    related: dict[str, dict[str, KubeObject]] = Field(
        default_factory=dict,
        description=f"The objects the customize hook asked for (InstanceTypes, KV cache pool, binding and "
                    f"backend, ModelArtifact, Kueue Workloads). {KEYED}")
    finalizing: bool = Field(default=False, description="True on /hooks/finalize.")


class SyncResponse(BaseModel):
    """The desired children and the status; never sent without both (any failure answers non-200)."""

    model_config = ConfigDict(title="SyncResponse", populate_by_name=True)
    status: ModelDeploymentStatus
    children: list[KubeObject] = Field(description="Every desired child: Pods, Services, router objects.")
    resyncAfterSeconds: float | None = Field(default=None, description="Ask for another pass after this long.")
    finalized: bool | None = Field(default=None, description="On /hooks/finalize: true once every child is gone.")


class CustomizeRequest(BaseModel):
    model_config = ConfigDict(title="CustomizeRequest")
    controller: KubeObject = Field(default_factory=dict)
    parent: ModelDeployment


class RelatedResourceRule(BaseModel):
    model_config = ConfigDict(title="RelatedResourceRule")
    apiVersion: str
    resource: str
    namespace: str | None = None
    names: list[str] | None = None
    labelSelector: dict[str, Any] | None = None


class CustomizeResponse(BaseModel):
    model_config = ConfigDict(title="CustomizeResponse")
    relatedResources: list[RelatedResourceRule]


class HookError(BaseModel):
    """Any non-200 answer: Metacontroller leaves children and status as they are and retries."""

    model_config = ConfigDict(title="HookError")
    error: str


_ERRORS = {
    "400": "a malformed request (not JSON, not a v2 hook request)",
    "422": "the parent does not match the ModelDeployment schema",
    "429": "the deployment cannot be rendered now (Retry-After: 30 s when it resolves by itself, 300 s when it "
           "needs an edit); a RenderFailed Event says why",
    "500": "an internal error",
}
_HOOKS: dict[str, tuple[type[BaseModel], type[BaseModel], tuple[str, ...]]] = {
    "/hooks/sync": (SyncRequest, SyncResponse, ("400", "422", "429", "500")),
    "/hooks/finalize": (SyncRequest, SyncResponse, ("400", "422", "429", "500")),
    "/hooks/customize": (CustomizeRequest, CustomizeResponse, ("400", "422", "500")),
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.model_config.get('title') or model.__name__}"}


def describe_hooks(app: FastAPI) -> None:
    """Replaces app.openapi with one that carries the hook bodies' schemas."""
    default = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = default()
        models: list[type[BaseModel]] = [SyncRequest, SyncResponse, CustomizeRequest, CustomizeResponse, HookError]
        _, definitions = models_json_schema([(m, "validation") for m in models],
                                            ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(definitions.get("$defs", {}))
        for path, (request, response, errors) in _HOOKS.items():
            operation = schema["paths"].get(path, {}).get("post")
            if operation is None:
                continue
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(request)}}}
            operation["responses"] = {
                "200": {"description": "children and status" if response is SyncResponse else "related rules",
                        "content": {"application/json": {"schema": _ref(response)}}},
                **{code: {"description": _ERRORS[code], "content": {"application/json": {"schema": _ref(HookError)}}}
                   for code in errors},
            }
        app.openapi_schema = schema
        return schema

    # Replacing the method is FastAPI's documented way to extend the generated schema.
    app.openapi = openapi  # type: ignore[method-assign]
