"""Metacontroller composite-controller hook protocol, version v2 (docs/metacontroller.md#requests).

The one door for a ModelDeployment's hook requests: `parse_sync` and `parse_customize` read the
bytes, check every field the planner reads (app.api.strict) and parse the parent into its model,
once; anything wrong raises one BadHookRequest naming the field. Requests are otherwise read
leniently (Metacontroller may add fields); responses carry exactly the keys the protocol defines,
since v2 parses them strictly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypedDict

import msgspec
import orjson
from pydantic import ValidationError

from app import vocab
from app.api import strict
from app.api.objects import KubeObject, ObservedGroups
from app.api.strict import BadHookRequest
from app.api.v1 import ModelDeployment

__all__ = ["BadHookRequest", "HookRequest", "hook_request", "parse_customize", "parse_sync", "sync_response",
           "sync_response_bytes"]


@dataclass
class HookRequest:
    """A sync or finalize request as the planner reads it: checked, its parent parsed.

    `parent` is the stored object as sent (its status is the previous answer's); `deployment`
    the same object through the ModelDeployment model. Child and related maps are keyed
    `Kind.apiVersion`, then `namespace/name` (docs/metacontroller.md#requests)."""

    parent: KubeObject
    deployment: ModelDeployment
    children: ObservedGroups = field(default_factory=dict)
    related: ObservedGroups = field(default_factory=dict)
    finalizing: bool = False


def parse_sync(raw: bytes, *, finalizing: bool = False) -> HookRequest:
    """A sync (or, with `finalizing`, finalize) request from its bytes, or BadHookRequest."""
    return hook_request(_decode_sync(raw), finalizing=finalizing)


def hook_request(body: Any, *, finalizing: bool = False) -> HookRequest:
    """A sync or finalize request from decoded JSON values (the CLI, tests and benchmarks enter here)."""
    strict.check_sync_request(body)
    return HookRequest(parent=body["parent"], deployment=_deployment(body["parent"]),
                       children=body["children"], related=body.get("related") or {},
                       finalizing=finalizing or bool(body.get("finalizing")))


def parse_customize(raw: bytes) -> ModelDeployment:
    """The parent of a customize request, or BadHookRequest."""
    body = strict.json_body(raw)
    strict.check_customize_request(body)
    return _deployment(body["parent"])


def _deployment(parent: KubeObject) -> ModelDeployment:
    try:
        return ModelDeployment.model_validate(parent)
    except ValidationError as exc:
        raise strict.schema_mismatch(exc, "parent ModelDeployment") from exc
    except RecursionError as exc:
        raise BadHookRequest("the parent is nested too deeply to be a ModelDeployment") from exc


def _decode_sync(raw: bytes) -> Any:
    """The request as plain values (managedFields dropped when it is shaped like a hook request)."""
    try:
        decoded = read_sync_request(raw)
    except RecursionError as exc:
        raise BadHookRequest("request body is nested too deeply to be a Metacontroller hook request") from exc
    return strict.json_body(raw) if decoded is None else decoded


def sync_response(status: KubeObject, children: list[KubeObject], resync_after: float | None,
                  finalized: bool | None = None) -> dict[str, Any]:
    """Never built with a missing `children` or `status`: a 200 without them deletes or wipes."""
    body: dict[str, Any] = {"status": status, "children": children}
    if resync_after:
        body["resyncAfterSeconds"] = resync_after
    if finalized is not None:
        body["finalized"] = finalized
    return body


def sync_response_bytes(answer: dict[str, Any]) -> bytes:
    """The answer as JSON; a value echoed from the request that JSON cannot carry (an integer beyond
    64 bits, nesting beyond orjson's limit) is the request's fault: BadHookRequest."""
    try:
        return orjson.dumps(answer)
    except orjson.JSONEncodeError as exc:
        raise BadHookRequest(f"the request carries a value the answer would echo but cannot encode ({exc}) — send "
                             "Kubernetes objects as the API server stores them") from exc


# --- reading a sync request off the wire ---------------------------------------------------------
#
# Every observed object carries `metadata.managedFields`: the API server's record of which client
# wrote which field (a `fieldsV1` tree as large as the object's spec and status together). It is
# bookkeeping for server-side apply; no decision reads it and no answer carries it (kept children
# return name, namespace, labels, annotations and spec only). client-go's informers strip it for
# the same reason (TransformStripManagedFields). Reading the numerous kinds without it makes parsing
# a large request much cheaper (bench/results.md#figures-quoted-from-the-code); every other field is
# read as before.

# ObjectMeta's fields (k8s.io/apimachinery/pkg/apis/meta/v1), all but managedFields.
_OBJECT_META_FIELDS = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                       "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
                       "ownerReferences", "finalizers")
# mypy reads a TypedDict's keys only from a literal; msgspec reads these at run time.
_ObjectMeta = TypedDict("_ObjectMeta", {name: Any for name in _OBJECT_META_FIELDS}, total=False)  # type: ignore[misc]
# The kinds read this way have exactly these top-level fields in their API schema.
_Object = TypedDict("_Object", {"apiVersion": Any, "kind": Any, "metadata": _ObjectMeta, "spec": Any,
                                "status": Any}, total=False)
_Request = TypedDict("_Request", {"controller": Any, "parent": Any, "finalizing": Any,
                                  "children": dict[str, msgspec.Raw], "related": dict[str, msgspec.Raw]}, total=False)

_STRIPPED_GROUPS = frozenset({vocab.CHILD_PODS, vocab.CHILD_SERVICES, vocab.CHILD_DEPLOYMENTS})
_STRIPPED_PREFIXES = (f"{vocab.KIND_WORKLOAD}.{vocab.KUEUE_GROUP}/",)

_request_decoder = msgspec.json.Decoder(_Request)
_objects_decoder = msgspec.json.Decoder(Optional[dict[str, _Object]])
_any_decoder = msgspec.json.Decoder()


def _group(key: str, raw: msgspec.Raw) -> Any:
    stripped = key in _STRIPPED_GROUPS or key.startswith(_STRIPPED_PREFIXES)
    return (_objects_decoder if stripped else _any_decoder).decode(raw)


def read_sync_request(raw: bytes) -> Mapping[str, Any] | None:
    """A sync/finalize request body as plain JSON values, without `managedFields` (see above).

    None when the body is not shaped like a hook request (not JSON, not an object, an observed
    object that is not an object...): the caller then parses it in full, which reports it as before.
    """
    try:
        body = _request_decoder.decode(raw)
        for section in ("children", "related"):
            if section in body:
                body[section] = {key: _group(key, value) for key, value in body[section].items()}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return body
