"""Helpers that let pydantic models carry the Kubernetes OpenAPI extras of their CRD.

The CRD YAML is generated from the models (`app/api/crd.py`); these annotations are how a field
says "I am a list-map keyed by name" or "I am an int-or-string quantity".
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from app import quantity

def _representable(value: int | str) -> int | str:
    """A quantity too large to be represented (e.g. "1e999999") is refused where it is read, naming
    its field, instead of failing every render that multiplies it (issue 12)."""
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


def list_map(*keys: str) -> dict[str, Any]:
    """Schema extras for a list merged by key (`x-kubernetes-list-type: map`)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def cel(rule: str, message: str, *, optional_old_self: bool = False) -> dict[str, Any]:
    validation: dict[str, Any] = {"rule": rule, "message": message}
    if optional_old_self:
        validation["optionalOldSelf"] = True
    return validation


def doc_field(description: str, **kwargs: Any) -> Any:
    """A Field whose description becomes `kubectl explain` text."""
    return Field(description=description, **kwargs)


class KubeModel(BaseModel):
    """Base for API objects: camelCase on the wire, unknown fields ignored when reading."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire(self) -> dict[str, Any]:
        """The object as it travels: aliases, no nulls."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

