"""What a hook request must be before anything is planned from it (docs/metacontroller.md#trust).

The hooks port answers anyone who can reach it, and a plan made from a malformed request is
dangerous: an absent child map reads as "no children" (Metacontroller would delete every Pod), a
parent without a name or uid cannot be checked against the API server. So every field the
planner reads is type-checked here first, and a request that fails is answered 400 naming the
field, what is wrong and the way out. The check validates only; the planner keeps reading the
request as decoded (unknown fields stay).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Optional, TypedDict

import msgspec
import orjson
from pydantic import ValidationError

from app import quantity, vocab
from app.api.schema import structural
from app.api.v1 import ModelDeploymentSpec

REMEDY = "send a Metacontroller v2 hook request for a stored ModelDeployment (docs/metacontroller.md#trust)"

Int64 = Annotated[int, msgspec.Meta(ge=-vocab.MAX_INT64 - 1, le=vocab.MAX_INT64)]


class BadHookRequest(ValueError):
    """A hook request nothing is planned from, answered `status_code` without touching anything:
    400 when it is not a well-formed hook request, 422 when its parent (or the object it names)
    does not match its schema. The message names the field, what is wrong and the way out."""

    def __init__(self, message: str, *, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code

    @property
    def kind(self) -> str:
        """The `kind` label of the hook-errors metric (docs/operations.md#metrics)."""
        return "invalid_parent" if self.status_code == 422 else "bad_request"


def field_errors(exc: ValidationError) -> str:
    """The first errors as `path: message` (pydantic's own list echoes the input, which may be huge)."""
    return "; ".join(f"{field_path(tuple(e.get('loc', ())))}: {e.get('msg')}"
                     for e in exc.errors(include_url=False, include_input=False)[:3])


# The union-branch tags pydantic appends to a location (`accelerator.int`,
# `function-after[...]`): not field names.
_BRANCH_TAGS = {"int", "str", "float", "bool", "list", "dict", "none", "literal"}


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the field path users write: `spec.roles[0].replicas`
    (`object` for the whole object). The one formatter of hooks, admission and the scaler's admission."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc
                   if isinstance(p, int) or (p not in _BRANCH_TAGS and "[" not in str(p))).lstrip(".") or "object"


def json_body(raw: bytes) -> Any:
    """A hook request's bytes as JSON values, or BadHookRequest (400)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadHookRequest(f"request body is not JSON: {exc}") from exc


def schema_mismatch(exc: ValidationError, what: str) -> BadHookRequest:
    """422: `what` (the parent, or the object it names) does not match its schema."""
    return BadHookRequest(f"the {what} does not match the schema: {field_errors(exc)}", status_code=422)


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


class _NotReady(TypedDict, total=False):
    ordinal: Int64
    stage: str
    since: str


class _RoleStatus(TypedDict, total=False):
    name: str
    kind: Optional[str]
    desired: Optional[Int64]
    ready: Optional[Int64]
    quotaReserved: Optional[Int64]
    admitted: Optional[Int64]
    notReady: Optional[list[_NotReady]]


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


# --- values the planner parses beyond the models ------------------------------------------------
# The parent's spec is read through the ModelDeployment model (a value of the wrong type answers
# 422 naming it), the related objects through theirs (a malformed one reads as absent and the
# render names it: docs/architecture.md#flow-of-one-sync). What neither model checks is checked
# here, along the generated CRD schema so that a new field is covered: a quantity must parse (the
# CRD's pattern: the API server stores no other), and no integer may exceed the 64 bits Kubernetes
# stores one in (the answer could not carry it back).


@lru_cache(maxsize=1)
def _quantity_paths() -> tuple[tuple[str, ...], ...]:
    """Every int-or-string (quantity) field of the ModelDeployment spec, `*` for a list's items."""
    spec = structural(ModelDeploymentSpec)
    found: list[tuple[str, ...]] = []

    def walk(schema: dict[str, Any], path: tuple[str, ...]) -> None:
        if schema.get("x-kubernetes-int-or-string"):
            found.append(path)
        for key, item in (schema.get("properties") or {}).items():
            walk(item, (*path, key))
        if isinstance(schema.get("items"), dict):
            walk(schema["items"], (*path, "*"))

    walk(spec, ())
    return tuple(found)


