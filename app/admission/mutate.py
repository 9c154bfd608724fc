"""The mutating half: the one default a schema cannot reach, and Metacontroller's finalizer.

`roles[].resources.accelerator` defaults to 1 on an acceleratable InstanceType (read live); an
explicit value, 0 included, is kept. Every other default lives in the CRD schema. A type that does
not exist is left alone (the validating half refuses it), and an object being deleted is not
mutated at all: a deleted InstanceType must not stand in the way of the update that clears the
finalizer.

A CREATE also gets Metacontroller's finalizer (docs/metacontroller.md#finalize): Metacontroller adds
it only at its first pass, and a delete that reaches the API server in between removes the object
at once, without the finalize hook, leaving its Pods to the garbage collector.
"""

from __future__ import annotations

import copy
from typing import Any

from app import vocab
from app.api.objects import KubeObject
from app.world import World

DEFAULT_ACCELERATOR = 1


def _roles(raw: KubeObject) -> list[Any]:
    spec = raw.get("spec")
    roles = spec.get("roles") if isinstance(spec, dict) else None
    return roles if isinstance(roles, list) else []


def _deleting(raw: KubeObject) -> bool:
    meta = raw.get("metadata")
    return bool(isinstance(meta, dict) and meta.get("deletionTimestamp"))


def roles_to_default(raw: KubeObject) -> list[tuple[int, str]]:
    """(index, instanceType) of every role whose accelerator is unset; empty for an object being deleted."""
    if _deleting(raw):
        return []
    out = []
    for index, role in enumerate(_roles(raw)):
        if not isinstance(role, dict):
            continue
        resources = role.get("resources")
        if isinstance(resources, dict) and resources.get("accelerator") is not None:
            continue
        instance_type = role.get("instanceType")
        if isinstance(instance_type, str) and instance_type:
            out.append((index, instance_type))
    return out


def accelerator_defaults(raw: KubeObject, world: World) -> list[dict[str, Any]]:
    """The JSONPatch (RFC 6902) operations that default the accelerator count."""
    ops: list[dict[str, Any]] = []
    roles = _roles(raw)
    for index, name in roles_to_default(raw):
        instance_type = world.instance_types.get(name)
        if instance_type is None or not instance_type.spec.acceleratable:
            continue
        resources = roles[index].get("resources")
        if isinstance(resources, dict):
            ops.append({"op": "add", "path": f"/spec/roles/{index}/resources/accelerator",
                        "value": DEFAULT_ACCELERATOR})
        else:
            ops.append({"op": "add", "path": f"/spec/roles/{index}/resources",
                        "value": {"accelerator": DEFAULT_ACCELERATOR}})
    return ops


def finalizer_on_create(raw: KubeObject, operation: str) -> list[dict[str, Any]]:
    """The JSONPatch operation that puts Metacontroller's finalizer on a deployment being created
    (none on another operation or when it is there)."""
    meta = raw.get("metadata")
    if operation != "CREATE" or not isinstance(meta, dict):
        return []
    finalizers = meta.get("finalizers")
    if finalizers is None:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [vocab.FINALIZER_METACONTROLLER]}]
    if not isinstance(finalizers, list) or vocab.FINALIZER_METACONTROLLER in finalizers:
        return []  # a malformed list is the validating half's to refuse
    return [{"op": "add", "path": "/metadata/finalizers/-", "value": vocab.FINALIZER_METACONTROLLER}]


def apply_patch(raw: KubeObject, ops: list[dict[str, Any]]) -> KubeObject:
    """Applies our own `add` operations (what the API server does with the patch), on a copy."""
    out = copy.deepcopy(raw)
    for op in ops:
        if op.get("op") not in ("add", "replace"):
            raise ValueError(f"unsupported patch operation {op.get('op')!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
        else:
            node[last] = copy.deepcopy(op["value"])
    return out
