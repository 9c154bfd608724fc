"""The one formatter of pydantic error locations (app/api/strict.py `field_path`)."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.strict import field_path


@pytest.mark.parametrize(("loc", "path"), [
    (("spec", "roles", 0, "replicas"), "spec.roles[0].replicas"),
    # pydantic's union-branch tags are not fields
    (("spec", "roles", 1, "resources", "accelerator", "int"), "spec.roles[1].resources.accelerator"),
    (("spec", "roles", 0, "resources", "memory", "function-after[_representable(), union[int,str]]"),
     "spec.roles[0].resources.memory"),
    # a map key with a dash is a field name
    (("metadata", "labels", "app-name"), "metadata.labels.app-name"),
    ((), "object"),
])
def test_a_location_reads_as_the_field_path(loc: tuple[Any, ...], path: str) -> None:
    assert field_path(loc) == path
