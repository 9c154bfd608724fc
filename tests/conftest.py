"""Shared fixtures: the example world and deployments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.world import World, load_yaml_objects

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def example(name: str) -> dict[str, Any]:
    return load_yaml_objects(EXAMPLES / "deployments" / f"{name}.yaml")[0]


def world_objects() -> list[dict[str, Any]]:
    return load_yaml_objects(EXAMPLES / "world")


@pytest.fixture
def world() -> World:
    return World.of(world_objects())
