"""Rule 3: an update may not change a field that identifies the deployment
(docs/admission.md#frozen-and-editable-fields).

Frozen: `model`, `engine.name`, `kvCache` (its connector too), `router.name` in place (the block
may be added or removed), the set of roles and each role's `name` and `kind`, `roles[].size`,
`roles[].instanceType`, `roles[].resources`, `roles[].command`.

The rule reads what was actually sent. A merge patch replaces the `roles` list wholesale, so a role
restated without its `command` sets it to null: that is an edit to `command`, refused naming that
field, and the message says how to change one field instead.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from app import quantity
from app.admission.model import Refusal, Subject, role_path
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment, Role

DIFFERENT_DEPLOYMENT = (
    "a different value describes a different deployment, which is created rather than edited: create "
    "another ModelDeployment that declares it (this one keeps its name, status history and cache-pool "
    "registration only while these fields stay as they are)"
)
NULLED = (
    "this update sends no value for it, which is what a merge patch does to a field it omits "
    "(kubectl patch --type=merge replaces the roles list wholesale, so a role restated without this field "
    "sets it to null); change one field with a JSON patch (kubectl patch --type=json -p "
    "'[{\"op\":\"replace\",\"path\":\"/spec/roles/0/replicas\",\"value\":3}]') or send the whole object "
    "with kubectl apply or kubectl edit"
)

# Role resources are compared field by field so that the refusal names the exact path.
RESOURCE_FIELDS: tuple[tuple[str, str, bool], ...] = (
    # (python attribute, wire name, is a quantity)
    ("accelerator", "accelerator", True),
    ("accelerator_sliced_memory_percentage", "acceleratorSlicedMemoryPercentage", False),
    ("accelerator_sliced_cores_percentage", "acceleratorSlicedCoresPercentage", False),
    ("accelerator_partitioned_profile", "acceleratorPartitionedProfile", False),
    ("interface", "interface", True),
)


def _show(value: Any) -> str:
    if value is None:
        return "no value"
    if hasattr(value, "wire"):
        value = value.wire()
    if isinstance(value, list) and value and hasattr(value[0], "wire"):
        value = [v.wire() for v in value]
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _same_quantity(old: Any, new: Any) -> bool:
    if old is None or new is None:
        return old is new
    try:
        return quantity.parse(old) == quantity.parse(new)
    except quantity.QuantityError:
        return str(old) == str(new)


def _dump(value: Any) -> Any:
    return value.wire() if hasattr(value, "wire") else value


def _same(old: Any, new: Any) -> bool:
    return bool(_dump(old) == _dump(new))


def _lacks(raw: KubeObject, keys: tuple[Any, ...]) -> bool:
    """True when the object as sent carries no value at this path (absent or null)."""
    node: Any = raw
    for key in keys:
        if isinstance(key, int):
            if not isinstance(node, list) or key >= len(node):
                return True
            node = node[key]
        else:
            if not isinstance(node, dict) or node.get(key) is None:
                return True
            node = node[key]
    return node is None


def _refusal(subject: Subject, path: str, keys: tuple[Any, ...], what: str, old: Any, new: Any) -> Refusal:
    if old is not None and _lacks(subject.raw, keys):
        return Refusal(path, f"{what} is frozen and the stored object has {_show(old)}, but {NULLED}",
                       DIFFERENT_DEPLOYMENT)
    return Refusal(path, f"{what} is frozen: the stored object has {_show(old)}, this update sends {_show(new)}",
                   DIFFERENT_DEPLOYMENT)


def _check(out: list[Refusal], subject: Subject, path: str, keys: tuple[Any, ...], what: str, old: Any, new: Any,
           same: Callable[[Any, Any], bool] = _same) -> None:
    if not same(old, new):
        out.append(_refusal(subject, path, keys, what, old, new))


def frozen_fields(subject: Subject) -> list[Refusal]:
    """Rule 3 on UPDATE: every frozen field the update changes, each at its own path."""
    old, new = subject.old, subject.md
    if old is None:
        return []
    out: list[Refusal] = []
    out += _deployment_fields(subject, old, new)
    out += _role_set(subject, old, new)
    for index, role in enumerate(new.spec.roles):
        before = old.role(role.name)
        if before is not None:
            out += _role_fields(subject, index, before, role)
    return out


def _deployment_fields(subject: Subject, old: ModelDeployment, new: ModelDeployment) -> list[Refusal]:
    out: list[Refusal] = []
    o, n = old.spec, new.spec
    _check(out, subject, "spec.model.name", ("spec", "model", "name"), "the served model", o.model.name, n.model.name)
    old_ref = o.model.artifact_ref.name if o.model.artifact_ref else None
    new_ref = n.model.artifact_ref.name if n.model.artifact_ref else None
    _check(out, subject, "spec.model.artifactRef", ("spec", "model", "artifactRef"), "the model artifact",
           old_ref, new_ref)
    _check(out, subject, "spec.engine.name", ("spec", "engine", "name"), "the engine", o.engine.name, n.engine.name)
    if o.kv_cache is None or n.kv_cache is None:
        _check(out, subject, "spec.kvCache", ("spec", "kvCache"), "the KV cache attachment", o.kv_cache, n.kv_cache)
    else:
        _check(out, subject, "spec.kvCache.poolRef.name", ("spec", "kvCache", "poolRef", "name"),
               "the KV cache binding", o.kv_cache.pool_ref.name, n.kv_cache.pool_ref.name)
        _check(out, subject, "spec.kvCache.connector", ("spec", "kvCache", "connector"), "the KV cache connector",
               o.kv_cache.connector, n.kv_cache.connector)
    if o.router is not None and n.router is not None and o.router.name != n.router.name:
        out.append(Refusal(
            "spec.router.name",
            f"the router is frozen in place: the stored object has {o.router.name!r}, this update sends "
            f"{n.router.name!r}",
            "remove the router block in one update and add the new router in the next (the block may be added "
            "or removed), or create another deployment that declares it",
        ))
    return out


def _role_set(subject: Subject, old: ModelDeployment, new: ModelDeployment) -> list[Refusal]:
    before = [r.name for r in old.spec.roles]
    after = [r.name for r in new.spec.roles]
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    if not added and not removed:
        return []
    parts = []
    if added:
        parts.append(f"adds {', '.join(repr(n) for n in added)}")
    if removed:
        parts.append(f"removes {', '.join(repr(n) for n in removed)}")
    problem = (f"the set of roles is frozen (stored: {', '.join(before)}); this update {' and '.join(parts)}"
               + (" — a rename is a removal plus an addition" if added and removed else ""))
    remedy = ("a different role set describes a different deployment, which is created rather than edited: create "
              "another ModelDeployment with these roles; scale a role with roles[].replicas instead")
    if removed:
        remedy += ("; if you meant to edit one role with kubectl patch --type=merge, the list you sent replaced the "
                   "stored one: use kubectl patch --type=json on /spec/roles/<index>/<field>")
    return [Refusal("spec.roles", problem, remedy)]


def _role_fields(subject: Subject, index: int, old: Role, new: Role) -> list[Refusal]:
    out: list[Refusal] = []
    keys = ("spec", "roles", index)
    _check(out, subject, role_path(index, "kind"), (*keys, "kind"), f"the kind of role {new.name!r}", old.kind,
           new.kind)
    _check(out, subject, role_path(index, "size"), (*keys, "size"), f"the size of role {new.name!r}", old.size,
           new.size)
    _check(out, subject, role_path(index, "instanceType"), (*keys, "instanceType"),
           f"the instanceType of role {new.name!r}", old.instance_type, new.instance_type)
    for attr, wire, is_quantity in RESOURCE_FIELDS:
        _check(out, subject, role_path(index, "resources", wire), (*keys, "resources", wire),
               f"resources.{wire} of role {new.name!r}", getattr(old.resources, attr), getattr(new.resources, attr),
               _same_quantity if is_quantity else _same)
    _check(out, subject, role_path(index, "command"), (*keys, "command"), f"the command of role {new.name!r}",
           old.command or None, new.command or None)
    return out
