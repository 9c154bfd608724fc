"""Metacontroller composite-controller hook protocol, version v2 (docs/metacontroller.md#requests).

Requests are parsed leniently (Metacontroller may add fields); responses carry exactly the keys
the protocol defines, since v2 parses them strictly.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, TypedDict

import msgspec
from pydantic import BaseModel, ConfigDict, Field

from app import vocab
from app.api.objects import KubeObject, ObservedGroups


class HookRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    controller: KubeObject = Field(default_factory=dict)
    parent: KubeObject
    # {"Pod.v1": {"namespace/name": object}, ...}
    children: ObservedGroups = Field(default_factory=dict)
    related: ObservedGroups = Field(default_factory=dict)
    finalizing: bool = False


class CustomizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    controller: KubeObject = Field(default_factory=dict)
    parent: KubeObject


def sync_response(status: KubeObject, children: list[KubeObject], resync_after: float | None,
                  finalized: bool | None = None) -> dict[str, Any]:
    """Never built with a missing `children` or `status`: a 200 without them deletes or wipes."""
    body: dict[str, Any] = {"status": status, "children": children}
    if resync_after:
        body["resyncAfterSeconds"] = resync_after
    if finalized is not None:
        body["finalized"] = finalized
    return body


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
