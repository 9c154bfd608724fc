"""What a hook request must be before anything is planned from it (docs/metacontroller.md#trust).

The hooks port answers anyone who can reach it, and a plan made from a malformed request is
dangerous: an absent child map reads as "no children" (Metacontroller would delete every Pod), a
parent without a name or uid cannot be checked against the API server. So every field the
planner reads is type-checked here first, and a request that fails is answered 400 naming the
field, what is wrong and the way out. The check validates only; the planner keeps reading the
request as decoded (unknown fields stay).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, TypedDict

import msgspec

from app import vocab

REMEDY = "send a Metacontroller v2 hook request for a stored ModelDeployment (docs/metacontroller.md#trust)"

Int64 = Annotated[int, msgspec.Meta(ge=-vocab.MAX_INT64 - 1, le=vocab.MAX_INT64)]


class BadHookRequest(ValueError):
    """Answered 400: the message names the field, what is wrong and the way out."""


class _Condition(TypedDict, total=False):
    type: str
    status: str
    reason: Optional[str]
    message: Optional[str]
    lastTransitionTime: Optional[str]
    observedGeneration: Optional[Int64]


class _AdmissionCheck(TypedDict, total=False):
    name: str
    state: str
    message: Optional[str]
    lastTransitionTime: Optional[str]


class _Meta(TypedDict, total=False):
    name: str
    namespace: Optional[str]
    uid: Optional[str]
    resourceVersion: Optional[str]
    generation: Optional[Int64]
    labels: Optional[dict[str, str]]
    annotations: Optional[dict[str, str]]
    finalizers: Optional[list[str]]
    ownerReferences: Optional[list[dict[str, Any]]]
    deletionTimestamp: Optional[str]
    creationTimestamp: Optional[str]


class _ObjectStatus(TypedDict, total=False):
    phase: Optional[str]
    conditions: Optional[list[_Condition]]
    admissionChecks: Optional[list[_AdmissionCheck]]


class _Object(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _Meta
    spec: Optional[dict[str, Any]]
    status: Optional[_ObjectStatus]


class _RoleStatus(TypedDict, total=False):
    name: str
    kind: Optional[str]
    desired: Optional[Int64]
    ready: Optional[Int64]
    quotaReserved: Optional[Int64]
    admitted: Optional[Int64]


class _ParentStatus(TypedDict, total=False):
    phase: Optional[str]
    roles: Optional[list[_RoleStatus]]
    conditions: Optional[list[_Condition]]


class _Parent(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _Meta
    spec: dict[str, Any]
    status: Optional[_ParentStatus]


class _SyncRequest(TypedDict, total=False):
    controller: Optional[dict[str, Any]]
    parent: _Parent
    children: dict[str, Optional[dict[str, _Object]]]
    related: Optional[dict[str, Optional[dict[str, _Object]]]]
    finalizing: Optional[bool]


class _CustomizeRequest(TypedDict, total=False):
    controller: Optional[dict[str, Any]]
    parent: _Parent


def _types(body: Any, shape: type) -> None:
    try:
        msgspec.convert(body, shape)
    except msgspec.ValidationError as exc:
        # msgspec names the path (`$.parent.metadata.name`) and what it expected.
        raise BadHookRequest(f"{exc} — {REMEDY}") from exc


def parent_identity(body: dict[str, Any]) -> None:
    """metadata.name and metadata.uid: without them nothing can be checked against the API server."""
    if not isinstance(body.get("parent"), dict):
        raise BadHookRequest(f"$.parent: missing — {REMEDY}")
    meta = body["parent"].get("metadata")
    if not isinstance(meta, dict):
        raise BadHookRequest(f"$.parent.metadata: missing — {REMEDY}")
    for field in ("name", "uid"):
        if not isinstance(meta.get(field), str) or not meta[field]:
            raise BadHookRequest(f"$.parent.metadata.{field}: missing or empty; the parent's identity is what every "
                                 f"side effect is checked against — {REMEDY}")


def declared_child_maps(body: dict[str, Any]) -> None:
    """Every child map the CompositeController declares, each an object (empty when no children).

    Planning from an absent map would read as "no children" and delete them all."""
    children = body.get("children")
    if not isinstance(children, dict):
        raise BadHookRequest(f"$.children: missing; Metacontroller always sends every declared child map — {REMEDY}")
    for key in vocab.DECLARED_CHILD_MAPS:
        if not isinstance(children.get(key), dict):
            state = "missing" if key not in children else f"{type(children[key]).__name__}, not an object"
            raise BadHookRequest(f"$.children[{key!r}]: {state}; Metacontroller sends every declared child map, "
                                 f"empty when there are no such children — {REMEDY}")


def check_sync_request(body: Any) -> None:
    """A sync or finalize request's shape, or BadHookRequest naming the first problem."""
    if not isinstance(body, dict):
        raise BadHookRequest(f"$: a hook request is a JSON object — {REMEDY}")
    parent_identity(body)
    declared_child_maps(body)
    _types(body, _SyncRequest)


def check_customize_request(body: Any) -> None:
    if not isinstance(body, dict):
        raise BadHookRequest(f"$: a hook request is a JSON object — {REMEDY}")
    parent_identity(body)
    _types(body, _CustomizeRequest)