def _values_at(value: Any, path: tuple[str, ...], where: str) -> list[tuple[str, Any]]:
    """The (path, value) pairs a schema path reaches in a JSON value (`*` takes every list item)."""
    if not path:
        return [(where, value)]
    head, rest = path[0], path[1:]
    if head == "*":
        if not isinstance(value, list):
            return []
        return [pair for index, item in enumerate(value) for pair in _values_at(item, rest, f"{where}[{index}]")]
    if not isinstance(value, dict) or head not in value:
        return []
    return _values_at(value[head], rest, f"{where}.{head}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parent_quantities(body: dict[str, Any]) -> None:
    """Every quantity of the parent's spec (roles[].resources.accelerator, .interface …) parses."""
    spec = body["parent"].get("spec")
    for path in _quantity_paths():
        for where, value in _values_at(spec, path, "$.parent.spec"):
            if value is None or isinstance(value, bool) or not isinstance(value, (int, str)):
                continue  # another type: the model refuses it (422 naming the field)
            try:
                amount = quantity.parse(value)
            except quantity.QuantityError as exc:
                form = "" if "larger than" in str(exc) else " (a number with an optional suffix, as in 2, 500m or 16Gi)"
                raise BadHookRequest(f"{where}: {exc}{form}; the API server stores no other value here — {REMEDY}") \
                    from exc
            if abs(amount) > quantity.LIMIT:
                raise BadHookRequest(f"{where}: {_shown(value)} is larger than a Kubernetes quantity can hold — {REMEDY}")


def out_of_range(value: Any, where: str) -> tuple[str, int] | None:
    """The path and value of the first integer in `value` (a JSON tree) beyond int64, or None."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            stack.extend((item, f"{path}.{key}") for key, item in node.items()
                         if isinstance(item, (dict, list, int)))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(node)
                         if isinstance(item, (dict, list, int)))
        elif isinstance(node, int) and not -vocab.MAX_INT64 - 1 <= node <= vocab.MAX_INT64:
            return path, node
    return None


def integers_in_range(value: Any, where: str) -> None:
    """No integer in `value` beyond int64, the range the API server stores (else BadHookRequest)."""
    found = out_of_range(value, where)
    if found is not None:
        raise BadHookRequest(f"{found[0]}: {_shown(found[1])} is beyond the 64-bit integers Kubernetes stores, so no "
                             f"stored object holds it — {REMEDY}")


def _related_integers(body: dict[str, Any]) -> None:
    """The related objects read through models (InstanceTypes, the cache chain, artifacts): Kueue
    Workloads, one per replica, are read raw for a few strings, so their numbers are not walked."""
    for group, by_name in (body.get("related") or {}).items():
        if group.startswith(f"{vocab.KIND_WORKLOAD}."):
            continue
        for key, obj in (by_name or {}).items():
            integers_in_range(obj, f"$.related[{group!r}][{key!r}]")


def check_sync_request(body: Any) -> None:
    """A sync or finalize request's shape, or BadHookRequest naming the first problem."""
    if not isinstance(body, dict):
        raise BadHookRequest(f"$: a hook request is a JSON object — {REMEDY}")
    parent_identity(body)
    declared_child_maps(body)
    _types(body, _SyncRequest)
    integers_in_range(body["parent"].get("spec"), "$.parent.spec")
    parent_quantities(body)
    _related_integers(body)


def check_customize_request(body: Any) -> None:
    if not isinstance(body, dict):
        raise BadHookRequest(f"$: a hook request is a JSON object — {REMEDY}")
    parent_identity(body)
    _types(body, _CustomizeRequest)
    integers_in_range(body["parent"].get("spec"), "$.parent.spec")
    parent_quantities(body)
