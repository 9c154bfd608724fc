"""Helpers that let pydantic models carry the Kubernetes OpenAPI extras of their CRD.

The CRD YAML is generated from the models (`app/api/crd.py`); these annotations are how a field
says "I am a list-map keyed by name" or "I am an int-or-string quantity", and `structural` turns a
model into the structural OpenAPI schema a CRD carries (the hook door reads it too: app/api/strict.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

from app import quantity

def _representable(value: int | str) -> int | str:
    """A quantity too large to be represented (e.g. "1e999999") is refused where it is read, naming
    its field, instead of failing every render that multiplies it (docs/metacontroller.md#trust)."""
    problem = quantity.unrepresentable(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A Kubernetes quantity ("2", 2, "500m"). Parsed by app.quantity where a number is needed.
Quantity = Annotated[
    int | str,
    AfterValidator(_representable),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        }
    ),
]


def _parseable(value: int | str) -> int | str:
    quantity.parse(value)  # QuantityError is a ValueError: pydantic reports it on the field
    return value


# A quantity the operator multiplies (an InstanceType's unit resources): one that does not parse
# makes the object malformed, named once in a RenderFailed Event, not an error in every render.
ReadQuantity = Annotated[Quantity, AfterValidator(_parseable)]


def list_map(*keys: str) -> dict[str, Any]:
    """Schema extras for a list merged by key (`x-kubernetes-list-type: map`)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def cel(rule: str, message: str, *, optional_old_self: bool = False, field_path: str | None = None,
        reason: str | None = None) -> dict[str, Any]:
    validation: dict[str, Any] = {"rule": rule, "message": message}
    if optional_old_self:
        validation["optionalOldSelf"] = True
    if field_path:
        validation["fieldPath"] = field_path
    if reason:
        validation["reason"] = reason
    return validation


# --- frozen fields as CEL transition rules (docs/admission.md#frozen-fields-in-the-crd-cel) ---------
# The webhook (app.admission.frozen) refuses the same edits with per-request detail; these rules keep
# the fields frozen when the webhook is bypassed. A rule with `oldSelf` runs on updates only, and
# only where the field exists on both sides (list-map items are matched by key).

FROZEN_WHY = ("a different value describes a different deployment, which is created rather than edited: create "
              "another ModelDeployment that declares it")
FROZEN_MERGE_PATCH = ("; a merge patch restating the roles list without this field sends no value for it, so change "
                      "one field with kubectl patch --type=json, or send the whole object with kubectl apply or edit")


def frozen_message(path: str, *, in_role: bool = False, note: str = "") -> str:
    return f"{path} is frozen: {FROZEN_WHY}" + (f"; {note}" if note else "") + (FROZEN_MERGE_PATCH if in_role else "")


def frozen(path: str, *, quantity: bool = False, in_role: bool = False, note: str = "") -> dict[str, Any]:
    """Schema extras: this field may not change on update (a quantity compares as written: 1 and "1" agree)."""
    rule = "string(self) == string(oldSelf)" if quantity else "self == oldSelf"
    message = frozen_message(path, in_role=in_role, note=note)
    return {"x-kubernetes-validations": [cel(rule, message, reason="FieldValueForbidden")]}


def frozen_presence(path: str, field: str, *, parent: str | None = None, in_role: bool = False) -> dict[str, Any]:
    """A rule on the enclosing object: an optional frozen field may not be added or removed.

    `parent` names an optional object between this one and the field (roles[].resources.accelerator)."""
    if parent:
        new, old = f"(has(self.{parent}) && has(self.{parent}.{field}))", f"(has(oldSelf.{parent}) && has(oldSelf.{parent}.{field}))"
        field_path = f".{parent}.{field}"
    else:
        new, old = f"has(self.{field})", f"has(oldSelf.{field})"
        field_path = f".{field}"
    message = f"{path} is frozen and may not be added or removed: {FROZEN_WHY}" + (FROZEN_MERGE_PATCH if in_role else "")
    return cel(f"{new} == {old}", message, field_path=field_path, reason="FieldValueForbidden")


class KubeModel(BaseModel):
    """Base for API objects: camelCase on the wire, unknown fields ignored when reading."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire(self) -> dict[str, Any]:
        """The object as it travels: aliases, no nulls."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- the structural schema of a model (what a CRD carries) -------------------------------------

# Defaults that carry no information would be written into every stored object; keep scalars only.
_DROPPED_KEYS = {"title"}


def structural(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI schema of a model, with every `$ref` inlined."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _clean(raw, defs)
    return schema


def _clean(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _clean(merged, defs)
    any_of = node.get("anyOf")
    if any_of and any(branch.get("type") == "null" for branch in any_of):
        rest = [branch for branch in any_of if branch.get("type") != "null"]
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        if len(rest) == 1:
            merged = {**rest[0], **merged}
        else:
            merged["anyOf"] = rest
        return _clean(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "default" and (value is None or value == [] or value == {}):
            continue
        if key == "const":
            out["enum"] = [value]
            if "type" not in node:
                out["type"] = "string" if isinstance(value, str) else "integer"
            continue
        if key == "properties":
            out[key] = {name: _clean(prop, defs) for name, prop in value.items()}
            continue
        out[key] = _clean(value, defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out
